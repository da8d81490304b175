"""Read and check a model package folder (docs/CONTRACTS.md, "Model package").

    read_package(dir)            manifest.json schema and format_version, every listed file present
                                 with its size, ModelConfig, tokenizer (its SHA-256 checked, its vocab
                                 and special tokens against the config)
    package.verify_variant(name) SHA-256 of the variant's two graphs against the manifest

Hashing runs at about 1 GB/s (a Transformer-base fp32 package, ~0.3 GB, costs ~0.3 s, less than
creating its sessions), so the Translator verifies the files it loads by default; verify=False
skips it. Every failure is a ModelPackageError naming the file and the fix.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Union

from tokenizers import Tokenizer

from .config import ModelConfig
from .errors import ModelPackageError
from .shipped_models import available_models, resolve_model_dir

FORMAT = "seq2onnx-model"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
REEXPORT = "re-export the model with `seq2onnx export`"
# what a killed `seq2onnx export` leaves beside OUT_DIR (export/package.py): .OUT_DIR.partial-PID-XXXX (the
# unfinished staging folder) and .OUT_DIR.old-PID-XXXX (the previous package, renamed aside for --overwrite)
_EXPORT_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>partial|old)-\d+-")


@dataclass(frozen=True)
class Variant:
    name: str                    # fp32 | int8 | fp16
    encoder: Path
    decoder_step: Path
    precision: str               # float32 | int8 | float16
    parity: Dict[str, Any]       # the exporter's figures for this variant
    status: str = "checked"      # checked | validation-skipped (int8) | unchecked-on-CUDA (fp16): CONTRACTS.md


@dataclass
class ModelPackage:
    root: Path
    manifest: Dict[str, Any]
    config: ModelConfig
    tokenizer: Tokenizer
    variants: Dict[str, Variant]
    # the decoder step takes cross K/V + encoder mask once per sentence (graphs.decoder_step.cross_per_sentence);
    # False for packages exported before that contract: they take a copy per row (docs/CONTRACTS.md)
    cross_per_sentence: bool = False

    def file_bytes(self, name: str) -> int:
        return int(self.manifest["files"][name]["bytes"])

    def verify_file(self, name: str) -> None:
        """SHA-256 of root/name against the manifest."""
        _verify_sha256(self.root, self.manifest, name)

    def verify_variant(self, name: str) -> None:
        variant = self.variants[name]
        for path in (variant.encoder, variant.decoder_step):
            self.verify_file(path.name)


def _verify_sha256(root: Path, manifest: Dict[str, Any], name: str) -> None:
    if sha256_of(root / name) != manifest["files"][name]["sha256"]:
        raise ModelPackageError(f"{root / name}: its SHA-256 does not match {MANIFEST} (the file is "
                                f"corrupt or was changed); copy the package again or {REEXPORT}")


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def _field(manifest: Dict[str, Any], key: str, kind: type, where: Path) -> Any:
    if key not in manifest:
        raise ModelPackageError(f"{where}: the field {key!r} is missing; {REEXPORT}")
    if not isinstance(manifest[key], kind):
        raise ModelPackageError(f"{where}: the field {key!r} should be a {kind.__name__}, "
                                f"got {type(manifest[key]).__name__}; {REEXPORT}")
    return manifest[key]


def _interrupted_export(root: Path) -> str:
    """A sentence about what a killed export left at or beside `root`, or "" when nothing."""
    m = _EXPORT_LEFTOVER.match(root.name)
    if m and m.group("kind") == "partial":
        return (f"{root} is the unfinished staging folder of an interrupted `seq2onnx export` to "
                f"{root.parent / m.group('name')}: run that export again (it removes this folder)")
    if root.exists() or not root.parent.is_dir():
        return ""
    left = {}
    for p in sorted(root.parent.iterdir()):
        m = _EXPORT_LEFTOVER.match(p.name)
        if m and m.group("name") == root.name and p.is_dir():
            left.setdefault(m.group("kind"), p)
    if "old" in left:
        return (f"{root} does not exist: an export to it was interrupted and the previous package is left aside "
                f"at {left['old']}: run the export again with --overwrite (it puts the previous package back "
                f"first), or rename {left['old'].name} back to {root.name}")
    if "partial" in left:
        return (f"{root} does not exist: an export to it was interrupted (its unfinished staging folder "
                f"{left['partial'].name} is left): run the export again")
    return ""


def _read_manifest(root: Path) -> Dict[str, Any]:
    interrupted = _interrupted_export(root)
    if interrupted:
        raise ModelPackageError(interrupted)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        shipped = ", ".join(available_models()) or "none"
        raise ModelPackageError(f"{root} {what}: pass the folder written by `seq2onnx export`, "
                                f"or the name of a shipped model ({shipped})")
    path = root / MANIFEST
    if not path.is_file():
        raise ModelPackageError(f"{path} is missing: {root} is not a seq2onnx model package; {REEXPORT}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelPackageError(f"{path} is not valid JSON ({e}); {REEXPORT}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise ModelPackageError(f"{path}: format is {got!r}, not {FORMAT!r}: this is not a seq2onnx model package")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION or not isinstance(version, int) or isinstance(version, bool):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION
        fix = "upgrade seq2onnx (pip install -U seq2onnx)" if newer else REEXPORT
        raise ModelPackageError(f"{path}: format_version {version!r} is unknown; this runtime reads "
                                f"format_version {FORMAT_VERSION}: {fix}")
    return manifest


def _check_files(root: Path, manifest: Dict[str, Any]) -> None:
    where = root / MANIFEST
    files = _field(manifest, "files", dict, where)
    for name, entry in files.items():
        if Path(name).name != name or name in (".", "..", MANIFEST):
            raise ModelPackageError(f"{where}: bad file name {name!r} in 'files'; {REEXPORT}")
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) \
                or not isinstance(entry.get("bytes"), int):
            raise ModelPackageError(f"{where}: files[{name!r}] needs 'sha256' and 'bytes'; {REEXPORT}")
        path = root / name
        if not path.is_file():
            raise ModelPackageError(f"{path} is missing (listed in {MANIFEST}); copy the whole package folder "
                                    f"or {REEXPORT}")
        size = os.path.getsize(path)
        if size != entry["bytes"]:
            raise ModelPackageError(f"{path} has {size} bytes, {MANIFEST} says {entry['bytes']} (truncated or "
                                    f"changed); copy the package again or {REEXPORT}")


def _read_variants(root: Path, manifest: Dict[str, Any]) -> Dict[str, Variant]:
    where = root / MANIFEST
    variants: Dict[str, Variant] = {}
    for name, entry in _field(manifest, "variants", dict, where).items():
        if not isinstance(entry, dict):
            raise ModelPackageError(f"{where}: variants[{name!r}] is not an object; {REEXPORT}")
        paths: List[Path] = []
        for graph in ("encoder", "decoder_step"):
            file = entry.get(graph)
            if not isinstance(file, str) or file not in manifest["files"]:
                raise ModelPackageError(f"{where}: variants[{name!r}][{graph!r}] = {file!r} is not a file "
                                        f"listed in 'files'; {REEXPORT}")
            paths.append(root / file)
        variants[name] = Variant(name, paths[0], paths[1], str(entry.get("precision", name)),
                                 dict(entry.get("parity") or {}), str(entry.get("status", "checked")))
    if "fp32" not in variants:
        raise ModelPackageError(f"{where}: no 'fp32' variant; {REEXPORT}")
    return variants


def _read_cross_per_sentence(root: Path, manifest: Dict[str, Any]) -> bool:
    """graphs.decoder_step.cross_per_sentence: true, or absent / false (packages exported before it existed)."""
    graphs = manifest.get("graphs")
    decoder = graphs.get("decoder_step") if isinstance(graphs, dict) else None
    value = decoder.get("cross_per_sentence", False) if isinstance(decoder, dict) else False
    if not isinstance(value, bool):
        raise ModelPackageError(f"{root / MANIFEST}: graphs.decoder_step.cross_per_sentence should be true or "
                                f"false, got {value!r}; {REEXPORT}")
    return value


def specials_as_text(tokenizer: Tokenizer) -> Tokenizer:
    """Make `tokenizer` encode a literal "<s>", "</s>", "<pad>" or "<unk>" in text as ordinary pieces, so
    that no input (source or target prefix) can inject a control token: ids of specials come only from
    the model code (docs/CONTRACTS.md). Training and export load their tokenizers the same way.
    (tokenizers < 0.15.1 cannot: there such text stays a special token.)"""
    try:
        tokenizer.encode_special_tokens = True
    except AttributeError:
        pass
    return tokenizer


def _read_tokenizer(root: Path, manifest: Dict[str, Any], config: ModelConfig, verify: bool) -> Tokenizer:
    where = root / MANIFEST
    name = _field(manifest, "tokenizer", str, where)
    if name not in manifest["files"]:
        raise ModelPackageError(f"{where}: the tokenizer {name!r} is not listed in 'files'; {REEXPORT}")
    path = root / name
    if verify:
        _verify_sha256(root, manifest, name)
    try:
        tokenizer = specials_as_text(Tokenizer.from_file(str(path)))
    except Exception as e:  # noqa: BLE001 - tokenizers raises a plain Exception
        raise ModelPackageError(f"{path} is not a tokenizers JSON file ({e}); {REEXPORT}") from e
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != config.vocab_size or manifest.get("vocab_size", size) != config.vocab_size:
        raise ModelPackageError(f"{path} has {size} tokens but the model config has vocab_size "
                                f"{config.vocab_size} (manifest vocab_size {manifest.get('vocab_size')}): the "
                                f"tokenizer does not belong to this model; {REEXPORT}")
    specials = manifest.get("special_tokens") or {}
    for role in ("pad", "bos", "eos", "unk"):
        token = specials.get(role)
        want = getattr(config, f"{role}_id")
        if token is not None and tokenizer.token_to_id(token) != want:
            raise ModelPackageError(f"{path}: special token {role}={token!r} has id "
                                    f"{tokenizer.token_to_id(token)}, the config says {want}; {REEXPORT}")
    return tokenizer


def read_package(model_dir: Union[str, os.PathLike], verify: bool = True) -> ModelPackage:
    """Read and check a package folder; see the module docstring for what is checked."""
    root = resolve_model_dir(model_dir)
    manifest = _read_manifest(root)
    try:
        config = ModelConfig.from_dict(_field(manifest, "config", dict, root / MANIFEST))
    except (TypeError, ValueError) as e:
        raise ModelPackageError(f"{root / MANIFEST}: bad model config ({e}); {REEXPORT}") from e
    _check_files(root, manifest)
    variants = _read_variants(root, manifest)
    cross_per_sentence = _read_cross_per_sentence(root, manifest)
    tokenizer = _read_tokenizer(root, manifest, config, verify)
    return ModelPackage(root, manifest, config, tokenizer, variants, cross_per_sentence)
