"""`seq2onnx export CHECKPOINT OUT_DIR [--int8 [--skip-int8-validation]] [--fp16] [--opset N] [--overwrite]`

Stages, one progress line each:
  1 trace     the checkpoint's model -> encoder.onnx + decoder_step.onnx (export/onnx_export.py)
  2 check     onnx.checker, graph I/O names, no unexpected ops, finite constants, loads in onnxruntime
  3 parity    ONNX vs PyTorch on the fixed parity set (export/parity.py); fails -> nothing is written
  4 quantise  --int8 / --fp16 variants, each checked against its own thresholds (export/quantize.py);
              --skip-int8-validation measures the int8 variant but keeps it whatever its figures
  5 write     tokenizer.json, README.md, manifest.json; the folder is renamed into place (export/package.py)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Sequence, Tuple

import onnx
import onnxruntime as ort
import torch

from seq2onnx.runtime import __version__
from seq2onnx.runtime.cli.main import OneLineParser
from seq2onnx.runtime.cli.cli_io import open_path, read_lines
from seq2onnx.runtime.cli.commands import source_line_bytes
from seq2onnx.runtime.errors import Seq2OnnxError, checkpoints_in
from seq2onnx.runtime.package.graph_io import (CROSS_ATTENTION, DECODER_FORMAT, DECODER_FORMATS, FUSED_ATTENTION_DOMAIN, FUSED_ATTENTION_OPS,
                                       MIN_ONNXRUNTIME, cache_names)
from seq2onnx.runtime.package.manifest import MANIFEST, STAGED, version_text
from seq2onnx.runtime.package.manifest_records import (LANGUAGE_CODE, AttentionRecord, FewRowsRecord, GraphRecord,
                                                       GraphsRecord, GraphValue, Languages, Manifest, SourceCheckpoint,
                                                       SourceModel, Tokenizers, VariantRecord)
from seq2onnx.runtime.engine.session import onnxruntime_log_severity, onnxruntime_version
from seq2onnx.runtime.text_input import token_ids
from seq2onnx.training.checkpoint import load_checkpoint
from seq2onnx.training.report import checkpoint_verdict
from seq2onnx.training.tokenizer import SPECIAL_TOKENS, tokenizer_from_json

from . import graph_files, onnx_export, package, parity, quantize
from .onnx_export import DECODER_FILE, DEFAULT_OPSET, ENCODER_FILE, GraphNames

MIN_OPSET = 18   # the torch.onnx dynamo exporter writes opset 18 and newer
PARITY_LINES = sum(parity.REAL_BATCH_SIZES)
PARITY_READ_BYTES = 1 << 28     # of --parity-data at most: its first PARITY_LINES lines, past any long lines' ends
VARIANT_FILES = {"int8": ("encoder.int8.onnx", "decoder_step.int8.onnx"),
                 "fp16": ("encoder.fp16.onnx", "decoder_step.fp16.onnx")}
FEW_ROWS_FILE = "decoder_step.int8.few_rows.onnx"    # format 2 int8: the step for <= FEW_ROWS_MAX rows (quantize.py)
FUSED_DECODER_FILE = ".decoder_step.fused.onnx"      # int8: the fp32 graph it is quantised from (not kept)


@dataclass
class ExportOptions:
    checkpoint: Path
    out_dir: Path
    int8: bool = False
    fp16: bool = False
    opset: int = DEFAULT_OPSET
    overwrite: bool = False
    parity_data: Optional[Path] = None     # source sentences for the parity checks (else synthetic only)
    int8_validation: bool = True           # False: int8 parity is measured and recorded, not enforced
    decoder_format: int = DECODER_FORMAT   # the decoder step contract; 1: the earlier one (graph_io.py), for comparisons
    source_lang: Optional[str] = None      # recorded in the manifest's languages (--source-lang / --target-lang)
    target_lang: Optional[str] = None
    external_data: bool = False            # every graph's weights in a data file beside it (graph_files.py)
    few_rows: bool = False                 # int8: also a decoder step for steps of few rows (--few-rows)


@dataclass
class ExportResult:
    out_dir: Path
    manifest: Dict[str, Any]
    seconds: float
    stage_seconds: Dict[str, float] = field(default_factory=dict)


def parse_args(argv: List[str]) -> ExportOptions:
    p = OneLineParser(prog="seq2onnx export", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="a .pt checkpoint written by seq2onnx train / average")
    p.add_argument("out_dir", type=Path, help="the model package folder to write")
    p.add_argument("--int8", action="store_true", help="also write the int8 (dynamic quantisation) variant")
    p.add_argument("--skip-int8-validation", action="store_true",
                   help="keep the int8 variant even when it fails the quality gate (top-1 agreement >= "
                        f"{parity.MIN_TOP1_AGREEMENT}, greedy token match >= {parity.MIN_GREEDY_TOKEN_MATCH} "
                        "vs PyTorch fp32): its figures are still measured and recorded in the manifest, "
                        "with the variant's status 'validation-skipped'. For benchmarks on random weights; "
                        "the fp32 checks always apply")
    p.add_argument("--fp16", action="store_true", help="also write the float16 variant (for CUDA)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset (default {DEFAULT_OPSET})")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it holds a model package")
    p.add_argument("--parity-data", type=Path, metavar="FILE",
                   help="source sentences for the parity checks, one per line (a .tsv: its first column); "
                        f"the first {PARITY_LINES} are used besides the synthetic sources")
    # --format-version: its earlier name (the manifest's format_version is another number: 4 for decoder format 3)
    p.add_argument("--decoder-format", "--format-version", dest="decoder_format", type=int, choices=DECODER_FORMATS,
                   default=DECODER_FORMAT,
                   help=f"the decoder step contract (default {DECODER_FORMAT}: a fixed-capacity decoder cache written in "
                        "place, one past_length per row, and cross-attention weights); 2 and 1 write the earlier "
                        "decoder steps (one past_length for all rows; a growing cache), for comparisons")
    add_language_args(p)
    add_external_data_arg(p)
    add_few_rows_arg(p)
    a = p.parse_args(argv)
    check_int8_args(p, a)
    return ExportOptions(a.checkpoint, a.out_dir, a.int8, a.fp16, a.opset, a.overwrite, a.parity_data,
                         int8_validation=not a.skip_int8_validation, decoder_format=a.decoder_format,
                         source_lang=a.source_lang, target_lang=a.target_lang, external_data=a.external_data,
                         few_rows=a.few_rows)


def add_few_rows_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--few-rows", action="store_true",
                   help="with --int8: also write a second int8 decoder step for steps of at most "
                        f"{quantize.FEW_ROWS_MAX} rows (8-bit MatMulNBits, onnxruntime >= "
                        f"{version_text(quantize.FEW_ROWS_MIN_ONNXRUNTIME)}), faster at batch 1 on some CPUs; "
                        "its weights are a second copy of the decoder's, on disk and in memory")


def check_int8_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """The flags that apply to the int8 variant need --int8 (one line, as every argparse error)."""
    for flag, given in (("--skip-int8-validation", a.skip_int8_validation), ("--few-rows", a.few_rows)):
        if given and not a.int8:
            p.error(f"{flag} applies to the int8 variant: add --int8")


def add_external_data_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--external-data", action="store_true",
                   help="write every graph's weights in a data file beside it (GRAPH.onnx.data); a graph past "
                        "protobuf's 2 GB limit always is")


def add_language_args(p: argparse.ArgumentParser) -> None:
    for side in ("source", "target"):
        p.add_argument(f"--{side}-lang", metavar="CODE", help=f"the {side} language's code (e.g. en, deu, eng_Latn), "
                       "recorded in the manifest: serving picks packages by it, and translate checks it")


def languages_field(source_lang: Optional[str], target_lang: Optional[str]) -> Optional[Languages]:
    """The manifest's languages of a model of one pair, as --source-lang / --target-lang name it (None if neither)."""
    if source_lang is None and target_lang is None:
        return None
    for flag, code in (("--source-lang", source_lang), ("--target-lang", target_lang)):
        if code is not None and not LANGUAGE_CODE.fullmatch(code):
            raise Seq2OnnxError(f"{flag} {code!r} is not a language code: use letters, digits and _ . @ - "
                                "(1 to 32 of them), e.g. en, deu, pt_BR, eng_Latn")
    return Languages(tuple(c for c in [source_lang] if c), tuple(c for c in [target_lang] if c))


def export_main(argv: List[str]) -> int:
    opts = parse_args(argv)
    # progress on stderr, the summary on stdout
    result = run_export(opts, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(summary(result), flush=True)
    return 0


# --- the pipeline --------------------------------------------------------------------------------------
def run_export(opts: ExportOptions, log: Callable[[str], None] = lambda msg: None) -> ExportResult:
    """Checkpoint -> checked model package at opts.out_dir; raises Seq2OnnxError (nothing written) on failure."""
    start = time.perf_counter()
    target = Path(opts.out_dir).absolute()
    check_opset(opts.opset)
    package.check_target(target, opts.overwrite)
    _check_not_a_folder(Path(opts.checkpoint))
    ckpt = load_checkpoint(opts.checkpoint)
    model = onnx_export.model_from_checkpoint(ckpt)
    special_tokens = _special_tokens(ckpt["tokenizer"], model.cfg, opts.checkpoint)
    sources = _parity_sources(opts.parity_data, tokenizer_from_json(ckpt["tokenizer"]), model.cfg)
    source = SourceCheckpoint(Path(opts.checkpoint).name, ckpt.get("train_meta", {}))
    verdict = checkpoint_verdict(source.train_meta, model.cfg.vocab_size)
    if verdict is not None:             # the trainer's rule on this checkpoint: said again, and kept for `info`
        source = dataclasses.replace(source, undertrained=tuple(verdict.reasons))
        for line in verdict.lines(f"{source.file} (step {source.train_meta['step']})"):
            log(line)
    contents = PackageContents({package.TOKENIZER_FILE: ckpt["tokenizer"]},
                               Tokenizers(package.TOKENIZER_FILE, package.TOKENIZER_FILE), special_tokens, source,
                               languages=languages_field(opts.source_lang, opts.target_lang))
    return write_package(model, contents, opts, sources, log, start)


@dataclass
class PackageContents:
    """What a package holds besides its graphs: tokenizer files (name -> JSON text), the manifest's tokenizer field,
    special tokens, where it came from (source_checkpoint), and the optional format-3 fields (languages, generation,
    source_model). gate(staging folder, manifest): one more check of the finished package before it is published
    (convert: against transformers), raising Seq2OnnxError; it may write the manifest again (package.write_manifest)."""
    tokenizer_files: Dict[str, str]
    tokenizer: Tokenizers
    special_tokens: Dict[str, str]
    source_checkpoint: SourceCheckpoint
    languages: Optional[Languages] = None
    generation: Optional[Dict[str, Any]] = None
    source_model: Optional[SourceModel] = None
    gate: Optional[Callable[[Path, Manifest], str]] = None


def write_package(model, contents: PackageContents, opts: ExportOptions, parity_sources: List[List[int]],
                  log: Callable[[str], None], start: float) -> ExportResult:
    """Stages 1-5 for a model in memory (a checkpoint's, or a converted one): nothing is written unless all pass."""
    stage_seconds: Dict[str, float] = {}
    target = Path(opts.out_dir).absolute()
    batches = parity.parity_batches(model.cfg, parity_sources)
    for message in package.recover_interrupted(target):
        log(f"note: {message}")

    staging = package.make_staging(target)
    try:
        t = time.perf_counter()
        enc, dec = onnx_export.export_graphs(
            model, staging, opts.opset, opts.decoder_format, opts.external_data,
            meanwhile=lambda: parity.compute_references(model, batches, opts.decoder_format))
        stage_seconds["trace"] = time.perf_counter() - t
        log(f"[1/5] trace: {ENCODER_FILE} + {DECODER_FILE} at opset {opts.opset}, and the parity checks' "
            f"PyTorch side ({stage_seconds['trace']:.1f}s)")

        t = time.perf_counter()
        names = GraphNames.for_config(model.cfg, opts.decoder_format)
        in_place = TorchWeights(model)
        _check(enc, names.encoder_inputs, names.encoder_outputs, in_place)
        _check(dec, names.decoder_inputs, names.decoder_outputs, in_place)
        stage_seconds["check"] = time.perf_counter() - t
        log(f"[2/5] check: onnx.checker, I/O names, ops, finite constants, onnxruntime CPU load: ok "
            f"({stage_seconds['check']:.1f}s)")

        t = time.perf_counter()
        fp32_pair = parity.OnnxPair(enc, dec, model.cfg, options=in_place)
        with ThreadPoolExecutor(1 if opts.int8 else 2) as side:
            # the fp32 parity (onnxruntime and numpy, on one thread each) on the second core, while this thread
            # rewrites and quantises the int8 variant's graphs (Python, most of it): neither reads the other's work
            fp32_report = parity.measure_on(side, model, fp32_pair, batches)
            int8 = (_Int8Graphs.make(model, staging, enc, dec, names, opts.opset, opts.decoder_format,
                                     opts.external_data, opts.few_rows, log) if opts.int8 else None)
            fp32 = parity.check_fp32(fp32_report(), noise=lambda: parity.float32_noise(model, batches))
        stage_seconds["parity"] = time.perf_counter() - t
        log(f"[3/5] parity: max diff encoder {fp32.encoder_max_abs_diff:.2g}, log-probs "
            f"{fp32.decoder_max_abs_diff:.2g}; greedy and beam-4 tokens identical on {fp32.sentences} sentences "
            f"({fp32.real_sentences} real) ({stage_seconds['parity']:.1f}s)")
        variants = {"fp32": VariantRecord(ENCODER_FILE, DECODER_FILE, "float32", checked_on=fp32.provider,
                                          parity=fp32.to_dict())}

        t = time.perf_counter()
        if int8 is not None:
            variants["int8"] = int8.checked(model, batches, opts.int8_validation, log)
        if opts.fp16:
            variants["fp16"] = _fp16_variant(model, staging, enc, dec, names, batches, opts.external_data)
        variants = graph_files.add_external_data_fields(staging, variants)
        variants = graph_files.share_weights(staging, variants, merge=not opts.external_data)
        stage_seconds["quantise"] = time.perf_counter() - t
        log("[4/5] quantise: " + (", ".join(_variant_line(k, v.to_manifest()) for k, v in variants.items()
                                            if k != "fp32")
                                 or "no --int8 / --fp16 asked") + f" ({stage_seconds['quantise']:.1f}s)")

        t = time.perf_counter()
        for name, text in contents.tokenizer_files.items():
            (staging / name).write_text(text, encoding="utf-8")
        opset, ir_version = onnx_export.opset_and_ir(enc)
        record = package.build_manifest(
            config=model.cfg, special_tokens=contents.special_tokens, opset=opset, ir_version=ir_version,
            graphs=GraphsRecord(graph_record(enc),
                                # the decoder step takes cross K/V + encoder mask once per sentence (docs/CONTRACTS.md)
                                dataclasses.replace(graph_record(dec), cross_per_sentence=True)),
            variants=variants, exporter=exporter_versions(), source_checkpoint=contents.source_checkpoint,
            seq2onnx_version=__version__, decoder_format=opts.decoder_format, tokenizer=contents.tokenizer,
            languages=contents.languages, generation=contents.generation, source_model=contents.source_model)
        record = package.finish_package(staging, record)
        if contents.gate is not None:
            token = STAGED.set(staging)
            try:
                log(contents.gate(staging, record))
            finally:
                STAGED.reset(token)
        manifest = json.loads((staging / MANIFEST).read_text(encoding="utf-8"))     # as written
        package.publish(staging, target, opts.overwrite)
        stage_seconds["write"] = time.perf_counter() - t
        log(f"[5/5] write: {target} ({len(manifest['files']) + 1} files, {stage_seconds['write']:.1f}s)")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return ExportResult(target, manifest, time.perf_counter() - start, stage_seconds)


def graph_record(path: Path) -> GraphRecord:
    """A graph's inputs and outputs as the manifest lists them (onnx_export.graph_io)."""
    io = onnx_export.graph_io(path)
    return GraphRecord(*(tuple(GraphValue(v["name"], v["dtype"], tuple(v["shape"])) for v in io[side])
                         for side in ("inputs", "outputs")))


def check_opset(opset: int) -> None:
    max_opset = onnx.defs.onnx_opset_version()
    if not MIN_OPSET <= opset <= max_opset:
        raise Seq2OnnxError(f"--opset {opset} is not supported: choose {MIN_OPSET} to {max_opset}")


def _check_not_a_folder(checkpoint: Path) -> None:
    """A run folder where a checkpoint belongs: name the checkpoints in it (fairseq's and CTranslate2's converters
    take a checkpoint file too; which one to ship, best or averaged, is the user's choice)."""
    if not checkpoint.is_dir():
        return
    found = checkpoints_in(checkpoint)
    if not found:
        raise Seq2OnnxError(f"{checkpoint} is a folder with no .pt checkpoint in it: pass a checkpoint file written "
                            "by seq2onnx train or seq2onnx average")
    raise Seq2OnnxError(f"{checkpoint} is a folder; pass one checkpoint in it, e.g. seq2onnx export "
                        f"{checkpoint / found[0]} OUT_DIR "
                        f"(it holds {', '.join(found)}; seq2onnx average makes an averaged one)")


def _special_tokens(tokenizer_json: str, cfg, checkpoint: Path) -> Dict[str, str]:
    """{"pad": "<pad>", ...} after checking that the tokenizer gives them the config's ids."""
    try:
        tok = tokenizer_from_json(tokenizer_json)
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own exception types
        raise Seq2OnnxError(f"{checkpoint} holds a tokenizer that cannot be read ({e}): the file is damaged")
    out = {}
    for field_name, token in SPECIAL_TOKENS.items():
        if tok.token_to_id(token) != getattr(cfg, field_name):
            raise Seq2OnnxError(f"{checkpoint}: the tokenizer gives {token} id {tok.token_to_id(token)} but the "
                                f"config says {field_name}={getattr(cfg, field_name)}: the checkpoint is inconsistent")
        out[field_name[:-3]] = token
    return out


class _Bounded:
    """A stream that ends after `left` bytes (read_lines reads it by readline(size))."""

    def __init__(self, stream: BinaryIO, left: int) -> None:
        self.stream, self.left = stream, left

    def readline(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        chunk = self.stream.readline(size) if size > 0 else b""
        self.left -= len(chunk)
        return chunk


def _parity_sources(path: Optional[Path], tok, cfg, prefix: Sequence[int] = ()) -> List[List[int]]:
    """The first PARITY_LINES non-empty lines of `path` (a .tsv: first column) as source ids (prefix: language
    tokens) + EOS, by the tokenizer `tok`. Read as `translate` reads its input: each line cut to the bytes
    max_positions tokens can come from, each text tokenized from a bounded prefix (runtime/text_input.py), and no
    more than PARITY_READ_BYTES of the file (a device or a file of one endless line too), in chunks."""
    if path is None:
        return []
    limit = max(1, cfg.max_positions - 1 - len(prefix))
    line_bytes = source_line_bytes(limit)
    try:
        stream = open_path("--parity-data", str(path), "rb")
    except Seq2OnnxError as e:
        raise Seq2OnnxError(f"cannot read {e}: pass a UTF-8 text file, one sentence a line") from None
    invalid: List[str] = []
    texts = []
    with stream:
        for _, line in read_lines(_Bounded(stream, PARITY_READ_BYTES), line_bytes,
                                  warn=lambda m: invalid.append(m) if "UTF-8" in m else None):
            if invalid:
                raise Seq2OnnxError(f"cannot read --parity-data {path}: {invalid[0]}: pass a UTF-8 text file, one "
                                    "sentence a line")
            text = line.split("\t")[0].strip()
            if text:
                texts.append(text)
            if len(texts) == PARITY_LINES:
                break
    if not texts:
        raise Seq2OnnxError(f"--parity-data {path} has no sentences: pass a text file, one source sentence a line")
    ids, _ = token_ids(tok, texts, limit)
    return [list(prefix) + t[:limit] + [cfg.eos_id] for t in ids]                     # as translate


def _check(path: Path, inputs: List[str], outputs: List[str], options: Optional[Callable] = None) -> str:
    """options: the session's (parity.session_loads): TorchWeights for an fp32 graph of the model in memory."""
    try:
        onnx_export.check_graph(path, inputs, outputs)
        return parity.session_loads(path, options=options)
    except Exception as e:  # noqa: BLE001 - onnx and onnxruntime raise many kinds
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Seq2OnnxError(f"check failed for {path.name}: {reason}; the package was not written")


def _check_variant(fp32: Path, variant: Path, inputs: List[str], outputs: List[str],
                   float16_io: Sequence[str] = ()) -> None:
    """A variant passes the checks of the fp32 graph and keeps its I/O exactly (names, dtypes, axes),
    except that the I/O named in float16_io is float16 instead of float32 (fp16 variant)."""
    _check(variant, inputs, outputs)
    expected = onnx_export.graph_io(fp32)
    for io in expected["inputs"] + expected["outputs"]:
        if io["name"] in float16_io and io["dtype"] == "float32":
            io["dtype"] = "float16"
    if onnx_export.graph_io(variant) != expected:
        raise Seq2OnnxError(f"check failed for {variant.name}: its inputs/outputs differ from {fp32.name}'s; "
                            "the package was not written")


@dataclass
class _Int8Graphs:
    """The int8 variant in its two halves: `make` writes its graphs (rewriting and quantising, Python for the most
    part, which the converter runs beside the fp32 parity), `checked` checks them against the model and returns the
    manifest's variant record. validate False (--skip-int8-validation): the figures are measured and recorded, the
    thresholds not applied; status "validation-skipped" instead of "checked". The graph checks always apply.

    Formats 2 and 3: the decoder step is quantised from a graph whose attention is onnxruntime's fused CPU ops
    (onnx_export.fused_decoder_from_plain: the fp32 step rewritten, or export_fused_decoder's trace where the rewrite
    does not apply), which first passes the fp32 parity gate as the fp32 graph does; the same
    trace is quantised a second time as the few-rows step (quantize.quantize_int8_few_rows), which passes the
    same checks and int8 gate as the step itself, where `with_few_rows` asks for it (--few-rows; not written where
    this onnxruntime is older than its ops): a second copy of the step's weights, for batch-1 speed on some CPUs.
    `log` gets a line after each part (the int8 step is the longest of an export)."""
    enc: Path
    dec: Path
    names: GraphNames
    source: Path                 # the fp32 step the int8 one was quantised from: dec, or the fused rewrite of it
    few_rows: Optional[Path]
    block: int

    @classmethod
    def make(cls, model, staging: Path, enc: Path, dec: Path, names: GraphNames, opset: int = DEFAULT_OPSET,
             decoder_format: int = DECODER_FORMAT, external: bool = False, with_few_rows: bool = False,
             log: Callable[[str], None] = lambda msg: None) -> "_Int8Graphs":
        enc8, dec8 = (staging / f for f in VARIANT_FILES["int8"])
        t = time.perf_counter()
        source, rewritten = dec, False
        few_rows = (staging / FEW_ROWS_FILE if with_few_rows and decoder_format >= 2
                    and onnxruntime_version() >= quantize.FEW_ROWS_MIN_ONNXRUNTIME else None)
        block = quantize.few_rows_block(model.cfg.d_model)
        if decoder_format >= 2:
            source = staging / FUSED_DECODER_FILE
            rewritten = onnx_export.fused_decoder_from_plain(dec, source, model.cfg, external)
            if not rewritten:
                onnx_export.export_fused_decoder(model, source, opset, external, decoder_format)
            _check(source, names.decoder_inputs, names.decoder_outputs)
        quantize.quantize_int8(enc, enc8, external=external)
        quantize.quantize_int8(source, dec8, external=external)
        if few_rows is not None:
            quantize.quantize_int8_few_rows(source, few_rows, block, external)
        graphs = cls(enc, dec, names, source, few_rows, block)
        log("      int8: " + (f"{FUSED_DECODER_FILE.lstrip('.')}: onnxruntime's fused attention, "
                                 + (f"rewritten from {dec.name}" if rewritten else "traced") + ", checked; "
                                 if source != dec else "")
            + "quantize_dynamic" + (" and MatMulNBits" if few_rows is not None else "")
            + f" ({time.perf_counter() - t:.1f}s)")
        return graphs

    def checked(self, model, batches: List[parity.ParityBatch], validate: bool = True,
                log: Callable[[str], None] = lambda msg: None) -> VariantRecord:
        """The checks of the graphs `make` wrote, their parity batches spread over two threads."""
        t = time.perf_counter()
        enc8, dec8 = (self.enc.parent / f for f in VARIANT_FILES["int8"])
        attention: Optional[AttentionRecord] = None
        few_rows_record: Optional[FewRowsRecord] = None
        _check_variant(self.enc, enc8, self.names.encoder_inputs, self.names.encoder_outputs)
        _check_variant(self.dec, dec8, self.names.decoder_inputs, self.names.decoder_outputs)
        if self.few_rows is not None:
            _check_variant(self.dec, self.few_rows, self.names.decoder_inputs, self.names.decoder_outputs)
        def noise() -> Tuple[float, float]:
            return parity.float32_noise(model, batches)
        with ThreadPoolExecutor(2) as pool:         # every graph's batches, on the two cores
            fused = (parity.measure_on(pool, model, parity.OnnxPair(self.enc, self.source, model.cfg,
                                                                     options=TorchWeights(model)), batches)
                     if self.source != self.dec else None)
            report = parity.measure_on(pool, model, parity.OnnxPair(enc8, dec8, model.cfg), batches)
            few = (parity.measure_on(pool, model, parity.OnnxPair(enc8, self.few_rows, model.cfg), batches)
                   if self.few_rows is not None else None)
            if fused is not None:
                attention = AttentionRecord(tuple(f"{FUSED_ATTENTION_DOMAIN}.{op}" for op in FUSED_ATTENTION_OPS),
                                            version_text(MIN_ONNXRUNTIME),
                                            parity.check_fp32(fused(), noise=noise).to_dict())
            report = _int8_checked(report(), validate)
            if few is not None:
                few_rows_record = FewRowsRecord(
                    self.few_rows.name, quantize.FEW_ROWS_MAX, version_text(quantize.FEW_ROWS_MIN_ONNXRUNTIME),
                    quantization={"tool": "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
                                  "bits": quantize.FEW_ROWS_BITS, "block_size": self.block,
                                  "symmetric": True, "accuracy_level": quantize.FEW_ROWS_ACCURACY_LEVEL},
                    parity=_int8_checked(few(), validate).to_dict())
        if self.source != self.dec:
            graph_files.remove_graph(self.source)
        log("      int8: checks, " + ("the fused step's fp32 parity, " if self.source != self.dec else "")
            + f"int8 parity ({time.perf_counter() - t:.1f}s)")
        return VariantRecord(
            enc8.name, dec8.name, "int8", checked_on=report.provider,
            status="checked" if validate else "validation-skipped",
            quantization={"tool": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8",
                          "op_types": list(quantize.QUANTIZED_OPS), "per_channel": quantize.PER_CHANNEL,
                          "reduce_range": quantize.REDUCE_RANGE,
                          # activations quantised with a scale per row (export/int8_rows.py); packages without
                          # the key quantised them per tensor, over the whole batch
                          "per_row_activations": quantize.PER_ROW,
                          # the embedding table of every int8 graph: quantize.int8_embeddings
                          "embeddings": {"weight_type": "QInt8", "per_row": True, "symmetric": True,
                                         "max": quantize.TABLE_INT8_MAX, "layout": "[V, D]",
                                         "read_by": "Gathers of input_ids and output projections of the table"}},
            attention=attention, few_rows=few_rows_record, thresholds=_thresholds(), parity=report.to_dict())


def _thresholds() -> Dict[str, float]:
    """The figures a reduced-precision variant was held to (its manifest entry's thresholds)."""
    return {"top1_agreement": parity.MIN_TOP1_AGREEMENT, "greedy_token_match": parity.MIN_GREEDY_TOKEN_MATCH}


class TorchWeights:
    """The session options of an fp32 graph checked against `model` (parity.OnnxPair's options): onnxruntime is given
    the PyTorch model's own tensors, in place (SessionOptions.add_initializer: no copy), for the graph's initializers
    that are one of them (the dynamo exporter names them "model." + the parameter's name: the embedding table, which
    the encoder and the decoder step both hold, 1 GiB of NLLB-200 600M's 2.3), and makes no prepacked copies of its
    weights (session.disable_prepacking): each other weight is then read from the graph's data file where it lies,
    once. The checks' sessions otherwise held every weight of both graphs on top of the model's (2.5x its weights)."""

    def __init__(self, model) -> None:
        self.arrays = {f"model.{name}": p.detach().numpy()
                       for name, p in model.named_parameters(remove_duplicate=False)
                       if p.dtype == torch.float32 and p.numel() * 4 >= graph_files.SHARED_MIN_BYTES}
        self.values: List[Any] = []         # onnxruntime keeps pointers to them: alive as long as the sessions

    def __call__(self, graph: Path) -> ort.SessionOptions:
        opts = parity.session_options()
        opts.add_session_config_entry("session.disable_prepacking", "1")
        for tensor in onnx.load(str(graph), load_external_data=False).graph.initializer:
            array = self.arrays.get(tensor.name)
            if (array is not None and tensor.data_type == onnx.TensorProto.FLOAT
                    and tuple(tensor.dims) == array.shape):
                self.values.append(ort.OrtValue.ortvalue_from_numpy(array))
                opts.add_initializer(tensor.name, self.values[-1])
        return opts


def _int8_checked(report: parity.ParityReport, validate: bool) -> parity.ParityReport:
    """The int8 figures of one encoder + decoder step pair, held to the int8 thresholds when validate."""
    return parity.check_reduced(report, "int8") if validate else report


def cuda_works(model_path: Path) -> bool:
    """Whether onnxruntime really runs `model_path` on CUDA here (a GPU, and CUDA/cuDNN libraries).
    onnxruntime-gpu lists the CUDA provider even without a GPU and then falls back to the CPU."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    try:
        with onnxruntime_log_severity(4):   # the failed probe logs an error line otherwise
            return parity.session_loads(model_path, "CUDAExecutionProvider") == "CUDAExecutionProvider"
    except Exception:  # noqa: BLE001 - any failure to start CUDA means: not available
        return False


def _fp16_variant(model, staging: Path, enc: Path, dec: Path, names: GraphNames,
                  batches: List[parity.ParityBatch], external: bool = False) -> VariantRecord:
    enc16, dec16 = (staging / f for f in VARIANT_FILES["fp16"])
    quantize.convert_fp16(enc, enc16, external=external)                # cross K/V out in float16
    quantize.convert_fp16(dec, dec16, keep_float32=["log_probs", CROSS_ATTENTION],   # caches in and out in float16
                          external=external)
    layers = model.cfg.decoder_layers
    caches = [n for prefix in ("past", "present", "cross") for n in cache_names(prefix, layers)]
    _check_variant(enc, enc16, names.encoder_inputs, names.encoder_outputs, caches)   # loads on the CPU provider
    _check_variant(dec, dec16, names.decoder_inputs, names.decoder_outputs, caches)
    if cuda_works(dec16):
        pair = parity.OnnxPair(enc16, dec16, model.cfg, provider="CUDAExecutionProvider")
        report = parity.check_reduced(parity.measure(model, pair, batches), "fp16")
        return VariantRecord(enc16.name, dec16.name, "float16", checked_on=report.provider, status="checked",
                             thresholds=_thresholds(), parity=report.to_dict())
    return VariantRecord(enc16.name, dec16.name, "float16", checked_on=None, status="unchecked-on-CUDA", parity=None,
                         note="no CUDA device at export: the graphs were checked to load on the CPU provider only")


def _variant_line(name: str, v: Dict[str, Any]) -> str:
    """A variant's figures in a line (v: its entry in manifest.json)."""
    p = v.get("parity")
    if p is None:
        return f"{name} {v.get('status', 'unchecked')}"
    skipped = " (validation skipped: thresholds not applied)" if v.get("status") == "validation-skipped" else ""
    few = v.get("few_rows")
    few = (f"; its step for <= {few['max_rows']} rows top-1 agreement {few['parity']['top1_agreement']:.4f}, greedy "
           f"token match {few['parity']['greedy_token_match']:.4f}") if few else ""
    return (f"{name} top-1 agreement {p['top1_agreement']:.4f}, greedy token match "
            f"{p['greedy_token_match']:.4f}{few}{skipped}")


def exporter_versions() -> Dict[str, str]:
    import onnxscript
    return {"torch": str(torch.__version__), "onnx": onnx.__version__, "onnxruntime": ort.__version__,
            "onnxscript": getattr(onnxscript, "__version__", "unknown")}


def _size(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def summary(result: ExportResult) -> str:
    m = result.manifest
    lines = [f"exported {result.out_dir} in {result.seconds:.1f}s "
             f"(opset {m['opset']}, IR {m['ir_version']}, seq2onnx {m['seq2onnx_version']})"]
    for name, info in m["files"].items():
        lines.append(f"  {name:<26} {_size(info['bytes']):>10}")
    for name, v in m["variants"].items():
        p = v.get("parity")
        if name == "fp32":
            lines.append(f"  fp32: encoder max diff {p['encoder_max_abs_diff']:.2g}, log-probs "
                         f"{p['decoder_max_abs_diff']:.2g}, greedy {p['greedy_token_match']:.4f}, "
                         f"beam-4 {p['beam4_token_match']:.4f}")
        else:
            lines.append(f"  {_variant_line(name, v)}")
    return "\n".join(lines)
