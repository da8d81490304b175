"""Fuzzing (hypothesis) over the manifest, the tokenizer file and the input text. The property:
loading a package and translating with it either works or raises the project's one-line error
(Seq2OnnxError, ModelPackageError among them), never anything else; a tokenizer id never leaves the
vocabulary. Each target edits the session's real tiny package (tests/fixtures_export.py).

Deterministic, so it cannot flake: derandomize=True (a fixed seed per test) and no example database;
bounded: max_examples and the sizes of what is drawn keep each target to a few seconds. To fuzz longer
on a workstation: SEQ2ONNX_FUZZ_EXAMPLES=5000 pytest tests/properties/test_fuzz.py."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import warnings

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.translator import TranslationResult, Translator

FUZZ = settings(max_examples=int(os.environ.get("SEQ2ONNX_FUZZ_EXAMPLES", 60)), derandomize=True, database=None,
                deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TEXTS = ["three one four", "", "</s> <pad> <unk>", "x" * 40]

# leaves that have broken parsers before: bounds, bools for numbers, paths, NUL, escapes, huge numbers
ODD = st.sampled_from([0, -1, 1, 2**31, 2**63, 10**9, 10**30, 1.5, float("nan"), float("inf"), True, False, None,
                       "", "../tokenizer.json", "/etc/passwd", "a\x00b", "\x1b[2J", "\ud800", "x" * 300, [], {}])
JSON = st.recursive(st.one_of(ODD, st.integers(), st.floats(), st.text(max_size=12)),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                    max_leaves=8)


@pytest.fixture(scope="module")
def work(tiny_package, tmp_path_factory):
    """A copy of the tiny package that each example rewrites (its manifest and tokenizer), and the
    originals: (folder, manifest, tokenizer)."""
    folder = tmp_path_factory.mktemp("fuzz") / "model"
    shutil.copytree(tiny_package, folder)
    return (folder, json.loads((folder / "manifest.json").read_text(encoding="utf-8")),
            json.loads((folder / "tokenizer.json").read_text(encoding="utf-8")))


def paths(value, prefix=()):
    """Every key path in a JSON value."""
    yield prefix
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield from paths(child, prefix + (key,))


def mutate(data, value, draw):
    """`value` (a deep copy) with 1-3 edits: a value replaced, a key removed or a key added."""
    value = json.loads(json.dumps(value))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(list(paths(value))[1:]))
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        how = draw(st.sampled_from(["replace", "remove", "add"]))
        if how == "remove":
            del parent[path[-1]]
        elif how == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=8))] = data(JSON)
        else:
            parent[path[-1]] = data(JSON)
    return value


def write(folder, manifest, tokenizer: bytes):
    """The package's manifest and tokenizer.json, the manifest listing the tokenizer's checksum."""
    manifest = json.loads(json.dumps(manifest))
    entry = manifest.get("files", {}).get("tokenizer.json") if isinstance(manifest.get("files"), dict) else None
    if isinstance(entry, dict):
        entry.update(sha256=hashlib.sha256(tokenizer).hexdigest(), bytes=len(tokenizer))
    (folder / "tokenizer.json").write_bytes(tokenizer)
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def load_and_translate(folder, texts=TEXTS, **options):
    """Load the package and translate `texts`: the results, or None when it was refused with the project's
    one-line error. Any other exception fails the test."""
    try:
        package = read_package(folder)
        for enc in package.tokenizer.encode_batch(list(texts)):
            assert all(0 <= i < package.config.vocab_size for i in enc.ids)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = Translator(folder, device="cpu", intra_threads=1).translate_batch(list(texts), **options)
    except Seq2OnnxError as e:
        assert "\n" not in str(e)
        event(f"refused: {type(e).__name__}")
        return None
    event("translated")
    assert all(isinstance(r, TranslationResult) and all(isinstance(h, str) for h in r.hypotheses) for r in results)
    return results


# --- the manifest -------------------------------------------------------------------------------------------
@FUZZ
@given(data=st.data())
def test_fuzz_manifest_fields(work, data):
    folder, manifest, tokenizer = work
    edited = mutate(data.draw, manifest, data.draw)
    write(folder, edited, json.dumps(tokenizer).encode())
    load_and_translate(folder, beam_size=data.draw(st.integers(1, 3)))


@FUZZ
@given(raw=st.one_of(st.binary(max_size=300), JSON.map(lambda v: json.dumps(v).encode()),
                     st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_fuzz_manifest_bytes(work, raw):
    folder, manifest, tokenizer = work
    write(folder, manifest, json.dumps(tokenizer).encode())
    (folder / "manifest.json").write_bytes(raw)
    assert load_and_translate(folder) is None


# --- the tokenizer ------------------------------------------------------------------------------------------
REGEX = st.sampled_from([r"\s+", r"(?=a\K)", r"(a*)*b", r"\p{L}+", r"[", "", r"\b", r"(?<=\Ka)b", r".*"]) | st.text(
    max_size=6)
PATTERN = st.one_of(REGEX.map(lambda r: {"Regex": r}), st.text(max_size=3).map(lambda s: {"String": s}))
BEHAVIOR = st.sampled_from(["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"])
NORMALIZERS = st.one_of(
    st.sampled_from([{"type": t} for t in ["NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Nmt"]]),
    st.builds(lambda p, c: {"type": "Replace", "pattern": p, "content": c}, PATTERN, st.text(max_size=4)),
    st.builds(lambda s: {"type": "Prepend", "prepend": s}, st.text(max_size=4)),
    st.builds(lambda b: {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(b).decode()},
              st.binary(max_size=40)),
)
PRE_TOKENIZERS = st.one_of(
    st.sampled_from([{"type": t} for t in ["Whitespace", "WhitespaceSplit", "UnicodeScripts", "BertPreTokenizer"]]),
    st.builds(lambda p, b, i: {"type": "Split", "pattern": p, "behavior": b, "invert": i}, PATTERN, BEHAVIOR,
              st.booleans()),
    st.builds(lambda r, s: {"type": "Metaspace", "replacement": r, "prepend_scheme": s, "split": True},
              st.sampled_from(["▁", "a", "\x00"]), st.sampled_from(["always", "never", "first", "bogus"])),
    st.builds(lambda d: {"type": "CharDelimiterSplit", "delimiter": d}, st.text(min_size=1, max_size=1)),
    st.builds(lambda d: {"type": "Digits", "individual_digits": d}, st.booleans()),
)
DECODERS = st.one_of(
    st.sampled_from([{"type": t} for t in ["Fuse", "ByteFallback"]] + [{"type": "Metaspace", "replacement": "▁",
                                                                       "prepend_scheme": "always", "split": True}]),
    st.builds(lambda p, c: {"type": "Replace", "pattern": p, "content": c}, PATTERN, st.text(max_size=4)),
    st.builds(lambda c, a, b: {"type": "Strip", "content": c, "start": a, "stop": b},
              st.text(min_size=1, max_size=1), st.integers(0, 10**6), st.integers(0, 10**6)),
)
COMPONENT = {"normalizer": NORMALIZERS, "pre_tokenizer": PRE_TOKENIZERS, "decoder": DECODERS}


@FUZZ
@given(data=st.data())
def test_fuzz_tokenizer(work, data):
    folder, manifest, tokenizer = work
    draw = data.draw
    edited = json.loads(json.dumps(tokenizer))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(list(COMPONENT) + ["any"]))
        if key in COMPONENT:
            component = draw(COMPONENT[key])
            edited[key] = {"type": "Sequence", f"{key}s" if key != "pre_tokenizer" else "pretokenizers":
                           [component, draw(COMPONENT[key])]} if draw(st.booleans()) else component
        else:
            edited = mutate(draw, edited, draw)
    write(folder, manifest, json.dumps(edited).encode("utf-8", "surrogatepass"))
    load_and_translate(folder, texts=draw(st.lists(st.text(max_size=30), min_size=1, max_size=3)))


# --- the input text -----------------------------------------------------------------------------------------
ODD_TEXT = st.sampled_from(["\ud800", "\udcff", "\ufdfa", "\u202e", "\x00", "\x1b[31m", "</s>", "<pad>", "\ufeff",
                            "\n", "\r\n", "\u2028", "😀", "三", " " * 3, "seven"])


@pytest.fixture(scope="module")
def tr(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


@FUZZ
@given(texts=st.lists(st.lists(st.characters() | ODD_TEXT, max_size=40).map("".join), min_size=1, max_size=3),
       beam_size=st.integers(1, 3), max_input_length=st.none() | st.integers(1, 8),
       max_decoding_length=st.integers(0, 12))
def test_fuzz_input_text(tr, texts, beam_size, max_input_length, max_decoding_length):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = tr.translate_batch(texts, beam_size=beam_size, max_input_length=max_input_length,
                                     max_decoding_length=max_decoding_length, return_scores=True)
    assert len(results) == len(texts)
    for r in results:
        assert isinstance(r.hypotheses[0], str) and len(r.token_ids[0]) <= max_decoding_length
        assert all(s == s for s in r.scores)                                 # no NaN
