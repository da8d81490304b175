"""Read and check a model package folder (docs/CONTRACTS.md, "Model package"; docs/SECURITY.md).

    read_package(dir)            manifest.json (at most MAX_MANIFEST_BYTES, nested at most MAX_JSON_DEPTH
                                 deep, strings of at most MAX_STRING_CHARS, at most MAX_FILES files and
                                 MAX_VARIANTS variants): every field, as the records of manifest_records.py
                                 (Manifest.from_manifest: ModelPackage.record); every
                                 listed file present, a regular file (no symbolic link) of its size;
                                 ModelConfig; the tokenizer (its SHA-256 checked, its vocab and special
                                 tokens against the config)
    package.read_graph(path)     the bytes of one graph (a variant's encoder, decoder step, few-rows step),
                                 SHA-256 checked against the manifest: what onnxruntime loads (the
                                 Translator reads each right before its session); a graph with external
                                 data comes with its data file's checked bytes (external_data.py)
    package.read_variant(name)   read_graph of the variant's encoder and decoder step

A model folder is untrusted input. Each file is read once, into memory, and its SHA-256 is checked on
exactly the bytes that are then used (onnxruntime and tokenizers get those bytes, never the path), so
nothing can change a file between the check and its use; nothing outside the folder is read.
Hashing a package costs less than creating its sessions (bench/results/sha256-speed.md), so the
Translator verifies the files it loads by default; verify=False skips it. Every failure is one ModelPackageError line naming the file, the field and the fix.
"""
from __future__ import annotations

import contextvars
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Set, Tuple, Union

from tokenizers import Tokenizer

from .config import ModelConfig
from ..errors import REEXPORT, ModelPackageError, checkpoints_in, first_line
from .manifest_fields import field as _field, short as _short
from .manifest_records import (FILE_NAME, FORMAT, FORMAT_3_CONFIG, FORMAT_VERSION, MANIFEST, MAX_FEW_ROWS,  # noqa: F401
                               MAX_FILES, MAX_VARIANTS, READ_FORMAT_VERSIONS, SHA256, SPECIAL_ROLES, STATUSES,
                               UNCHECKED, VERSION, FileRecord, Languages, Manifest, VariantRecord, check_format)
from .external_data import MAX_DATA_BYTES, ExternalGraph, external_graph  # noqa: F401
from .onnx_bytes import external_tensors
from .files import check_regular, interrupted_export, read_regular, sha256_of  # noqa: F401
from .tokenizer import PackageTokenizer, foreign_regex, rust_panics_as_errors, specials_as_text
from .shipped_models import available_models, resolve_model_dir

# The manifest's fields, their checks and the format constants: manifest_records.py
DECODER_OF_FORMAT = {1: 1, 2: 2, 3: 2, 4: 3}   # format_version -> its decoder step contract (graph_io.DECODER_FORMATS)


def decoder_format(format_version: int) -> int:
    """The decoder step contract (graph_io.DECODER_FORMATS) of a package of this format_version."""
    return DECODER_OF_FORMAT[format_version]


def manifest_format(decoder: int) -> int:
    """The format_version a package whose decoder step follows contract `decoder` is written with: the newest
    one of that contract (3 for contract 2: its variant fields and records)."""
    return max(v for v, d in DECODER_OF_FORMAT.items() if d == decoder)


# the weights of a transformers model folder (what `seq2onnx convert` reads, export/hf_convert.py), not a package's
HF_WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                   "pytorch_model.bin.index.json")

# Limits on what a model folder may hold (docs/SECURITY.md). A real manifest is ~10 kB and 6 levels deep, lists
# 8 files and 3 variants (fp32, int8, fp16), and its longest string is a path of ~100 characters.
MAX_MANIFEST_BYTES = 1 << 20
MAX_JSON_DEPTH = 32
MAX_STRING_CHARS = 4096                 # any string of the manifest, keys included (PATH_MAX for a path)
MAX_FILE_BYTES = (1 << 31) - 1          # protobuf's limit: onnxruntime loads no larger graph (without external data)
MAX_TOKENIZER_BYTES = 1 << 28           # 256 MiB; a 250k-piece tokenizer.json is ~30 MB


@dataclass(frozen=True)
class FewRows:
    """A variant's second decoder step for steps of at most max_rows rows (manifest_records.FewRowsRecord), its file
    in the package folder."""
    decoder_step: Path
    max_rows: int
    min_onnxruntime: Tuple[int, ...]     # older: the runtime steps with the variant's decoder step only


@dataclass(frozen=True)
class Variant:
    name: str                    # fp32 | int8 | fp16
    encoder: Path
    decoder_step: Path
    precision: str               # float32 | int8 | float16
    parity: Dict[str, Any]       # the exporter's figures for this variant
    status: str = "checked"      # checked | validation-skipped (int8) | unchecked-on-CUDA (fp16): CONTRACTS.md
    # the onnxruntime its graphs need (attention.min_onnxruntime: the int8 variant's fused attention ops); () none
    min_onnxruntime: Tuple[int, ...] = ()
    few_rows: Optional[FewRows] = None
    external_data: Dict[str, str] = dataclasses.field(default_factory=dict)   # graph file -> its data file

    @classmethod
    def of(cls, root: Path, name: str, v: VariantRecord) -> "Variant":
        """The variant as the runtime loads it: its files in `root`, the defaults of its absent fields."""
        few = None if v.few_rows is None else FewRows(root / v.few_rows.decoder_step, v.few_rows.max_rows,
                                                      version_numbers(v.few_rows.min_onnxruntime))
        return cls(name, root / v.encoder, root / v.decoder_step, name if v.precision is None else v.precision,
                   dict(v.parity or {}), "checked" if v.status is None else v.status,
                   version_numbers(v.attention.min_onnxruntime if v.attention else None), few,
                   dict(v.external_data or {}))


@dataclass
class ModelPackage:
    root: Path
    manifest: Dict[str, Any]             # manifest.json as parsed (`record`: as checked records)
    config: ModelConfig
    tokenizer: "PackageTokenizer"        # encodes source texts (the one tokenizer, or the source one)
    variants: Dict[str, Variant]
    # the decoder step takes cross K/V + encoder mask once per sentence (graphs.decoder_step.cross_per_sentence);
    # False for packages exported before that contract: they take a copy per row (docs/CONTRACTS.md)
    cross_per_sentence: bool = False
    verify: bool = True          # read_file checks SHA-256s
    _verified: Set[str] = dataclasses.field(default_factory=set, repr=False)   # files verify_variant checked
    # data files that several graphs name, read once while they load: (name, checked) -> bytes (read_graph)
    _shared: Dict[Tuple[str, bool], bytes] = dataclasses.field(default_factory=dict, repr=False)
    target_tokenizer: Optional["PackageTokenizer"] = None    # decodes output ids (None: `tokenizer`)
    languages: Optional[Languages] = None
    language_ids: Dict[str, int] = dataclasses.field(default_factory=dict)   # languages.tokens as ids
    generation: Dict[str, Any] = dataclasses.field(default_factory=dict)     # default decoding options
    record: Optional[Manifest] = None

    @property
    def decoder_format(self) -> int:
        """Which decoder step contract the graphs follow (graph_io.DECODER_FORMATS), from the manifest's
        format_version (a different number: the manifest's own format, DECODER_OF_FORMAT)."""
        return decoder_format(self.manifest["format_version"])

    @property
    def detokenizer(self) -> "PackageTokenizer":
        """The tokenizer that turns output ids into text."""
        return self.target_tokenizer or self.tokenizer

    def file_bytes(self, name: str) -> int:
        return self.manifest["files"][name]["bytes"]

    def read_file(self, name: str, verify: Optional[bool] = None) -> bytes:
        """The bytes of root/name, read once: a regular file of the size the manifest lists and, when
        verify (default: the package's), of its SHA-256."""
        path = self.root / name
        size = self.file_bytes(name)
        data = read_regular(path, size, _missing_listed(path))
        if len(data) != size:
            raise ModelPackageError(f"{path} changed while it was read ({MANIFEST} says {size} bytes); copy the "
                                    f"package again or {REEXPORT}")
        if (self.verify if verify is None else verify) \
                and hashlib.sha256(data).hexdigest() != self.manifest["files"][name]["sha256"]:
            raise ModelPackageError(f"{path}: its SHA-256 does not match {MANIFEST} (the file is corrupt or was "
                                    f"changed); copy the package again or {REEXPORT}")
        return data

    def verify_file(self, name: str) -> None:
        """SHA-256 of root/name against the manifest."""
        self.read_file(name, verify=True)

    def read_variant(self, name: str, verify: Optional[bool] = None) -> Tuple[Union[bytes, ExternalGraph],
                                                                             Union[bytes, ExternalGraph]]:
        """The bytes of the variant's encoder and decoder step (read_graph)."""
        variant = self.variants[name]
        return self.read_graph(variant.encoder, verify), self.read_graph(variant.decoder_step, verify)

    def read_graph(self, path: Path, verify: Optional[bool] = None) -> Union[bytes, ExternalGraph]:
        """The bytes of one of the package's graphs (read_file); for a graph with external data, with its weights
        from the data file its variants name for it, read and checked the same way (external_data.py)."""
        if self.file_bytes(path.name) > MAX_FILE_BYTES:
            raise ModelPackageError(f"{path}: {MANIFEST} lists {self.file_bytes(path.name)} bytes, more than "
                                    f"onnxruntime loads as one graph ({MAX_FILE_BYTES}); {REEXPORT}")
        data = self.read_file(path.name, verify)
        try:
            tensors = external_tensors(data)
        except ValueError as e:
            raise ModelPackageError(f"{path} is not a valid ONNX model ({e}); {REEXPORT}") from e
        data_name = next((v.external_data[path.name] for v in self.variants.values()
                          if path.name in v.external_data), None)
        if not tensors:
            return data
        if data_name is None:
            raise ModelPackageError(f"{path} keeps weights in external data files, which the package's checksums "
                                    f"do not cover: no variant's external_data names a data file for it; {REEXPORT}")
        users = {g for v in self.variants.values() for g, d in v.external_data.items() if d == data_name}
        if len(users) < 2:
            return external_graph(data, tensors, path, data_name, self.read_file(data_name, verify))
        key = (data_name, self.verify if verify is None else verify)
        if key not in self._shared:
            self._shared[key] = self.read_file(data_name, verify)
        return external_graph(data, tensors, path, data_name, self._shared[key], shared=True)

    def release_shared(self) -> None:
        """Let go of the shared data files read (read_graph) once the sessions are built: on CPU they keep the
        weights they read in place, on CUDA they copied them."""
        self._shared.clear()

    def verify_variant(self, name: str) -> None:
        """read_graph, SHA-256 checked, of each graph of the variant not verified before by this package object:
        variants may share files, and each file is read and hashed once (12,000 variants of the same two graphs
        made `seq2onnx info` hash them 12,000 times, 110 s)."""
        v = self.variants[name]
        for path in (v.encoder, v.decoder_step) + ((v.few_rows.decoder_step,) if v.few_rows else ()):
            if path.name not in self._verified:
                self.read_graph(path, verify=True)
                self._verified.add(path.name)


# --- files of the folder (package/files.py reads them) ---------------------------------------------
def _missing_listed(path: Path) -> str:
    return f"{path} is missing (listed in {MANIFEST}); copy the whole package folder or {REEXPORT}"


# --- fields of the manifest (their one-line checks: manifest_fields.py) ----------------------------------
_TOO_DEEP = f"nests lists and objects more than {MAX_JSON_DEPTH} levels deep, deeper than a manifest"


def _json_over_limits(value: Any) -> Optional[str]:
    """What in `value` (parsed JSON) goes past MAX_JSON_DEPTH levels of lists and objects or MAX_STRING_CHARS
    characters in a string (a value or a key), or None. One pass, linear in the size of `value`."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                return f"holds a string of {len(value)} characters (starting {_short(value[:40])}), more than a " \
                       f"manifest's {MAX_STRING_CHARS}"
        elif isinstance(value, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return _TOO_DEEP
            if isinstance(value, dict):
                stack.extend((k, depth) for k in value)
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return None


# the staging folder an export checks before it publishes it (export/commands.py write_package's gate): read as the
# package it is, not refused as an interrupted export's leftover
STAGED: "contextvars.ContextVar[Optional[Path]]" = contextvars.ContextVar("staged_package", default=None)


def _read_manifest(root: Path) -> Dict[str, Any]:
    interrupted = "" if STAGED.get() == root else interrupted_export(root)
    if interrupted:
        raise ModelPackageError(interrupted)
    if not root.is_dir():
        what = "is not a folder" if root.exists() else "does not exist"
        shipped = ", ".join(available_models()) or "none"
        raise ModelPackageError(f"{root} {what}: pass the folder written by `seq2onnx export`, "
                                f"or the name of a shipped model ({shipped})")
    path = root / MANIFEST
    run = [] if os.path.lexists(path) else checkpoints_in(root)
    if run:                                  # a training run folder (seq2onnx train --out): never exported
        raise ModelPackageError(f"{root} is a training run folder (it holds {', '.join(run)}), not a model package: "
                                f"export a checkpoint of it first, e.g. seq2onnx export {root / run[0]} MODEL_DIR, "
                                "then pass MODEL_DIR")
    hf = [] if os.path.lexists(path) else [n for n in HF_WEIGHT_FILES if os.path.lexists(root / n)]
    if hf:                                   # a transformers model folder (MarianMT, M2M100...): never converted
        raise ModelPackageError(f"{root} is a transformers model folder (it holds {hf[0]}), not a seq2onnx model "
                                f"package: convert it first, e.g. seq2onnx convert {root} MODEL_DIR, then pass "
                                "MODEL_DIR")
    data = read_regular(path, MAX_MANIFEST_BYTES, f"{path} is missing: {root} is not a seq2onnx model package; "
                                                  f"{REEXPORT}")
    if len(data) > MAX_MANIFEST_BYTES:
        raise ModelPackageError(f"{path} has more than {MAX_MANIFEST_BYTES} bytes, more than a manifest holds: "
                                f"this is not a seq2onnx model package; {REEXPORT}")
    over: Optional[str]
    try:
        manifest = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ModelPackageError(f"{path} is not valid JSON ({e}); {REEXPORT}") from e
    except RecursionError:                               # deeper than the parser goes (~1000 levels)
        manifest, over = None, _TOO_DEEP
    else:
        over = _json_over_limits(manifest)
    if over:
        raise ModelPackageError(f"{path} {over}: this is not a seq2onnx model package; {REEXPORT}")
    check_format(manifest, path)
    return manifest


def _check_file(root: Path, name: str, entry: FileRecord) -> None:
    """The listed file in the folder: present, a regular file, of its listed size."""
    path = root / name
    st = check_regular(path, _missing_listed(path))
    if st.st_size != entry.bytes:
        raise ModelPackageError(f"{path} has {st.st_size} bytes, {MANIFEST} says {entry.bytes} (truncated or "
                                f"changed); copy the package again or {REEXPORT}")


def version_numbers(text: Optional[str]) -> Tuple[int, ...]:
    """A min_onnxruntime as numbers: "1.21" -> (1, 21); absent or "" -> () (no need)."""
    return tuple(int(x) for x in text.split(".")) if text else ()


def version_text(numbers: Tuple[int, ...]) -> str:
    """(1, 21) -> "1.21": a min_onnxruntime as the manifest writes it (version_numbers reads it back)."""
    return ".".join(map(str, numbers))


# --- the tokenizer (its guards: package/tokenizer.py) ------------------------------------------------
def _read_tokenizer(package: ModelPackage, name: str, vocab_size: int) -> PackageTokenizer:
    """The tokenizer file `name`, of exactly vocab_size ids, with the package's special tokens."""
    where, config, manifest = package.root / MANIFEST, package.config, package.manifest
    if name not in manifest["files"]:
        raise ModelPackageError(f"{where}: the tokenizer {_short(name)} is not listed in 'files'; {REEXPORT}")
    path = package.root / name
    if package.file_bytes(name) > MAX_TOKENIZER_BYTES:
        raise ModelPackageError(f"{path} has {package.file_bytes(name)} bytes, more than a tokenizer may have "
                                f"({MAX_TOKENIZER_BYTES}); {REEXPORT}")
    data = package.read_file(name)
    try:
        with rust_panics_as_errors(path):
            raw = Tokenizer.from_str(text := data.decode("utf-8"))
    except ModelPackageError:
        raise
    except Exception as e:  # noqa: BLE001 - tokenizers raises a plain Exception
        raise ModelPackageError(f"{path} is not a tokenizers JSON file ({first_line(e)}); {REEXPORT}") from e
    foreign = foreign_regex(json.loads(text))
    if foreign is not None:
        raise ModelPackageError(f"{path}: its {foreign[0]} uses the regular expression {_short(foreign[1])}, which "
                                f"seq2onnx's tokenizer never writes (a regular expression can take minutes on a short "
                                f"text); {REEXPORT}")
    tokenizer = PackageTokenizer(specials_as_text(raw), path)
    if tokenizer.post_processor is not None:
        raise ModelPackageError(f"{path} has a post-processor, which would add ids to every text: a seq2onnx "
                                f"tokenizer has none (the model code adds EOS); {REEXPORT}")
    tokenizer.no_padding()           # the runtime pads itself; a package must not make every text 10**9 ids
    tokenizer.no_truncation()        # the runtime cuts to max_input_length itself
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size != vocab_size or _field(manifest, "vocab_size", int, where, default=config.vocab_size) != config.vocab_size:
        field = "vocab_size" if vocab_size == config.vocab_size else "src_vocab_size"
        raise ModelPackageError(f"{path} has {size} tokens but the model config has {field} {vocab_size} "
                                f"(manifest vocab_size {_short(manifest.get('vocab_size'))}): the "
                                f"tokenizer does not belong to this model; {REEXPORT}")
    if sorted(tokenizer.get_vocab(with_added_tokens=True).values()) != list(range(size)):
        raise ModelPackageError(f"{path}: its token ids are not exactly 0..{size - 1}, one per token: the tokenizer "
                                f"is broken; {REEXPORT}")
    specials = manifest.get("special_tokens") or {}       # of their kinds: Manifest.from_manifest
    for role in SPECIAL_ROLES:
        token = specials.get(role)
        want = getattr(config, f"{role}_id")
        if token is not None and tokenizer.token_to_id(token) != want:
            raise ModelPackageError(f"{path}: special token {role}={_short(token)} has id "
                                    f"{tokenizer.token_to_id(token)}, the config says {want}; {REEXPORT}")
    return tokenizer


def read_package(model_dir: Union[str, os.PathLike], verify: bool = True) -> ModelPackage:
    """Read and check a package folder; see the module docstring for what is checked."""
    root = resolve_model_dir(model_dir)
    manifest = _read_manifest(root)
    where = root / MANIFEST
    package = ModelPackage(root, manifest, None, None, {}, verify=verify)  # type: ignore[arg-type]

    def read_tokenizers(got: Dict[str, Any]) -> None:
        package.config, names = got["config"], got["tokenizer"]
        config = package.config
        package.tokenizer = _read_tokenizer(package, names.source, config.source_vocab_size)
        if names.target != names.source:
            package.target_tokenizer = _read_tokenizer(package, names.target, config.vocab_size)
        elif config.source_vocab_size != config.vocab_size:
            raise ModelPackageError(f"{where}: the model has a source vocabulary of its own (config.src_vocab_size) "
                                    f"but one tokenizer; {REEXPORT}")

    def read_language_ids(got: Dict[str, Any]) -> None:
        package.languages = got["languages"]
        if package.languages is not None:
            package.language_ids = package.languages.token_ids(package.tokenizer, package.detokenizer, where)

    record = Manifest.from_manifest(manifest, where, after={
        "file": lambda name, entry: _check_file(root, name, entry), "tokenizer": read_tokenizers,
        "languages": read_language_ids})
    package.record = record
    package.variants = {name: Variant.of(root, name, v) for name, v in record.variants.items()}
    package.cross_per_sentence = record.decoder_step_cross_per_sentence()
    package.generation = dict(record.generation or {})
    return package
