"""Bulk translation on Ray Data: the rows of text, JSONL or Parquet files (`read_rows`), translated by a pool of
actors that each hold one Translator (`Translate`, through `map_batches`), for `seq2onnx translate-dataset`
(cli.py) and for pipelines of one's own (`translate_dataset`).

An actor translates a Ray batch as `seq2onnx translate` translates a chunk of lines (commands.translate_texts, the
same options, parsed by the same parser) and formats each row's output as it does (commands.output_lines), so the
text output of a job is byte for byte the command's. A row whose translation fails gets its error in the `error`
column, and the job goes on; an actor that dies is restarted by Ray and its batches are run again (map_batches'
max_restarts / max_task_retries): the output holds each row once.
"""
from __future__ import annotations

import argparse
import copy
import io
import json
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import pyarrow as pa
import pyarrow.parquet as pq
import ray
from ray.data.block import Block
from ray.data.datasource import FileBasedDatasource

from ..cli.cli_io import read_lines
from ..cli.commands import Records, format_output, output_lines, translate_texts, translation_records
from ..errors import Seq2OnnxError, printable
from ..translator import SURROGATE
from .job import (ERROR, FORMATS, HYPOTHESES, LINE, OUTPUT, PATH, SCORES, TRANSLATION, WARNINGS, load_checked,
                  model_path, parse_options)


# --- reading ---------------------------------------------------------------------------------------------------
class RowsDatasource(FileBasedDatasource):
    """Rows of text files (a line each, read as `seq2onnx translate` reads its input: cli_io.read_lines with its
    byte bound), JSONL files (an object a line) or Parquet files, each with `line`, its 1-based line (row) in its
    file; TEXT, the text (None where the row has none); the id column when asked; `error`, what made the row
    unreadable (a line that is not JSON, an object without the text field); `warnings`, what reading it changed
    (invalid UTF-8, a line cut to the byte bound); `path`, its file, where the input is several files. Yielded
    `block_rows` rows at a time (Ray Data joins them into blocks of its target size: cli.BLOCK_BYTES for the
    command), so that a file is never held whole."""

    def __init__(self, paths: Any, fmt: str, text_column: str, id_column: Optional[str], max_bytes: Optional[int],
                 block_rows: int, **kwargs: Any):
        super().__init__(paths, **kwargs)
        self.fmt, self.text_column, self.id_column = fmt, text_column, id_column
        self.max_bytes, self.block_rows = max_bytes, block_rows
        self.several = len(self._paths()) > 1

    def _open_input_source(self, filesystem: Any, path: str, **open_args: Any) -> Any:
        if self.fmt == "parquet":                       # Parquet needs random access: a file, not a stream
            return filesystem.open_input_file(path)
        return super()._open_input_source(filesystem, path, **open_args)

    def _read_stream(self, f: Any, path: str) -> Iterator[Block]:
        rows = self._parquet_rows(f) if self.fmt == "parquet" else self._line_rows(f)
        columns: Dict[str, List[Any]] = {}
        for row in rows:
            for key, value in row.items():
                columns.setdefault(key, []).append(value)
            if len(columns[LINE]) == self.block_rows:
                yield self._block(columns, path)
                columns = {}
        if columns:
            yield self._block(columns, path)

    def _block(self, columns: Dict[str, List[Any]], path: str) -> Block:
        types = {LINE: pa.int64(), self.text_column: pa.string(), ERROR: pa.string(), WARNINGS: pa.list_(pa.string())}
        table = pa.table({k: pa.array(v, type=types.get(k)) for k, v in columns.items()})
        return table.append_column(PATH, pa.array([path] * table.num_rows, pa.string())) if self.several else table

    def _line_rows(self, f: Any) -> Iterator[Dict[str, Any]]:
        pending: List[str] = []                          # read_lines' warnings of the line it is about to yield
        text_bound = self.max_bytes if self.fmt == "text" else None
        for number, line in read_lines(io.BufferedReader(f), text_bound, warn=pending.append):
            warnings = [_unnumbered(w, number) for w in pending]
            pending.clear()
            if self.fmt == "text":
                yield {LINE: number, self.text_column: line, ERROR: None, WARNINGS: warnings}
            else:
                yield self._json_row(number, line, warnings)

    def _json_row(self, number: int, line: str, warnings: List[str]) -> Dict[str, Any]:
        row: Dict[str, Any] = {LINE: number, self.text_column: None, ERROR: None, WARNINGS: warnings}
        if self.id_column is not None:
            row[self.id_column] = None
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as e:
            row[ERROR] = f"not a JSON object: {e}"
            return row
        if not isinstance(value, dict):
            row[ERROR] = f"not a JSON object: a {type(value).__name__}"
            return row
        if self.id_column is not None:
            row[self.id_column] = _json_id(value.get(self.id_column))
        text = value.get(self.text_column)
        if isinstance(text, str):
            if SURROGATE.search(text):                 # a "\ud800" escape: not text that UTF-8 (or Arrow) holds
                warnings.append("not valid Unicode (lone surrogates); they were replaced with U+FFFD")
                text = SURROGATE.sub("\ufffd", text)
            row[self.text_column] = text
        else:
            row[ERROR] = _no_text(self.text_column, text, self.text_column in value)
        return row

    def _parquet_rows(self, f: Any) -> Iterator[Dict[str, Any]]:
        wanted = [self.text_column] + ([self.id_column] if self.id_column is not None else [])
        parquet = pq.ParquetFile(f)
        missing = [c for c in wanted if c not in parquet.schema_arrow.names]
        if missing:
            raise Seq2OnnxError(f"the Parquet file has no column {missing[0]!r}; its columns: "
                                f"{', '.join(parquet.schema_arrow.names)} (--text-column, --id-column)")
        number = 0
        for batch in parquet.iter_batches(batch_size=self.block_rows, columns=wanted):
            ids = batch.column(self.id_column).to_pylist() if self.id_column is not None else None
            for i, text in enumerate(batch.column(self.text_column).to_pylist()):
                number += 1
                row: Dict[str, Any] = {LINE: number, self.text_column: text if isinstance(text, str) else None,
                       ERROR: None if isinstance(text, str) else _no_text(self.text_column, text, True),
                       WARNINGS: []}
                if ids is not None and self.id_column is not None:
                    row[self.id_column] = ids[i]
                yield row


def _unnumbered(warning: str, number: int) -> str:
    """A warning about line `number` without its "line N: " (the row names its line)."""
    return warning.removeprefix(f"line {number}: ")


def _no_text(column: str, value: Any, present: bool) -> str:
    if not present:
        return f"no {column!r} field (--text-column)"
    return f"the {column!r} field is {'null' if value is None else type(value).__name__}, not a string"


def _json_id(value: Any) -> Optional[str]:
    """An id as one type for every row (a column has one): a string as it is (lone surrogates as U+FFFD), anything
    else as its JSON."""
    return SURROGATE.sub("\ufffd", value) if isinstance(value, str) else None if value is None else json.dumps(value)


def read_rows(paths: Any, fmt: str = "text", *, text_column: str = "text", id_column: Optional[str] = None,
              max_bytes: Optional[int] = None, block_rows: int = 256) -> "ray.data.Dataset":
    """A Dataset of the rows of `paths` (a file, a folder, a list of them, any filesystem Ray Data reads: local,
    s3://, gs://, ...; compressed files by their suffix) as RowsDatasource describes. max_bytes: the bound of a
    text line (`seq2onnx translate`'s: commands.source_line_bytes)."""
    if fmt not in FORMATS:
        raise Seq2OnnxError(f"the input format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    source = RowsDatasource(paths, fmt, text_column, id_column, max_bytes, block_rows)
    # reading reserves no CPU: the actors hold them (a read task waiting for a CPU that an actor holds would wait
    # for ever), and reading a file costs little beside translating it
    return ray.data.read_datasource(source, num_cpus=0)


# --- translating -----------------------------------------------------------------------------------------------
class Translate:
    """The callable class of map_batches: one Translator per actor (loaded once), and each Ray batch (a pyarrow
    Table) translated with `seq2onnx translate`'s options; its rows come back with TRANSLATION (the best
    hypothesis), HYPOTHESES and SCORES (with --n-best or --scores), OUTPUT (with `output=True`: the command's
    output lines of the row, bytes), ERROR and WARNINGS."""

    def __init__(self, args: argparse.Namespace, decoding: Dict[str, Any], text_column: str = "text",
                 output: bool = False, threads: int = 1):
        self.args = copy.copy(args)
        if self.args.intra_threads == 0:                # onnxruntime's default, every core: the actor's CPUs instead
            self.args.intra_threads = threads
        self.translator, self.limit = load_checked(self.args)
        # the options as records, made once; a bad one (translate_dataset does not load the model to check them) is
        # every row's error, as its translation's would be
        self.records: Union[Records, Seq2OnnxError]
        try:
            self.records = translation_records(self.translator, self.args, decoding)
        except Seq2OnnxError as e:
            self.records = e
        self.text_column, self.output = text_column, output
        self.lists = self.args.num_hypotheses > 1 or self.args.scores

    def __call__(self, batch: pa.Table) -> pa.Table:
        n = batch.num_rows
        texts = batch.column(self.text_column).to_pylist()                 # [n] str or None
        lines = batch.column(LINE).to_pylist() if LINE in batch.column_names else [0] * n
        errors = batch.column(ERROR).to_pylist() if ERROR in batch.column_names else [None] * n
        warnings = batch.column(WARNINGS).to_pylist() if WARNINGS in batch.column_names else [[] for _ in range(n)]
        for i, text in enumerate(texts):
            if errors[i] is None and not isinstance(text, str):
                errors[i] = _no_text(self.text_column, text, True)
        todo = [i for i in range(n) if errors[i] is None]
        results = self._translate([texts[i] for i in todo])
        translation: List[str] = [""] * n
        hypotheses: List[List[str]] = [[] for _ in range(n)]
        scores: List[List[float]] = [[] for _ in range(n)]
        output: List[bytes] = [b""] * n
        for i, result in zip(todo, results):
            if isinstance(result, str):
                errors[i] = result
                continue
            said: List[str] = []
            output[i] = output_lines(lines[i], texts[i], result, self.args, self.limit, warn=said.append)
            warnings[i] = list(warnings[i]) + [_unnumbered(w, lines[i]) for w in said]
            translation[i], hypotheses[i], scores[i] = result.hypotheses[0], result.hypotheses, \
                result.normalized_scores
        for i in range(n):
            if errors[i] is not None:      # a failed row's output is a blank line's: one empty hypothesis, score 0
                output[i] = format_output(lines[i], [""], [0.0], self.args.num_hypotheses, self.args.scores)
        added: Dict[str, pa.Array] = {TRANSLATION: pa.array(translation, pa.string())}
        if self.lists:
            added[HYPOTHESES] = pa.array(hypotheses, pa.list_(pa.string()))
            added[SCORES] = pa.array(scores, pa.list_(pa.float64()))
        if self.output:
            added[OUTPUT] = pa.array(output, pa.binary())
        added[ERROR] = pa.array(errors, pa.string())
        added[WARNINGS] = pa.array(warnings, pa.list_(pa.string()))
        kept = [c for c in batch.column_names if c not in added]
        return pa.table({**{c: batch.column(c) for c in kept}, **added})

    def _translate(self, texts: List[str]) -> List[Any]:
        """A TranslationResult for each text; where the batch fails, each text alone, and a failing text's
        error (one line, a str) in its result's place."""
        if isinstance(self.records, Seq2OnnxError):
            return [printable(str(self.records))] * len(texts)
        try:
            return translate_texts(self.translator, texts, self.records)
        except Exception:  # noqa: BLE001 - one bad row must not fail the others: each is tried alone
            return [self._translate_one(t) for t in texts]

    def _translate_one(self, text: str) -> Any:
        try:
            assert not isinstance(self.records, Seq2OnnxError)
            return translate_texts(self.translator, [text], self.records)[0]
        except Exception as e:  # noqa: BLE001 - recorded in the row's `error`, the job goes on
            return printable(str(e)) if isinstance(e, Seq2OnnxError) else f"{type(e).__name__}: {printable(str(e))}"


def translate_dataset(ds: "ray.data.Dataset", model: str, options: Sequence[str] = (), *, text_column: str = "text",
                      actors: int = 1, batch_size: int = 256, cpus_per_actor: float = 1.0,
                      gpus_per_actor: float = 0.0, output: bool = False) -> "ray.data.Dataset":
    """`ds` with its TEXT column translated by `actors` actors of `cpus_per_actor` CPUs (and `gpus_per_actor` GPUs,
    for `--device cuda` in the options), one Translator each, in batches of `batch_size` rows: the columns
    Translate adds (TRANSLATION, ERROR, WARNINGS; HYPOTHESES and SCORES with --n-best or --scores; OUTPUT with
    output=True). `options` are `seq2onnx translate`'s flags, e.g. ["--beam-size", "1"], checked here (a bad one is
    a Seq2OnnxError before any work). MODEL must be a path that every node can read, or a shipped model's name.
    Lazy, as Ray Data is: the work runs as the rows are consumed."""
    args, decoding = parse_options(model, options)
    return translate_rows(ds, args, decoding, text_column=text_column, actors=actors, batch_size=batch_size,
                          cpus_per_actor=cpus_per_actor, gpus_per_actor=gpus_per_actor, output=output)


def translate_rows(ds: "ray.data.Dataset", args: argparse.Namespace, decoding: Dict[str, Any], *, text_column: str,
                   actors: int, batch_size: int, cpus_per_actor: float, gpus_per_actor: float,
                   output: bool) -> "ray.data.Dataset":
    """translate_dataset with `seq2onnx translate`'s options parsed (commands.translate_options)."""
    if actors < 1 or batch_size < 1 or cpus_per_actor <= 0 or gpus_per_actor < 0:
        raise Seq2OnnxError(f"--actors and --batch-size must be >= 1, --cpus-per-actor > 0 and --gpus-per-actor >= 0, "
                            f"got {actors}, {batch_size}, {cpus_per_actor}, {gpus_per_actor}")
    args = copy.copy(args)
    args.model_dir = model_path(args.model_dir)
    # an actor that dies (its node lost, its process killed) is started again and its batches run again: Ray Data's
    # actor pools have max_restarts=-1 and max_task_retries=-1 by default (tests/runtime/ray/test_ray.py kills one mid-job)
    return ds.map_batches(
        Translate, fn_constructor_kwargs=dict(args=args, decoding=decoding, text_column=text_column, output=output,
                                              threads=max(1, int(cpus_per_actor))),
        batch_size=batch_size, batch_format="pyarrow", compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor, num_gpus=gpus_per_actor)
