"""`seq2onnx translate-dataset MODEL INPUT OUTPUT`: a bulk translation job on a Ray cluster (dataset.py), its rows
written to OUTPUT in the input's order by this process (the driver)."""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from contextlib import nullcontext
from typing import Any, BinaryIO, ContextManager, Dict, List, Optional

from ..cli.cli_io import PROG, open_output, open_path
from ..cli.commands import command_parser, translate_options
from ..errors import Seq2OnnxError
from . import connect
from .job import (ERROR, FORMATS, HYPOTHESES, LINE, NOT_FLAGS, OUTPUT, PATH, SCORES, TRANSLATION, WARNINGS, check_model,
                  file_format, model_path, refuse_flags)

NAME = "seq2onnx translate-dataset"
BLOCK_BYTES = 64 << 10                  # Ray Data's blocks (DataContext.target_max_block_size): ~1,000 lines of text

FORMAT = """\
INPUT: a file, or a folder of files (those whose names start with neither . nor _), on any filesystem Ray Data
reads (a local path every node can read, s3://, gs://, ...; .gz, .bz2, .zst by their suffix), by --input-format
(default: by INPUT's suffix: .jsonl/.json JSONL, .parquet Parquet, else text):
  text      a line each, read as `seq2onnx translate` reads its input (invalid UTF-8 replaced, a BOM dropped, a line
            cut to its byte bound, each with a warning);
  jsonl     an object a line, its --text-column field the text (--id-column: its id);
  parquet   its --text-column column the text (--id-column: its id).
OUTPUT: a file, written here as the rows come, in the input's order (files in the order Ray lists them), replaced
when everything is written (as `seq2onnx translate --output`; never INPUT, by any path or link), by --output-format
(default: by OUTPUT's suffix):
  text      `seq2onnx translate`'s output, byte for byte: the same lines as `seq2onnx translate MODEL < INPUT`
            with the same options (--n-best, --scores, --alignment included); a row that failed gets a blank line's
            output. Its rows' errors and warnings go to --errors FILE (default OUTPUT.errors.jsonl), an object a line:
            {"line": N, "error": ...} or {"line": N, "warning": ...} (and "path" where INPUT is several files);
  jsonl     an object a row: the id (--id-column's name, else "line": the row's 1-based line in its file),
            "translation" (the best hypothesis), "hypotheses" and "scores" (with --n-best or --scores), "error"
            (null, or why the row failed) and "warnings" (a list);
  parquet   the same columns.
A bad row (not JSON, no text, a translation that fails) does not stop the job: its error is recorded, and the
summary line on stderr counts them (exit status 0; 2 a bad option, MODEL, INPUT or OUTPUT, one line, before Ray
starts; 1 an unexpected error).
Ray: --ray-address auto joins the cluster this machine belongs to (`ray start`), ADDRESS another; without it,
Ray's own rule (RAY_ADDRESS, else that of `ray start` on this machine, else a cluster started for this job on this
machine, with Ray's token authentication on: its default). MODEL must be a path every node can read, or a shipped
model's name. --actors actors of --cpus-per-actor CPUs each load MODEL once and translate batches of --batch-size
rows (onnxruntime with --intra-threads, default the actor's CPUs); an actor that dies is started again and its
batches run again. Progress: Ray Data's progress bars, on stderr, with Ray's own lines;
among them, once, an error line of Ray's core_worker.cc: an actor "has constructor arguments in the object store
and max_restarts > 0" (ray-project/ray#53727). Those are Ray Data's own for its actors; they stay in the object
store until the job ends, so an actor's restart finds them.
The options below "input and batching" are `seq2onnx translate`'s (see its --help), less --input, --output and
--plot-attention.
"""


def _parser() -> argparse.ArgumentParser:
    """`seq2onnx translate`'s parser (its options, parsed and checked by the same code: commands.translate_options)
    with the job's arguments: INPUT, OUTPUT and the Ray group; translate's NOT_FLAGS hidden (refused if given)."""
    p = command_parser(NAME, "Translate a dataset on a Ray cluster.", FORMAT, NOT_FLAGS)
    p.add_argument("dataset_input", metavar="INPUT", help="the rows to translate (below)")
    p.add_argument("dataset_output", metavar="OUTPUT", help="the file to write (below)")
    g = p.add_argument_group("Ray")
    g.add_argument("--ray-address", metavar="auto|ADDRESS",
                   help="the cluster (ray.init's address; default: RAY_ADDRESS, else a new one on this machine)")
    g.add_argument("--actors", type=int, default=1, help="actors, one Translator each (default 1)")
    g.add_argument("--cpus-per-actor", type=float, default=1.0, help="CPUs an actor reserves (default 1)")
    g.add_argument("--gpus-per-actor", type=float, default=0.0, help="GPUs an actor reserves, for --device cuda "
                   "(default 0)")
    g.add_argument("--batch-size", type=int, default=256, help="rows per Ray batch, one actor call (default 256)")
    io = p.add_argument_group("dataset input and output")
    io.add_argument("--input-format", choices=("auto",) + FORMATS, default="auto")
    io.add_argument("--output-format", choices=("auto",) + FORMATS, default="auto")
    io.add_argument("--text-column", default="text", help="JSONL, Parquet: the field that holds the text "
                    "(default text)")
    io.add_argument("--id-column", help="JSONL, Parquet: a field that identifies a row, copied to the output")
    io.add_argument("--errors", metavar="FILE", help="text output: where its rows' errors and warnings go "
                    "(default OUTPUT.errors.jsonl)")
    return p


def translate_dataset_main(argv: List[str]) -> int:
    PROG["name"] = NAME
    args, decoding = translate_options(argv, _parser)
    refuse_flags(args)
    args.model_dir = model_path(args.model_dir)
    in_format = _format_of(args.input_format, args.dataset_input)
    out_format = _format_of(args.output_format, args.dataset_output)
    if in_format == "text" and args.id_column is not None:
        raise Seq2OnnxError("--id-column names a JSONL or Parquet field; a text input's rows are its lines")
    errors_path = None
    if out_format == "text":
        errors_path = args.errors or args.dataset_output + ".errors.jsonl"
    elif args.errors is not None:
        raise Seq2OnnxError(f"--errors is for a text OUTPUT; a {out_format} OUTPUT holds each row's error and "
                            "warnings")
    if errors_path is not None and _same_path(errors_path, args.dataset_output):
        raise Seq2OnnxError(f"--errors {errors_path} is OUTPUT: one would replace the other; give another --errors")
    # every argument is checked here, before Ray starts (seconds): INPUT, OUTPUT and --errors, then MODEL
    with _open_input(args.dataset_input) as source, \
            open_output(args.dataset_output, "OUTPUT", source, f"INPUT {args.dataset_input}") as out, \
            _maybe_output(errors_path, source, f"INPUT {args.dataset_input}") as errors_out:
        max_bytes = check_model(args, decoding)
        import ray                      # the extra's modules (a missing one is the CLI's one-line hint): seconds

        from .dataset import read_rows, translate_rows
        connect(args.ray_address)
        try:
            ctx = ray.data.DataContext.get_current()
            ctx.execution_options.preserve_order = True              # OUTPUT in INPUT's order
            # blocks of BLOCK_BYTES, not Ray's 128 MiB (a file's worth of lines): the rows come back, and are written,
            # a block at a time, and an actor lost mid-job loses one block's work
            ctx.target_max_block_size = BLOCK_BYTES
            rows = read_rows(_local_absolute(args.dataset_input), in_format, text_column=args.text_column,
                             id_column=args.id_column, max_bytes=max_bytes, block_rows=args.batch_size)
            done = translate_rows(rows, args, decoding, text_column=args.text_column, actors=args.actors,
                                  batch_size=args.batch_size, cpus_per_actor=args.cpus_per_actor,
                                  gpus_per_actor=args.gpus_per_actor, output=out_format == "text")
            writer = WRITERS[out_format](out, errors_out, args)
            for batch in done.iter_batches(batch_size=None, batch_format="pyarrow"):
                writer.write(batch)
                out.flush()                                         # as `seq2onnx translate`: batch by batch
            writer.close()
        finally:
            ray.shutdown()
    where = f" ({errors_path})" if errors_path is not None and (writer.failed or writer.warned) else ""
    print(f"{NAME}: {writer.rows} rows; {writer.failed} failed, {writer.warned} with warnings{where}",
          file=sys.stderr)
    return 0


def _format_of(given: str, path: str) -> str:
    return file_format(path) if given == "auto" else given


def _same_path(a: str, b: str) -> bool:
    """Two paths of one file: the same path once links are resolved, or (both existing) the same file."""
    try:
        return os.path.realpath(a) == os.path.realpath(b) or os.path.samefile(a, b)
    except OSError:                                     # one does not exist (yet)
        return False


def _open_input(path: str) -> ContextManager[Optional[BinaryIO]]:
    """A local INPUT file opened as `seq2onnx translate --input` opens it (its one-line errors: no such file, cannot
    open it), to be checked against the outputs; None for a folder (Ray Data reads its files) or a URI (Ray's
    filesystem checks it)."""
    if "://" in path:
        return nullcontext()
    try:
        mode = os.stat(path).st_mode
    except OSError:                                     # open_path says what
        mode = stat.S_IFREG
    if stat.S_ISDIR(mode):
        return nullcontext()
    if not stat.S_ISREG(mode):                          # opening a FIFO would wait for a writer
        raise Seq2OnnxError(f"INPUT {path} is not a file or a folder of files; Ray Data reads files")
    return open_path("INPUT", path, "rb")


def _local_absolute(path: str) -> str:
    """A local INPUT path made absolute (Ray's tasks run elsewhere); a URI (s3://...) as it is."""
    return path if "://" in path else os.path.abspath(path)


class _maybe_output:
    """open_output(path) for --errors, or nothing (None) without a path."""

    def __init__(self, path: Optional[str], source: Optional[BinaryIO], source_name: str):
        self.context = open_output(path, "--errors", source, source_name) if path is not None else None

    def __enter__(self) -> Optional[BinaryIO]:
        return self.context.__enter__() if self.context is not None else None

    def __exit__(self, *exc: Any) -> Any:
        return self.context.__exit__(*exc) if self.context is not None else None


# --- writers ---------------------------------------------------------------------------------------------------
class Writer:
    """Rows of the job (pyarrow Tables, in order) to OUTPUT, counted."""

    def __init__(self, out: BinaryIO, errors: Optional[BinaryIO], args: argparse.Namespace):
        self.out, self.errors = out, errors
        self.id_column = args.id_column or LINE
        self.rows = self.failed = self.warned = 0

    def write(self, batch: Any) -> None:
        self.rows += batch.num_rows
        self.failed += batch.num_rows - batch.column(ERROR).null_count
        self.warned += sum(1 for w in batch.column(WARNINGS).to_pylist() if w)

    def close(self) -> None:
        pass

    def columns(self, batch: Any) -> Any:
        """The output columns of a batch: its id (and path), translation (hypotheses, scores), error, warnings."""
        names = [self.id_column] + ([PATH] if PATH in batch.column_names else []) + [TRANSLATION] + \
            ([HYPOTHESES, SCORES] if HYPOTHESES in batch.column_names else []) + [ERROR, WARNINGS]
        return batch.select(names)


class TextWriter(Writer):
    """`seq2onnx translate`'s bytes (the OUTPUT column) to OUTPUT; errors and warnings to the errors file."""

    def write(self, batch: Any) -> None:
        assert self.errors is not None                  # a text OUTPUT has its errors file (translate_dataset_main)
        super().write(batch)
        self.out.write(b"".join(batch.column(OUTPUT).to_pylist()))
        paths = batch.column(PATH).to_pylist() if PATH in batch.column_names else None
        lines: List[bytes] = []
        for i, (line, error, warnings) in enumerate(zip(batch.column(LINE).to_pylist(),
                                                        batch.column(ERROR).to_pylist(),
                                                        batch.column(WARNINGS).to_pylist())):
            where = {"line": line, **({"path": paths[i]} if paths else {})}
            lines += [_json_line({**where, "error": error})] if error is not None else []
            lines += [_json_line({**where, "warning": w}) for w in warnings]
        self.errors.write(b"".join(lines))


class JsonlWriter(Writer):
    def write(self, batch: Any) -> None:
        super().write(batch)
        self.out.write(b"".join(_json_line(r) for r in self.columns(batch).to_pylist()))


class ParquetWriter(Writer):
    def __init__(self, out: BinaryIO, errors: Optional[BinaryIO], args: argparse.Namespace):
        super().__init__(out, errors, args)
        self.writer: Any = None

    def write(self, batch: Any) -> None:
        import pyarrow.parquet as pq
        super().write(batch)
        table = self.columns(batch)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.out, table.schema)
        self.writer.write_table(table)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


WRITERS = {"text": TextWriter, "jsonl": JsonlWriter, "parquet": ParquetWriter}


def _json_line(record: Dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
