"""The model package folder: manifest.json, README.md, and writing the folder atomically.

Everything is written into a hidden staging folder beside the target,
    OUT_DIR/../.NAME.partial-PID-XXXX/
which becomes OUT_DIR by one rename once every check has passed (manifest.json is its last file).
Replacing an existing package (--overwrite) renames the old folder away (.NAME.old-PID-XXXX), renames
the new one in, then deletes the old one. A kill at any moment therefore leaves at OUT_DIR either
nothing or a complete package (the previous or the new one), never a partial one. Leftovers of a
killed export are handled by the next export to the same target (`recover_interrupted`).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.package.manifest import (  # the reader owns the format
    FORMAT, MANIFEST, decoder_format, manifest_format, sha256_of)
from seq2onnx.runtime.package.manifest_records import (FileRecord, GraphsRecord, Languages, Manifest, SourceCheckpoint,
                                                       SourceModel, Tokenizers, VariantRecord)

TOKENIZER_FILE = "tokenizer.json"
README_FILE = "README.md"


# --- files ------------------------------------------------------------------------------------------
def file_entries(folder: Path) -> Dict[str, FileRecord]:
    """{file name: its SHA-256 and size} for every file of the folder but manifest.json."""
    return {p.name: FileRecord(sha256_of(p), p.stat().st_size)
            for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}


def _fsync_path(path: Path) -> None:
    """fsync a file or a folder (folders: POSIX only; a no-op where the OS cannot open them)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


# --- the staging folder and its publication -----------------------------------------------------------------
def _leftover_pattern(target: Path) -> "re.Pattern[str]":
    return re.compile(r"^\." + re.escape(target.name) + r"\.(partial|old)-(\d+)-")


def make_staging(target: Path) -> Path:
    """A new empty hidden folder beside `target` (same file system, so the final rename is atomic)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-{os.getpid()}-", dir=target.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)        # a usual folder, not mkdtemp's private 0700
    return staging


def _process_alive(pid: int) -> bool:
    if os.name == "nt":          # os.kill(pid, 0) is not a probe on Windows: assume alive, touch nothing
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover_interrupted(target: Path) -> List[str]:
    """Tidy what a killed export to `target` left beside it. -> messages for the log.

    A staging folder (.partial) of a dead process is deleted. A previous package renamed away
    (.old) by a dead process is put back when `target` is missing, else deleted.
    """
    if not target.parent.is_dir():
        return []
    pattern, messages = _leftover_pattern(target), []
    for path in sorted(target.parent.iterdir()):
        m = pattern.match(path.name)
        if not m or not path.is_dir() or _process_alive(int(m.group(2))):
            continue
        if m.group(1) == "old" and not os.path.lexists(target) and (path / MANIFEST).is_file():
            os.rename(path, target)
            messages.append(f"restored the previous package {target} left aside by an interrupted export")
        else:
            shutil.rmtree(path, ignore_errors=True)
            messages.append(f"removed {path.name}, left by an interrupted export")
    return messages


def check_target(target: Path, overwrite: bool) -> None:
    """Refuse a target that exists without --overwrite, and never replace something that is not a
    model package (or an empty folder), even with --overwrite."""
    if not os.path.lexists(target):
        return
    if not overwrite:
        raise Seq2OnnxError(f"output path exists: {target}: pass --overwrite to replace it, or choose another path")
    if not target.is_dir() or target.is_symlink():
        raise Seq2OnnxError(f"{target} exists and is not a folder: remove it yourself or choose another path")
    if any(target.iterdir()) and not _is_package(target):
        raise Seq2OnnxError(f"{target} exists and is not a seq2onnx model package: --overwrite only replaces "
                            "packages; remove it yourself or choose another path")


def _is_package(folder: Path) -> bool:
    try:
        return json.loads((folder / MANIFEST).read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def publish(staging: Path, target: Path, overwrite: bool) -> None:
    """Make the complete staging folder `target`: fsync its files, then rename it into place."""
    for p in staging.iterdir():
        _fsync_path(p)
    _fsync_path(staging)
    check_target(target, overwrite)
    if os.path.lexists(target):
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        os.rename(target, old)               # the old package aside ...
        os.rename(staging, target)           # ... the new one in ...
        _fsync_path(target.parent)
        shutil.rmtree(old, ignore_errors=True)   # ... and the old one deleted
    else:
        os.rename(staging, target)
        _fsync_path(target.parent)


# --- manifest and README ---------------------------------------------------------------------------------
def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def build_manifest(*, config: ModelConfig, special_tokens: Dict[str, str], opset: int, ir_version: int,
                   graphs: GraphsRecord, variants: Dict[str, VariantRecord], exporter: Dict[str, str],
                   source_checkpoint: SourceCheckpoint, seq2onnx_version: str, decoder_format: int = 2,
                   tokenizer: Tokenizers = Tokenizers(TOKENIZER_FILE, TOKENIZER_FILE),
                   languages: Optional[Languages] = None, generation: Optional[Dict[str, Any]] = None,
                   source_model: Optional[SourceModel] = None) -> Manifest:
    """The manifest of docs/CONTRACTS.md; its `files` are filled in by finish_package. decoder_format: the decoder
    step contract (the manifest's own is manifest_format of it); languages, generation, source_model: the optional
    fields (manifest_records.py)."""
    return Manifest(format=FORMAT, format_version=manifest_format(decoder_format), seq2onnx_version=seq2onnx_version,
                    created=utc_now(), config=config, special_tokens=special_tokens, vocab_size=config.vocab_size,
                    tokenizer=tokenizer, opset=opset, ir_version=ir_version, graphs=graphs, variants=variants,
                    files={}, exporter=exporter, source_checkpoint=source_checkpoint, generation=generation,
                    source_model=source_model, languages=languages)


def manifest_json(manifest: Manifest) -> Dict[str, Any]:
    """The manifest as manifest.json holds it (train_meta may hold values JSON does not know, paths: as text)."""
    return json.loads(json.dumps(manifest.to_manifest(), default=str))


def write_manifest(folder: Path, manifest: Manifest) -> None:
    write_text(folder / MANIFEST, json.dumps(manifest_json(manifest), indent=2, ensure_ascii=False) + "\n")


def finish_package(folder: Path, manifest: Manifest) -> Manifest:
    """Write README.md, list every file with its SHA-256, then write manifest.json: the last file,
    so a folder without it is not a package. -> the manifest as written."""
    write_text(folder / README_FILE, render_readme(manifest_json(manifest)))
    manifest = dataclasses.replace(manifest, files=file_entries(folder))
    for variant in manifest.variants.values():
        missing = [v for v in variant.graphs() if v not in manifest.files]
        if missing:
            raise RuntimeError(f"the manifest names files that are not in the package: {missing}")
    write_manifest(folder, manifest)
    return manifest


def _fmt(x: Optional[float]) -> str:
    return "n/a" if x is None else (f"{x:.3g}" if isinstance(x, float) else str(x))


# what a dimension name of the manifest's graph entries means (a name not here is shown as it is)
DIMENSIONS = {
    "batch": "sources encoded together",
    "src_len": "source tokens: a source's pieces followed by EOS",
    "sentences": "sentences decoded together",
    "rows": "decoder rows, sentences x G (row = sentence * G + g): the G beams of a sentence share its cross K/V "
            "and mask (G = 1 for greedy decoding)",
    "capacity": "positions the cache holds (past_length < capacity <= max_positions); the step writes a row's K/V "
                "at position `past_length` (the row's own where `past_length` has one per row) and the row attends "
                "to positions 0..past_length",
    "past_len": "positions decoded so far (0 at the first step), read from the cache's shape",
    "past_len + 1": "the cache grown by this step's K/V",
}


def _shape(shape: List[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]" if shape else "[] (a scalar)"


def graph_lines(manifest: Dict[str, Any]) -> List[str]:
    """The `## Graphs` text: each graph's inputs and outputs exactly as the manifest's `graphs` entries record
    them (so it cannot drift from the graphs), the files that hold it, and what its dimension names mean."""
    files = {"encoder": [], "decoder_step": []}          # type: Dict[str, List[str]]
    half = [name for name, v in manifest["variants"].items() if v.get("precision") == "float16"]
    for v in manifest["variants"].values():
        files["encoder"].append(v["encoder"])
        files["decoder_step"] += [v["decoder_step"]] + ([v["few_rows"]["decoder_step"]] if "few_rows" in v else [])
    lines = [f"Decoder step contract {decoder_format(manifest['format_version'])} (manifest format_version "
             f"{manifest['format_version']}). Each graph's inputs and "
             "outputs as `manifest.json` records them (the types are the float32 files'"
             + (f"; the {', '.join(half)} variant's cross K/V and past/present caches are float16" if half else "")
             + "):", ""]
    dims = []                                          # type: List[str]
    for graph, entry in manifest["graphs"].items():
        held = ", ".join(f"`{f}`" for f in files.get(graph, []))
        lines += [f"`{graph}`" + (f" ({held})" if held else "") + ":", "", "| | name | type | shape |",
                  "|---|---|---|---|"]
        for side in ("inputs", "outputs"):
            for io in entry.get(side, []):
                lines.append(f"| {side[:-1] if side == 'inputs' else 'output'} | `{io['name']}` | {io['dtype']} | "
                             f"{_shape(io['shape'])} |")
                dims += [d for d in io["shape"] if isinstance(d, str) and d not in dims]
        lines.append("")
    known = [d for d in dims if d in DIMENSIONS]
    if known:
        lines += ["Dimensions:", ""] + [f"- `{d}`: {DIMENSIONS[d]}" for d in known] + [""]
    return lines + ["Decoding starts from the BOS token. seq2onnx's docs/CONTRACTS.md has the whole contract.", ""]


def language_lines(manifest: Dict[str, Any]) -> List[str]:
    """The README's lines on a package's languages and generation defaults (format 3), or none."""
    lines = []
    langs = manifest.get("languages")
    if langs:
        lines += ["## Languages", "", f"From {', '.join(langs['source']) or 'unrecorded'} into "
                  f"{', '.join(langs['target']) or 'unrecorded'}"
                  + (" (name them with `source_lang` / `target_lang`, `--source-lang` / `--target-lang`)."
                     if langs.get("source_token") or langs.get("target_token") else "."), ""]
    gen = manifest.get("generation")
    if gen:
        lines += ["## Decoding defaults", "", "With no options, decoding uses: "
                  + ", ".join(f"`{k}={v!r}`" for k, v in gen.items()) + ".", ""]
    return lines


def render_readme(manifest: Dict[str, Any]) -> str:
    """README.md of a package, generated from its manifest."""
    c = manifest["config"]
    tok = manifest["tokenizer"]
    tokenizer_files = f"`{tok}`" if isinstance(tok, str) else f"source `{tok['source']}`, target `{tok['target']}`"
    lines = [
        "# seq2onnx model package",
        "",
        f"An encoder-decoder Transformer (Vaswani et al., 2017) exported to ONNX by seq2onnx "
        f"{manifest['seq2onnx_version']} on {manifest['created']} from `{manifest['source_checkpoint']['file']}`.",
        "",
        f"- layers: {c['encoder_layers']} encoder, {c['decoder_layers']} decoder; d_model {c['d_model']}, "
        f"{c['n_heads']} heads, d_ff {c['d_ff']}, {'pre' if c['norm_first'] else 'post'}-norm",
        f"- vocabulary: {c['vocab_size']} pieces ({tokenizer_files}, HuggingFace tokenizers); specials "
        + ", ".join(f"{k} `{v}`" for k, v in manifest["special_tokens"].items()),
        f"- longest target: {c['max_positions']} tokens; ONNX opset {manifest['opset']}, IR {manifest['ir_version']}",
        "",
        "## Run it",
        "",
        "```sh",
        "pip install PATH/TO/seq2onnx    # a seq2onnx checkout or wheel: numpy + onnxruntime + tokenizers, no torch",
        "echo 'some text' | seq2onnx translate THIS_FOLDER",
        "seq2onnx info THIS_FOLDER       # what is inside",
        "```",
        "",
        "```python",
        "from seq2onnx.runtime import Translator",
        "print(Translator('THIS_FOLDER').translate('some text'))",
        "```",
        "",
        *language_lines(manifest),
        "## Variants",
        "",
        "| variant | files | parity vs PyTorch |",
        "|---|---|---|",
    ]
    for name, v in manifest["variants"].items():
        p = v.get("parity")
        if p is None:
            figures = v.get("status", "unchecked")
        elif name == "fp32":
            figures = (f"max diff encoder {_fmt(p['encoder_max_abs_diff'])}, log-probs "
                       f"{_fmt(p['decoder_max_abs_diff'])}; greedy/beam-4 tokens match "
                       f"{_fmt(p['greedy_token_match'])}/{_fmt(p['beam4_token_match'])}")
        else:
            figures = (f"top-1 agreement {_fmt(p['top1_agreement'])}, greedy token match "
                       f"{_fmt(p['greedy_token_match'])}")
        lines.append(f"| {name} ({v['precision']}) | `{v['encoder']}`, `{v['decoder_step']}` | {figures} |")
        if "few_rows" in v:
            f, p = v["few_rows"], v["few_rows"]["parity"]
            lines.append(f"| {name}, steps of at most {f['max_rows']} rows | `{f['decoder_step']}` | top-1 agreement "
                         f"{_fmt(p['top1_agreement'])}, greedy token match {_fmt(p['greedy_token_match'])} |")
    lines += ["", "## Graphs", ""] + graph_lines(manifest) + [
        "`manifest.json` lists every file with its SHA-256, the configuration and the parity figures.",
        "",
    ]
    return "\n".join(lines)
