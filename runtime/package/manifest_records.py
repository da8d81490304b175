"""manifest.json as typed records that the writers (export/) and the reader (manifest.py) share.

    Manifest         the whole manifest: format, format_version, config, files, variants, graphs, ... in the order
                     manifest.json writes them
    FileRecord       files[name]: its SHA-256 and size
    VariantRecord    variants[name]: its graph files, precision, status, parity figures, and
      AttentionRecord    attention: the fused attention ops its graphs use and the onnxruntime they need
      FewRowsRecord      few_rows: a second decoder step for steps of few rows
    GraphsRecord     graphs: each graph's inputs and outputs (GraphRecord, GraphValue), as the exporter traced them
    SourceCheckpoint source_checkpoint: the checkpoint a package was exported from (its training metadata)
    SourceModel      source_model: the transformers model a package was converted from, and the converter's figures
    Tokenizers       "tokenizer": one file for both sides, or {"source": ..., "target": ...} (Marian's two
                     SentencePiece models)
    Languages        "languages": the codes a model translates from and into, and how a language reaches the
                     model (a source prefix token, a forced first target token)
    generation       "generation": the decoding options `translate_batch` starts from (a converted model's
                     generation_config: what `model.generate()` does with no arguments)

export/ builds records and writes `record.to_manifest()` (manifest_fields.Record: the fields in order, a None one left
out); manifest.py reads `Manifest.from_manifest(value, where)`, which checks every field and raises one
ModelPackageError line naming it. schema.py emits docs/manifest.schema.json from these records (`make schema`).
docs/CONTRACTS.md, "Model package".
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from ..errors import REEXPORT, ModelPackageError
from .config import ModelConfig
from .external_data import FIELD as EXTERNAL_DATA, MAX_DATA_BYTES, read_variant_field
from .languages import resolve
from .manifest_fields import Record, count_entries, entry, field as _field, short
from ..options import Arg, DecodingOptions, OptionError

FORMAT = "seq2onnx-model"
MANIFEST = "manifest.json"
# what `seq2onnx export` and `seq2onnx convert` write: 4 is 3 with decoder step contract 3 (past_length one per row);
# 3 is 2's decoder step with ModelConfig's variant fields, and optionally two tokenizers, languages and generation
# defaults; 1 and 2 differ in the decoder step (graph_io.py). A package of format 1 or 2 reads as one whose new fields
# are their defaults. The manifest's format_version is not the decoder step's contract: DECODER_OF_FORMAT maps one to
# the other (manifest.decoder_format).
FORMAT_VERSION = 4
READ_FORMAT_VERSIONS = (1, 2, 3, 4)
FORMAT_3_CONFIG = ("activation", "sinusoid", "position_offset", "embed_scale", "final_logits_bias",
                   "decoder_start_id", "src_vocab_size")
MAX_FILES = 64                          # entries of 'files'
MAX_VARIANTS = 32                       # entries of 'variants'
SHA256 = re.compile(r"[0-9a-f]{64}")
VERSION = re.compile(r"\d{1,4}(\.\d{1,4}){0,3}", re.ASCII)  # attention.min_onnxruntime: "1.21" (no other digits)
MAX_FEW_ROWS = 1 << 16                  # a variant's few_rows.max_rows: any value only picks a graph
FILE_NAME = re.compile(r"[A-Za-z0-9._+-]{1,255}")    # names in 'files': in the folder, nothing else
# manifest variant status (CONTRACTS.md) -> why the variant was not held to the export's thresholds
UNCHECKED = {"validation-skipped": "was exported with --skip-int8-validation",
             "unchecked-on-CUDA": "was not checked against PyTorch (no GPU at export)"}
STATUSES = ("checked", *UNCHECKED)
SPECIAL_ROLES = ("pad", "bos", "eos", "unk")       # special_tokens keys; ModelConfig has {role}_id
MAX_LANGUAGES = 4096                    # codes per side (NLLB-200: 202; OPUS-MT's multilingual models: a few hundred)
LANGUAGE_CODE = re.compile(r"[A-Za-z0-9_.@-]{1,32}")     # en, deu, pt_BR, eng_Latn, zh-Hant
TARGET_TOKEN = ("source_prefix", "forced_bos")           # how the target language reaches the model
# generation: the DecodingOptions a package may set as its defaults (not the per-call ones: seed, return_attention)
GENERATION_FIELDS = tuple(f.name for f in fields(DecodingOptions) if f.name not in ("seed", "return_attention"))


def _bad(where: Path, name: str, should: str, got: Any) -> ModelPackageError:
    text = repr(got)
    return ModelPackageError(f"{where}: the field {name} should be {should}, got "
                             f"{text if len(text) <= 60 else text[:60] + '...'}; {REEXPORT}")


@dataclass(frozen=True)
class Tokenizers:
    """The tokenizer files: source texts are encoded with `source`, output ids decoded with `target`."""
    source: str
    target: str

    @staticmethod
    def json_schema() -> Dict[str, Any]:
        return {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"source": {"type": "string"},
                                                                               "target": {"type": "string"}},
                                               "required": ["source", "target"], "additionalProperties": False}]}

    def to_manifest(self) -> Any:
        return self.source if self.source == self.target else {"source": self.source, "target": self.target}

    @classmethod
    def from_manifest(cls, value: Any, where: Path) -> "Tokenizers":
        if isinstance(value, str):
            return cls(value, value)
        if isinstance(value, dict) and set(value) == {"source", "target"} \
                and all(isinstance(v, str) for v in value.values()):
            return cls(value["source"], value["target"])
        raise _bad(where, "tokenizer", 'a file name or {"source": file, "target": file}', value)


@dataclass(frozen=True)
class Languages:
    """source/target: the language codes (as the model's users know them: "de", "fra", "eng_Latn");
    tokens: code -> its token in the vocabulary, for models that take languages as tokens;
    source_token: the source language's token starts the source ids (M2M100, NLLB);
    target_token: "source_prefix" (Marian's >>fra<< before the source text), "forced_bos" (M2M100, NLLB: the
    first generated token, log-prob 0, as transformers' ForcedBOSTokenLogitsProcessor), or None;
    default_source/default_target: the language used when a call names none (None: the only one, if one)."""
    source: Tuple[str, ...] = entry(maxItems=MAX_LANGUAGES, items={"pattern": LANGUAGE_CODE.pattern})
    target: Tuple[str, ...] = entry(maxItems=MAX_LANGUAGES, items={"pattern": LANGUAGE_CODE.pattern})
    tokens: Dict[str, str] = field(default_factory=dict)
    source_token: bool = False
    target_token: Optional[str] = entry(None, enum=list(TARGET_TOKEN))
    default_source: Optional[str] = None
    default_target: Optional[str] = None
    CLOSED = True

    def to_manifest(self) -> Dict[str, Any]:
        d = asdict(self)
        return dict(d, source=list(self.source), target=list(self.target))

    @classmethod
    def from_manifest(cls, value: Any, where: Path) -> "Languages":
        if not isinstance(value, dict):
            raise _bad(where, "languages", "an object", value)
        unknown = sorted(set(value) - {f.name for f in fields(cls)})
        if unknown:
            raise _bad(where, f"languages.{unknown[0]}", "absent (this runtime does not know it)", value[unknown[0]])
        codes: Dict[str, List[str]] = {}
        for side in ("source", "target"):
            got = value.get(side)
            if not isinstance(got, list) or len(got) > MAX_LANGUAGES \
                    or not all(isinstance(c, str) and LANGUAGE_CODE.fullmatch(c) for c in got):
                raise _bad(where, f"languages.{side}", f"a list of at most {MAX_LANGUAGES} language codes", got)
            codes[side] = got
        tokens = value.get("tokens", {})
        if not isinstance(tokens, dict) or not all(isinstance(t, str) for t in tokens.values()) \
                or not set(tokens) <= set(codes["source"]) | set(codes["target"]):
            raise _bad(where, "languages.tokens", "an object from the model's language codes to tokens", tokens)
        source_token = value.get("source_token", False)
        if not isinstance(source_token, bool):
            raise _bad(where, "languages.source_token", "true or false", source_token)
        target_token = value.get("target_token")
        if target_token is not None and target_token not in TARGET_TOKEN:
            raise _bad(where, "languages.target_token", f"null or one of {', '.join(TARGET_TOKEN)}", target_token)
        needs = (codes["source"] if source_token else []) + (codes["target"] if target_token else [])
        missing = [c for c in needs if c not in tokens]
        if missing:
            raise _bad(where, "languages.tokens", f"a token for each language (none for {missing[0]!r})", tokens)
        defaults = {}
        for side in ("source", "target"):
            d = value.get(f"default_{side}")
            if d is not None and d not in codes[side]:
                raise _bad(where, f"languages.default_{side}", f"null or one of languages.{side}", d)
            defaults[side] = d
        return cls(tuple(codes["source"]), tuple(codes["target"]), dict(tokens), source_token, target_token,
                   defaults["source"], defaults["target"])

    def token_ids(self, source_tokenizer: Any, target_tokenizer: Any, where: Path) -> Dict[str, int]:
        """code -> the id of its token, in the tokenizer that carries it: the source one for source tokens and
        Marian's target tags (they start the source), the target one for a forced first target token."""
        ids = {}
        for code, token in self.tokens.items():
            on_target = code in self.target and self.target_token == "forced_bos" \
                and not (code in self.source and self.source_token)
            token_id = (target_tokenizer if on_target else source_tokenizer).token_to_id(token)
            if token_id is None:
                raise ModelPackageError(f"{where}: languages.tokens[{short(code)}] = {short(token)} is not a token "
                                        f"of the {'target' if on_target else 'source'} tokenizer; {REEXPORT}")
            ids[code] = token_id
        return ids

    def pick(self, side: str, code: Optional[str], arg: str) -> Optional[str]:
        """The language of `side` a call asks for (arg: its keyword, source_lang / target_lang; in any form
        languages.resolve takes: "fr" for a model's "fra" or "fra_Latn"), or the default;
        a one-line OptionError for a code the model lacks, or for none where the model needs one."""
        known = self.source if side == "source" else self.target
        if code is None:
            code = self.default_source if side == "source" else self.default_target
            if code is None and len(known) == 1:
                code = known[0]
            needed = self.source_token if side == "source" else self.target_token is not None
            if code is None and needed:
                raise OptionError(Arg(arg), f" is needed: this model translates {'from' if side == 'source' else 'into'}"
                                  f" {len(known)} languages ({_listed(known)})")
            return code
        if not isinstance(code, str):
            raise OptionError(Arg(arg), f" must be a language code (str), got {type(code).__name__}")
        found = resolve(code, known)
        if found is None:
            raise OptionError(Arg(arg, value=code), f" is not a {side} language of this model; it has "
                              f"{_listed(known)} (seq2onnx info MODEL lists them)")
        return found


def _listed(codes: Tuple[str, ...], most: int = 12) -> str:
    return ", ".join(codes[:most]) + (f" and {len(codes) - most} more" if len(codes) > most else "") if codes \
        else "none recorded"


def read_generation(value: Any, where: Path) -> Dict[str, Any]:
    """The manifest's "generation": DecodingOptions fields whose values pass DecodingOptions' own checks."""
    if not isinstance(value, dict):
        raise _bad(where, "generation", "an object of decoding options", value)
    unknown = sorted(set(value) - set(GENERATION_FIELDS))
    if unknown:
        raise _bad(where, f"generation.{unknown[0]}", f"one of the decoding options ({', '.join(GENERATION_FIELDS)})",
                   value[unknown[0]])
    try:
        DecodingOptions(**value)
    except (OptionError, TypeError, ValueError) as e:
        raise ModelPackageError(f"{where}: the field generation holds a bad decoding option ({e}); {REEXPORT}") \
            from None
    return dict(value)


# --- the rest of the manifest ------------------------------------------------------------------------------------
def _number_map(obj: Dict[str, Any], where: Path, name: str) -> Dict[str, Any]:
    """obj's values, each a number (thresholds)."""
    for key in obj:
        _field(obj, key, float, where, f"{name}[{short(key)}]")
    return obj


def _strings(value: List[Any], where: Path, name: str) -> Tuple[str, ...]:
    for i in range(len(value)):
        _field({str(i): value[i]}, str(i), str, where, f"{name}[{i}]")
    return tuple(value)


def _listed_file(obj: Dict[str, Any], key: str, files: Mapping[str, Any], where: Path, name: str) -> str:
    file = obj.get(key)
    if not isinstance(file, str) or file not in files:
        raise ModelPackageError(f"{where}: {name} = {short(file)} is not a file listed in 'files'; {REEXPORT}")
    return file


def read_version(obj: Dict[str, Any], where: Path, name: str, required: bool = True) -> Optional[str]:
    """obj's min_onnxruntime, a version such as "1.21" (manifest.version_numbers reads it as numbers); None where
    it is not required and absent."""
    needs = _field(obj, "min_onnxruntime", str, where, f"{name}['min_onnxruntime']",
                   **({} if required else {"default": None}))
    if needs and not VERSION.fullmatch(needs):
        raise ModelPackageError(f"{where}: {name}['min_onnxruntime'] should be a version such as 1.21, got "
                                f"{short(needs)}; {REEXPORT}")
    return needs


@dataclass(frozen=True)
class FileRecord(Record):
    """files[name]: every file of the package but manifest.json, with its SHA-256 and size."""
    sha256: str = entry(pattern=SHA256.pattern)
    bytes: int = entry(minimum=0, maximum=MAX_DATA_BYTES)

    @classmethod
    def from_manifest(cls, value: Any, where: Path, name: str) -> "FileRecord":
        if not FILE_NAME.fullmatch(name) or name in (".", "..", MANIFEST):
            raise ModelPackageError(f"{where}: bad file name {short(name)} in 'files'; {REEXPORT}")
        if not isinstance(value, dict):
            raise ModelPackageError(f"{where}: files[{name!r}] needs 'sha256' and 'bytes'; {REEXPORT}")
        sha256 = _field(value, "sha256", str, where, f"files[{name!r}]['sha256']")
        size = _field(value, "bytes", int, where, f"files[{name!r}]['bytes']")
        if not SHA256.fullmatch(sha256) or not 0 <= size <= MAX_DATA_BYTES:   # graphs: read_graph's limit
            raise ModelPackageError(f"{where}: files[{name!r}] should have a 'sha256' of 64 hex digits and 'bytes' "
                                    f"in [0, {MAX_DATA_BYTES}], got {short(value)}; {REEXPORT}")
        return cls(sha256, size)


@dataclass(frozen=True)
class AttentionRecord(Record):
    """A variant's attention: the fused attention ops its decoder step runs (int8: onnxruntime's contrib ops), the
    onnxruntime they need (older: the variant is not loaded), and the fp32 parity of the graph it was quantised from."""
    ops: Optional[Tuple[str, ...]] = None
    min_onnxruntime: Optional[str] = entry(None, pattern=f"(?:{VERSION.pattern})?")     # "": no need
    fp32_parity: Optional[Dict[str, Any]] = None

    @classmethod
    def from_manifest(cls, value: Dict[str, Any], where: Path, name: str, path: str) -> "AttentionRecord":
        """name: the field in the messages of the checks both runtimes write by hand; path: in those of the checks
        the web runtime's reader leaves to the schema (web/src/schema.js names a record's field .field, an entry of
        an object [key], an item [i])."""
        needs = read_version(value, where, name, required=False)
        ops = _field(value, "ops", list, where, f"{path}.ops", default=None)
        parity = _field(value, "fp32_parity", dict, where, f"{path}.fp32_parity", default=None)
        return cls(None if ops is None else _strings(ops, where, f"{path}.ops"), needs, parity)


@dataclass(frozen=True)
class FewRowsRecord(Record):
    """A variant's few_rows: its second decoder step for steps of at most max_rows rows (int8: its weight MatMuls as
    MatMulNBits, faster at 1-4 rows; export/quantize.py), taking the same inputs and caches as the step, and the
    onnxruntime it needs (older: the runtime steps with the variant's decoder step only)."""
    decoder_step: str
    max_rows: int = entry(minimum=1, maximum=MAX_FEW_ROWS)
    min_onnxruntime: str = entry(pattern=f"(?:{VERSION.pattern})?")     # "": no need
    quantization: Optional[Dict[str, Any]] = None
    parity: Optional[Dict[str, Any]] = None

    @classmethod
    def from_manifest(cls, value: Dict[str, Any], where: Path, name: str, path: str,
                      files: Mapping[str, Any]) -> "FewRowsRecord":
        """name, path: as AttentionRecord.from_manifest's."""
        file = _listed_file(value, "decoder_step", files, where, f"{name}['decoder_step']")
        max_rows = _field(value, "max_rows", int, where, f"{name}['max_rows']")
        if not 1 <= max_rows <= MAX_FEW_ROWS:
            raise ModelPackageError(f"{where}: {name}['max_rows'] should be in [1, {MAX_FEW_ROWS}], got "
                                    f"{short(max_rows)}; {REEXPORT}")
        needs = read_version(value, where, name)
        quantization = _field(value, "quantization", dict, where, f"{path}.quantization", default=None)
        parity = _field(value, "parity", dict, where, f"{path}.parity", default=None)
        return cls(file, max_rows, needs, quantization, parity)    # type: ignore[arg-type]


@dataclass(frozen=True)
class VariantRecord(Record):
    """variants[name] (fp32 | int8 | fp16): its graph files, precision (float32 | int8 | float16; absent: the name),
    where its figures were measured (checked_on: an onnxruntime provider, null where they were not), status (absent:
    checked; CONTRACTS.md), how it was quantised, its attention and few-rows step, the thresholds it was held to,
    its parity figures against PyTorch (null where not measured), and external_data: {graph file: its data file}."""
    encoder: str
    decoder_step: str
    precision: Optional[str] = None
    checked_on: Optional[str] = entry(None, null=True)
    status: Optional[str] = entry(None, enum=list(STATUSES))
    quantization: Optional[Dict[str, Any]] = None
    attention: Optional[AttentionRecord] = None
    few_rows: Optional[FewRowsRecord] = None
    thresholds: Optional[Dict[str, float]] = None
    parity: Optional[Dict[str, Any]] = entry(None, null=True)
    note: Optional[str] = None
    external_data: Optional[Dict[str, str]] = None

    def graphs(self) -> List[str]:
        """Its graph files: encoder, decoder step, and its few-rows step if it has one."""
        return [self.encoder, self.decoder_step] + ([self.few_rows.decoder_step] if self.few_rows else [])

    @classmethod
    def from_manifest(cls, value: Any, where: Path, name: str, files: Mapping[str, Any],
                      data_files: Dict[str, str]) -> "VariantRecord":
        """data_files: graph file -> its data file, over the variants read before (updated: a graph has one)."""
        label = f"variants[{short(name)}]"
        if not isinstance(value, dict):
            raise ModelPackageError(f"{where}: {label} is not an object; {REEXPORT}")
        encoder, decoder = (_listed_file(value, g, files, where, f"{label}[{g!r}]") for g in ("encoder", "decoder_step"))
        precision = _field(value, "precision", str, where, f"{label}['precision']", default=None)
        parity = _field(value, "parity", dict, where, f"{label}['parity']", default=None)
        status = _field(value, "status", str, where, f"{label}['status']", default=None)
        if status is not None and status not in STATUSES:
            raise ModelPackageError(f"{where}: {label}['status'] should be one of {', '.join(STATUSES)}, got "
                                    f"{short(status)}; {REEXPORT}")
        attention = _field(value, "attention", dict, where, f"{label}['attention']", default=None)
        attention = None if attention is None else AttentionRecord.from_manifest(
            attention, where, f"{label}['attention']", f"{label}.attention")
        few = _field(value, "few_rows", dict, where, f"{label}['few_rows']", default=None)
        few = None if few is None else FewRowsRecord.from_manifest(few, where, f"{label}['few_rows']",
                                                                   f"{label}.few_rows", files)
        graphs = [encoder, decoder] + ([few.decoder_step] if few else [])
        external = read_variant_field(value, dict(files), graphs, where, label, data_files)
        # the fields the web runtime leaves to the schema: named as AttentionRecord.from_manifest's path
        checked_on = _field(value, "checked_on", str, where, f"{label}.checked_on", default=None)
        quantization = _field(value, "quantization", dict, where, f"{label}.quantization", default=None)
        thresholds = _field(value, "thresholds", dict, where, f"{label}.thresholds", default=None)
        note = _field(value, "note", str, where, f"{label}.note", default=None)
        return cls(encoder, decoder, precision, checked_on, status, quantization, attention, few,
                   None if thresholds is None else _number_map(thresholds, where, f"{label}.thresholds"), parity,
                   note, external if value.get(EXTERNAL_DATA) is not None else None)


@dataclass(frozen=True)
class GraphValue(Record):
    """One input or output of a graph: its name, element type (numpy's name: float32, int64) and shape (a fixed
    axis an integer, a dynamic one its name: batch, src_len, rows, capacity)."""
    name: str
    dtype: str
    shape: Tuple[Union[int, str], ...]

    @classmethod
    def from_manifest(cls, value: Any, where: Path, name: str) -> "GraphValue":
        if not isinstance(value, dict):
            raise ModelPackageError(f"{where}: the field {name} should be an object, got {short(value)}; {REEXPORT}")
        io_name = _field(value, "name", str, where, f"{name}.name")
        dtype = _field(value, "dtype", str, where, f"{name}.dtype")
        shape = _field(value, "shape", list, where, f"{name}.shape")
        for i, dim in enumerate(shape):
            if not isinstance(dim, (int, str)) or isinstance(dim, bool):
                raise ModelPackageError(f"{where}: the field {name}.shape[{i}] should be an integer or a string, got "
                                        f"{short(dim)}; {REEXPORT}")
        return cls(io_name, dtype, tuple(shape))


def _graph_values(obj: Dict[str, Any], key: str, where: Path, name: str) -> Optional[Tuple[GraphValue, ...]]:
    values = _field(obj, key, list, where, f"{name}.{key}", default=None)
    return None if values is None else tuple(GraphValue.from_manifest(v, where, f"{name}.{key}[{i}]")
                                             for i, v in enumerate(values))


@dataclass(frozen=True)
class GraphRecord(Record):
    """graphs.encoder / graphs.decoder_step: the graph's inputs and outputs as the exporter traced them (the
    README's tables, `seq2onnx info`); cross_per_sentence (decoder step): it takes cross K/V and the encoder mask once
    per sentence, not once per row (absent or false: packages exported before that contract; CONTRACTS.md)."""
    inputs: Optional[Tuple[GraphValue, ...]] = None
    outputs: Optional[Tuple[GraphValue, ...]] = None
    cross_per_sentence: Optional[bool] = None


@dataclass(frozen=True)
class GraphsRecord(Record):
    encoder: Optional[GraphRecord] = None
    decoder_step: Optional[GraphRecord] = None

    @classmethod
    def from_manifest(cls, value: Dict[str, Any], where: Path) -> "GraphsRecord":
        decoder = _field(value, "decoder_step", dict, where, "graphs.decoder_step", default=None)
        cross = _field(decoder or {}, "cross_per_sentence", bool, where, "graphs.decoder_step.cross_per_sentence",
                       default=None)
        encoder = _field(value, "encoder", dict, where, "graphs.encoder", default=None)
        graphs = {}
        for key, graph in (("encoder", encoder), ("decoder_step", decoder)):
            if graph is not None:
                name = f"graphs.{key}"
                graphs[key] = GraphRecord(_graph_values(graph, "inputs", where, name),
                                          _graph_values(graph, "outputs", where, name),
                                          cross if key == "decoder_step" else None)
        return cls(**graphs)


@dataclass(frozen=True)
class SourceCheckpoint(Record):
    """source_checkpoint: the checkpoint file a package was exported from, its training metadata (train_meta, as the
    trainer wrote it), and why the trainer's rule calls it undertrained (absent: it does not)."""
    file: Optional[str] = None
    train_meta: Optional[Dict[str, Any]] = None
    undertrained: Optional[Tuple[str, ...]] = None

    @classmethod
    def from_manifest(cls, value: Dict[str, Any], where: Path) -> "SourceCheckpoint":
        file = _field(value, "file", str, where, "source_checkpoint.file", default=None)
        meta = _field(value, "train_meta", dict, where, "source_checkpoint.train_meta", default=None)
        reasons = _field(value, "undertrained", list, where, "source_checkpoint.undertrained", default=None)
        return cls(file, meta, None if reasons is None else _strings(reasons, where, "source_checkpoint.undertrained"))


@dataclass(frozen=True)
class SourceModel(Record):
    """source_model (converted packages): the transformers model's type and folder name, its architectures, the
    transformers version the converter compared with, and the figures of that comparison (parity: written after the
    converter's gate)."""
    type: Optional[str] = None
    folder: Optional[str] = None
    architectures: Optional[Tuple[str, ...]] = None
    transformers_version: Optional[str] = None
    parity: Optional[Dict[str, Any]] = None

    @classmethod
    def from_manifest(cls, value: Dict[str, Any], where: Path) -> "SourceModel":
        got = {key: _field(value, key, str, where, f"source_model.{key}", default=None)
               for key in ("type", "folder", "transformers_version")}
        arch = _field(value, "architectures", list, where, "source_model.architectures", default=None)
        parity = _field(value, "parity", dict, where, "source_model.parity", default=None)
        return cls(architectures=None if arch is None else _strings(arch, where, "source_model.architectures"),
                   parity=parity, **got)


def check_format(value: Any, where: Path) -> None:
    """format is FORMAT and format_version one this runtime reads (one line naming the fix: a newer one, upgrade)."""
    if not isinstance(value, dict) or value.get("format") != FORMAT:
        got = value.get("format") if isinstance(value, dict) else type(value).__name__
        raise ModelPackageError(f"{where}: format is {short(got)}, not {FORMAT!r}: this is not a seq2onnx model "
                                f"package")
    version = value.get("format_version")
    if version not in READ_FORMAT_VERSIONS or not isinstance(version, int) or isinstance(version, bool):
        newer = isinstance(version, int) and not isinstance(version, bool) and version > max(READ_FORMAT_VERSIONS)
        fix = "upgrade seq2onnx (update its checkout, then pip install it again)" if newer else REEXPORT
        readable = ", ".join(map(str, READ_FORMAT_VERSIONS[:-1])) + f" and {READ_FORMAT_VERSIONS[-1]}"
        raise ModelPackageError(f"{where}: format_version {short(version)} is unknown; this runtime reads "
                                f"format_version {readable}: {fix}")


def read_config(value: Dict[str, Any], where: Path) -> ModelConfig:
    """config: every ModelConfig field (no defaults: the graphs were built from these), but for the fields format 3
    added, which an earlier package reads as their defaults."""
    fields_ = _field(value, "config", dict, where)
    for f in fields(ModelConfig):
        if f.name not in fields_ and (value["format_version"] >= 3 or f.name not in FORMAT_3_CONFIG):
            raise ModelPackageError(f"{where}: the field config.{f.name} is missing; {REEXPORT}")
    try:
        return ModelConfig.from_dict(fields_)
    except (TypeError, ValueError) as e:
        raise ModelPackageError(f"{where}: bad model config ({e}); {REEXPORT}") from e


@dataclass(frozen=True)
class Manifest(Record):
    """manifest.json: its fields in the order the exporter writes them (an optional one it does not set is absent).
    The reader checks them in the order of from_manifest: format, config, files, variants, then the rest."""
    format: str = entry(const=FORMAT)
    format_version: int = entry(enum=list(READ_FORMAT_VERSIONS))
    seq2onnx_version: Optional[str] = None
    created: Optional[str] = None
    config: Optional[ModelConfig] = entry(None, must=True)
    special_tokens: Optional[Dict[str, Any]] = entry(None, properties={role: {"type": ["string", "null"]}
                                                                       for role in SPECIAL_ROLES})
    vocab_size: Optional[int] = None
    tokenizer: Optional[Tokenizers] = entry(None, must=True)
    opset: Optional[int] = None
    ir_version: Optional[int] = None
    graphs: Optional[GraphsRecord] = None
    variants: Dict[str, VariantRecord] = entry(factory=dict, must=True, maxProperties=MAX_VARIANTS, required=["fp32"])
    files: Dict[str, FileRecord] = entry(factory=dict, must=True, maxProperties=MAX_FILES,
                                         propertyNames={"pattern": FILE_NAME.pattern})
    exporter: Optional[Dict[str, str]] = None
    source_checkpoint: Optional[SourceCheckpoint] = None
    generation: Optional[Dict[str, Any]] = None
    source_model: Optional[SourceModel] = None
    languages: Optional[Languages] = None

    @classmethod
    def from_manifest(cls, value: Any, where: Path,
                      after: Mapping[str, Callable[..., None]] = {}) -> "Manifest":
        """The manifest's records, every field checked. after: what the reader checks against the folder once some
        fields are read, so that a package's first fault is the one reported whether it lies in a field or in a
        file: "file" (name, FileRecord): the file on disk; "tokenizer", "languages" (the records read so far): the
        tokenizer files, the language tokens."""
        check_format(value, where)
        got: Dict[str, Any] = {"format": value["format"], "format_version": value["format_version"]}
        got["config"] = read_config(value, where)
        files = count_entries(value, "files", MAX_FILES, where)
        got["files"] = {}
        for name, file in files.items():        # each file's fields, then (after["file"]) the file in the folder
            got["files"][name] = FileRecord.from_manifest(file, where, name)
            after.get("file", _nothing)(name, got["files"][name])
        data_files: Dict[str, str] = {}
        got["variants"] = {name: VariantRecord.from_manifest(v, where, name, files, data_files)
                           for name, v in count_entries(value, "variants", MAX_VARIANTS, where).items()}
        if "fp32" not in got["variants"]:
            raise ModelPackageError(f"{where}: no 'fp32' variant; {REEXPORT}")
        graphs = _field(value, "graphs", dict, where, default=None)
        got["graphs"] = None if graphs is None else GraphsRecord.from_manifest(graphs, where)
        for key in ("seq2onnx_version", "created"):
            got[key] = _field(value, key, str, where, default=None)
        for key in ("opset", "ir_version"):
            got[key] = _field(value, key, int, where, default=None)
        exporter = _field(value, "exporter", dict, where, default=None)
        for key in exporter or {}:
            _field(exporter, key, str, where, f"exporter[{short(key)}]")
        got["exporter"] = exporter
        source = _field(value, "source_checkpoint", dict, where, default=None)
        got["source_checkpoint"] = None if source is None else SourceCheckpoint.from_manifest(source, where)
        specials = _field(value, "special_tokens", dict, where, default=None)
        for role in SPECIAL_ROLES:
            _field(specials or {}, role, str, where, f"special_tokens.{role}", default=None)
        got["special_tokens"] = specials
        got["vocab_size"] = _field(value, "vocab_size", int, where, default=None)
        model = _field(value, "source_model", dict, where, default=None)
        got["source_model"] = None if model is None else SourceModel.from_manifest(model, where)
        got["tokenizer"] = Tokenizers.from_manifest(_field(value, "tokenizer", (str, dict), where), where)
        after.get("tokenizer", _nothing)(got)
        languages = _field(value, "languages", dict, where, default=None)
        got["languages"] = None if languages is None else Languages.from_manifest(languages, where)
        after.get("languages", _nothing)(got)
        generation = _field(value, "generation", dict, where, default=None)
        got["generation"] = None if generation is None else read_generation(generation, where)
        return cls(**got)

    def decoder_step_cross_per_sentence(self) -> bool:
        """graphs.decoder_step.cross_per_sentence: true, or absent / false (packages exported before it existed)."""
        step = self.graphs.decoder_step if self.graphs else None
        return bool(step and step.cross_per_sentence)


def _nothing(*args: Any) -> None:
    pass
