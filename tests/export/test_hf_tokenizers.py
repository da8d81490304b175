"""export/hf_tokenizers.py against transformers: for each tiny HF folder (tests/hf_folders.py), the
converted tokenizers give exactly the ids of transformers' MarianTokenizer / M2M100Tokenizer / NllbTokenizer on
TEXTS strings (gettext lines in English, German and French, and generated ones: case, digits, punctuation, odd
whitespace, emoji, characters the SentencePiece models do not know, characters NFKC changes), and the same text
when decoding those ids and random id sequences (skip_special_tokens=True).

The converted files are read as the runtime reads a package's tokenizer (runtime/package/tokenizer.py: the
ALLOWED_REGEXES check, specials_as_text, PackageTokenizer; no post-processor; ids exactly 0..n-1, as many as
the model's vocabulary). A literal special token or a Marian tag in a text is text for the runtime and a special
token for transformers, so texts holding one are compared with the tag accounted for (Marian's target tag) or
not at all (the generator makes none).
"""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import pytest

from tests.hf_folders import (MARIAN_TAGS, MAX_EXPLAINED, RANDOM_SEED, explained, hf_folders,  # noqa: F401 - a fixture
                        random_ids, tokenizer_texts as texts)
from seq2onnx.export import hf_tokenizers
from seq2onnx.runtime.package.tokenizer import PackageTokenizer, foreign_regex, specials_as_text

# --- loading as the runtime does ---------------------------------------------------------------------------------
def runtime_tokenizer(text: str, vocab_size: int) -> PackageTokenizer:
    """A converted tokenizer file read as runtime/package/manifest.py reads a package's (its guards: package/tokenizer.py)."""
    from tokenizers import Tokenizer

    assert foreign_regex(json.loads(text)) is None
    tokenizer = PackageTokenizer(specials_as_text(Tokenizer.from_str(text)), Path("converted.json"))
    assert tokenizer.post_processor is None
    assert tokenizer.get_vocab_size(with_added_tokens=True) == vocab_size
    assert sorted(tokenizer.get_vocab(with_added_tokens=True).values()) == list(range(vocab_size))
    return tokenizer


def converted(folder: Path) -> hf_tokenizers.ConvertedTokenizers:
    return hf_tokenizers.convert(folder, json.loads((folder / "config.json").read_text()))


# --- the comparisons ---------------------------------------------------------------------------------------------
def compare_encode(ours: PackageTokenizer, hf_ids: List[List[int]], strings: Sequence[str], sp=None) -> None:
    """Our ids equal transformers' on every string, but where `explained` (sp: the SentencePiece model transformers
    segments with; None: no exception) names why, and those are at most MAX_EXPLAINED of them."""
    import sentencepiece

    mine = [e.ids for e in ours.encode_batch(list(strings))]
    spm = None if sp is None else sentencepiece.SentencePieceProcessor(model_file=str(sp))
    reasons: Dict[str, int] = {}
    unexplained = []
    for text, a, b in zip(strings, mine, hf_ids):
        if a != b:
            why = None if spm is None else explained(text, a, b, spm, ours.normalizer)
            if why is None:
                unexplained.append(f"{text!r}: ours {a}, transformers {b}")
            reasons[why] = reasons.get(why, 0) + 1
    assert not unexplained, f"{len(unexplained)} of {len(strings)} differ; first: {unexplained[0]}"
    assert sum(reasons.values()) <= MAX_EXPLAINED * len(strings), reasons


def compare_decode(ours: PackageTokenizer, hf_decode, sequences: Sequence[List[int]]) -> None:
    mine = ours.decode_batch([list(s) for s in sequences])
    theirs = [hf_decode(s) for s in sequences]
    bad = [i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b]
    assert not bad, f"{len(bad)} of {len(sequences)} differ; first: {sequences[bad[0]]}: ours {mine[bad[0]]!r}, " \
                    f"transformers {theirs[bad[0]]!r}"


@pytest.mark.parametrize("kind", ["marian", "marian_separate", "marian_multilingual"])
def test_marian(hf_folders, kind):  # noqa: F811 - the fixture
    from transformers import MarianTokenizer

    folder = hf_folders.tokenizer_folder(kind)
    hf = MarianTokenizer.from_pretrained(str(folder))
    conv = converted(folder)
    config = json.loads((folder / "config.json").read_text())
    source = runtime_tokenizer(conv.files["source_tokenizer.json"], config["vocab_size"])
    target = runtime_tokenizer(conv.files["target_tokenizer.json"], config.get("decoder_vocab_size")
                               or config["vocab_size"])
    strings = texts()
    compare_encode(source, [hf(t, add_special_tokens=False).input_ids for t in strings], strings, folder / "source.spm")
    target_ids = [hf(text_target=t, add_special_tokens=False).input_ids for t in strings]
    compare_encode(target, target_ids, strings, folder / "target.spm")
    decode = lambda ids: hf.decode(ids, skip_special_tokens=True)  # noqa: E731
    compare_decode(target, decode, target_ids + random_ids(random.Random(RANDOM_SEED), target.get_vocab_size()))
    if kind == "marian_multilingual":       # transformers splits the tag off the text; the runtime prepends its id
        assert conv.languages.target_token == "source_prefix" and set(conv.languages.target) == set(MARIAN_TAGS)
        for code, tag in MARIAN_TAGS.items():
            tag_id = conv.language_id(code, "source")
            assert tag_id == hf.convert_tokens_to_ids(tag)
            tagged = [hf(f"{tag} {t}", add_special_tokens=False).input_ids for t in strings[:500]]
            assert all(ids[0] == tag_id for ids in tagged)
            compare_encode(source, [ids[1:] for ids in tagged], strings[:500], folder / "source.spm")


def test_m2m100(hf_folders):  # noqa: F811 - the fixture
    from transformers import M2M100Tokenizer

    folder = hf_folders.tokenizer_folder("m2m100")
    hf = M2M100Tokenizer.from_pretrained(str(folder))
    conv = converted(folder)
    config = json.loads((folder / "config.json").read_text())
    ours = runtime_tokenizer(conv.files["tokenizer.json"], config["vocab_size"])
    strings = texts()
    hf_ids = [hf(t, add_special_tokens=False).input_ids for t in strings]
    compare_encode(ours, hf_ids, strings, folder / "sentencepiece.bpe.model")
    decode = lambda ids: hf.decode(ids, skip_special_tokens=True)  # noqa: E731
    compare_decode(ours, decode, hf_ids + random_ids(random.Random(RANDOM_SEED), len(hf)))
    langs = conv.languages
    assert (langs.default_source, langs.default_target) == ("en", "de")
    assert {c: conv.language_id(c, "source") for c in langs.source} == dict(hf.lang_code_to_id)
    prefix, forced = conv.default_language_ids()
    assert hf("Hello", add_special_tokens=True).input_ids == prefix + ours.encode("Hello").ids + [hf.eos_token_id]
    assert forced == hf.get_lang_id("de")


def test_nllb(hf_folders):  # noqa: F811 - the fixture
    from transformers import NllbTokenizer

    folder = hf_folders.tokenizer_folder("nllb")
    hf = NllbTokenizer.from_pretrained(str(folder))
    conv = converted(folder)
    config = json.loads((folder / "config.json").read_text())
    ours = runtime_tokenizer(conv.files["tokenizer.json"], config["vocab_size"])
    strings = texts()
    hf_ids = [hf(t, add_special_tokens=False).input_ids for t in strings]
    compare_encode(ours, hf_ids, strings)
    decode = lambda ids: hf.decode(ids, skip_special_tokens=True)  # noqa: E731
    compare_decode(ours, decode, hf_ids + random_ids(random.Random(RANDOM_SEED), len(hf)))
    prefix, forced = conv.default_language_ids()
    assert hf("Hello", add_special_tokens=True).input_ids == prefix + ours.encode("Hello").ids + [hf.eos_token_id]
    assert conv.language_id("deu_Latn", "target") == hf.convert_tokens_to_ids("deu_Latn")
