"""The manifest fields of format_version 3 as typed records that the writer and the reader share.

    Tokenizers   "tokenizer": one file for both sides, or {"source": ..., "target": ...} (Marian's two
                 SentencePiece models)
    Languages    "languages": the codes a model translates from and into, and how a language reaches the
                 model (a source prefix token, a forced first target token)
    generation   "generation": the decoding options `translate_batch` starts from (a converted model's
                 generation_config: what `model.generate()` does with no arguments)

export/ writes `record.to_manifest()`; runtime/package/manifest.py reads `Record.from_manifest(value, where)`, which
checks every field and raises one ModelPackageError line naming it. docs/CONTRACTS.md, "Model package".
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from ..errors import REEXPORT, ModelPackageError
from .languages import resolve
from .manifest_fields import short
from ..options import Arg, DecodingOptions, OptionError

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
    source: Tuple[str, ...]
    target: Tuple[str, ...]
    tokens: Dict[str, str] = field(default_factory=dict)
    source_token: bool = False
    target_token: Optional[str] = None
    default_source: Optional[str] = None
    default_target: Optional[str] = None

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
