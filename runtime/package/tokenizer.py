"""The guards around a package's tokenizer (HF tokenizers, Rust): a literal special token in text stays text,
a panic in the Rust code is a ModelPackageError, and its regular expressions are the trainer's own
(ALLOWED_REGEXES). manifest.py reads and checks tokenizer.json with them; training and export load their
tokenizers through specials_as_text too."""
from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Tuple

from tokenizers import Tokenizer

from ..errors import REEXPORT, ModelPackageError, first_line

# group_digits (training/tokenizer.py): the empty place inside a digit run with a multiple of 3 digits to its right
THOUSANDS = r"(?<=\d)(?=(?:\d{3})+(?!\d))"
# The only regular expressions a package's tokenizer.json may hold ({"Regex": ...} patterns of Replace normalizers
# and decoders and Split pre-tokenizers): the ones seq2onnx's trainer writes. Any other could backtrack for minutes
# on a short text: Oniguruma's retry limit stops one match, not the thousands of matches on a long line (and
# JavaScript's RegExp has no limit at all). web/src/tokenizer_json.js holds the same list (a web test compares them).
# Converted SentencePiece tokenizers (export/hf_tokenizers.py; transformers' NLLB tokenizer has the first too): a
# run of spaces (-> one space: remove_extra_whitespaces), and the spaces at either end of a text (-> none: the same
# on the normalized text, and the slow tokenizers' strip() of the decoded text). Both linear: the lookbehind tries
# each run of spaces from its start only.
COLLAPSE_SPACES = " {2,}"
EDGE_SPACES = "^ +|(?<! ) +$"
ALLOWED_REGEXES = (THOUSANDS, COLLAPSE_SPACES, EDGE_SPACES)
REGEX_COMPONENTS = ("normalizer", "pre_tokenizer", "decoder")     # the parts of a tokenizer.json that run patterns


def foreign_regex(tokenizer_json: Any) -> Optional[Tuple[str, Any]]:
    """The first (component, pattern) of a parsed tokenizer.json whose {"Regex": pattern} is not in
    ALLOWED_REGEXES, or None."""
    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "Regex" in node and node["Regex"] not in ALLOWED_REGEXES:
                return node["Regex"]
            children: Iterable[Any] = node.values()
        elif isinstance(node, list):
            children = node
        else:
            return None
        for child in children:
            found = walk(child)
            if found is not None:
                return found
        return None

    if isinstance(tokenizer_json, dict):
        for component in REGEX_COMPONENTS:
            found = walk(tokenizer_json.get(component))
            if found is not None:
                return component, found
    return None


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


@contextmanager
def rust_panics_as_errors(path: Path) -> Iterator[None]:
    """A panic in the tokenizer's Rust code (a hostile tokenizer.json can cause one, e.g. with a corrupt
    Precompiled normalizer) reaches Python as pyo3's PanicException, a BaseException that `except
    Exception` misses (and that cannot be imported: it is known by its name): make it a ModelPackageError."""
    try:
        yield
    except BaseException as e:  # noqa: BLE001 - re-raised unless it is a PanicException
        if type(e).__name__ != "PanicException":
            raise
        raise ModelPackageError(f"{path}: the tokenizer crashed in its Rust code ({first_line(e)}): the file is "
                                f"broken; {REEXPORT}") from e


class PackageTokenizer:
    """The package's tokenizers.Tokenizer, with every method call under rust_panics_as_errors."""

    def __init__(self, tokenizer: Tokenizer, path: Path):
        self._tokenizer, self._path = tokenizer, path

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._tokenizer, name)
        if not callable(value):
            return value

        def guarded(*args: Any, **kwargs: Any) -> Any:
            with rust_panics_as_errors(self._path):
                return value(*args, **kwargs)
        return guarded
