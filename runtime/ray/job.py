"""A dataset job's formats, columns and arguments, without Ray: what `seq2onnx translate-dataset` (cli.py) checks
before it imports Ray (seconds) or starts a cluster, and what dataset.py's actors and pipelines use."""
from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Dict, Sequence, Tuple

from ..cli.commands import (check_attention, load_translator, source_line_bytes, translate_options,
                            translation_records)
from ..errors import Seq2OnnxError

if TYPE_CHECKING:
    from ..translator import Translator

FORMATS = ("text", "jsonl", "parquet")
# the columns a job adds to its rows (and the readers' `line`): an input column of one of these names is replaced
LINE, TRANSLATION, HYPOTHESES, SCORES, OUTPUT, ERROR, WARNINGS, PATH = (
    "line", "translation", "hypotheses", "scores", "output", "error", "warnings", "path")
# the dests of `seq2onnx translate`'s flags that a dataset job has no use for: its input and output are the job's
# own, and its pictures would land on whichever node an actor runs on
NOT_FLAGS = ("input", "output", "plot_attention")


def file_format(path: str) -> str:
    """A file's format by its name (a compression suffix aside): .jsonl/.json JSONL, .parquet Parquet, else text."""
    name = path.lower()
    for suffix in (".gz", ".bz2", ".zst", ".lz4", ".snappy"):
        name = name.removesuffix(suffix)
    if name.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    return "parquet" if name.endswith(".parquet") else "text"


def parse_options(model: str, options: Sequence[str]) -> Tuple[argparse.Namespace, Dict[str, Any]]:
    """`seq2onnx translate`'s flags (options) for MODEL, parsed and checked as the command does:
    (its arguments, the translate_batch keywords). A flag a job cannot take is a one-line error."""
    args, decoding = translate_options([model, *options])
    refuse_flags(args)
    return args, decoding


def refuse_flags(args: argparse.Namespace) -> None:
    """`seq2onnx translate`'s flags that a dataset job does not take (NOT_FLAGS)."""
    for dest in NOT_FLAGS:
        if getattr(args, dest) is not None:
            raise Seq2OnnxError(f"--{dest.replace('_', '-')} is not an option of a dataset job: its input and output "
                                "are INPUT and OUTPUT, and --plot-attention is the single-process command's")


def model_path(model: str) -> str:
    """MODEL as every node can name it: an existing path made absolute (an actor's working folder is not the
    driver's), else as given (a shipped model's name)."""
    return os.path.abspath(model) if os.path.exists(model) else model


def load_checked(args: argparse.Namespace) -> Tuple[Translator, int]:
    """The Translator of `seq2onnx translate`'s arguments and its source limit in tokens, its attention checked
    when --return-alignment asks for it: an actor's, and the driver's check_model."""
    translator, limit = load_translator(args)
    if args.return_alignment:
        check_attention(translator, args)
    return translator, limit


def check_model(args: argparse.Namespace, decoding: Dict[str, Any]) -> int:
    """Load the model here with the options, as an actor will, and make the records its options become (a bad
    model or option is a one-line error before the cluster does any work); the bound of a text input line in bytes
    (commands.source_line_bytes)."""
    translator, limit = load_checked(args)
    translation_records(translator, args, decoding)
    return source_line_bytes(limit)
