"""runtime/text_input.py: how texts become ids. Awkward text through the API (blank, over max_input_length,
characters the tokenizer never saw, special tokens written as text, lone surrogates, what is not text), each with its
one defined result or a one-line error naming the input, and a batch of every kind equal to its members one by one;
a text of any length tokenized from a bounded prefix. The defined results are listed in docs/CONTRACTS.md ("Runtime
input")."""
from __future__ import annotations

import random
import warnings
from pathlib import Path

import pytest

from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, results_as_hypotheses
from tests.fixtures_training import toy_pairs
from tests.runtime.cli.test_cli_io import edited_copy
from tests.runtime.test_options import caught, hyps, tr  # noqa: F401 - tr: the tiny model's Translator, per module
from seq2onnx.runtime.translator import Translator

LONG_LINE = ("seven " * 1667)[:10_000]                 # 10,000 characters, 1,667 words: over max_positions
SURROGATES = "seven \udcff"                             # what surrogateescape makes of b"seven \xff"
UNKNOWN = ["😀", "三", "\x00", "\x1b", "\x07", "\u200b"]  # emoji, CJK, NUL, ESC, BEL, zero-width space


# --- awkward text through the API ---------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", " ", "   \t  ", "\n", "\u3000\u2028\x85"])
@pytest.mark.parametrize("opts", [dict(beam_size=1), dict(beam_size=4, num_hypotheses=3),
                                  dict(beam_size=1, sampling_topk=0, num_hypotheses=2, seed=1)])
def test_blank_text_is_the_empty_hypothesis(tr, text, opts):
    (r,), messages = caught(tr.translate_batch, [text], return_scores=True, **opts)
    assert (r.hypotheses, r.token_ids, r.scores, r.normalized_scores, r.truncated) == ([""], [[]], [0.0], [0.0], False)
    assert messages == []
    assert tr.translate(text, **opts) == "" and list(tr.generate_tokens(text, beam_size=opts["beam_size"])) == []
    assert tr.translate_batch([text])[0].scores is None


def test_ten_thousand_characters_are_cut_to_max_input_length(tr):
    eos, limit = tr.config.eos_id, tr.config.max_positions
    ids = tr.tokenizer.encode(LONG_LINE).ids
    assert len(LONG_LINE) == 10_000 and len(ids) + 1 > limit
    (r, short), messages = caught(tr.translate_batch, [LONG_LINE, "one two"], beam_size=2)
    # only a prefix of a long text is tokenized (bounded memory): its count of tokens is not known
    assert messages == [f"input 0 has more than {limit} tokens (EOS included); truncated to max_input_length={limit}"]
    assert r.truncated and not short.truncated
    expected = tr.translate_ids([ids[:limit - 1] + [eos]], beam_size=2)[0][0].tokens
    assert r.token_ids == [expected]
    assert short.hypotheses == [tr.translate("one two", beam_size=2)]
    (r,), messages = caught(tr.translate_batch, [LONG_LINE], max_input_length=7)
    assert messages == ["input 0 has more than 7 tokens (EOS included); truncated to max_input_length=7"]
    assert r.token_ids == [tr.translate_ids([ids[:6] + [eos]])[0][0].tokens]


@pytest.mark.parametrize("char", UNKNOWN)
def test_unseen_and_control_characters_become_unk(tr, char):
    """Every character the tokenizer never saw is one <unk> piece, so they all translate alike."""
    text = f"one {char} two"
    ids = tr.tokenizer.encode(text).ids
    assert ids.count(tr.config.unk_id) == 1
    assert ids == tr.tokenizer.encode("one 😀 two").ids
    (r,), messages = caught(tr.translate_batch, [text], beam_size=4, num_hypotheses=2)
    assert messages == [] and r.hypotheses == tr.translate_batch(["one 😀 two"], beam_size=4, num_hypotheses=2)[0].hypotheses
    assert r.token_ids == [h.tokens for h in tr.translate_ids([ids + [tr.config.eos_id]], beam_size=4,
                                                               num_hypotheses=2)[0]]


def test_literal_special_tokens_in_text_are_plain_text(tr):
    """A user's "</s>", "<pad>", "<s>" or "<unk>" is text, never a control token: the source does not end
    early; a target prefix of them cannot force PAD or BOS: its characters are none of this vocabulary's, so
    it is refused in one line (the tokenizer would make <unk> of them, which no translation can show)."""
    cfg = tr.config
    specials = {cfg.pad_id, cfg.bos_id, cfg.eos_id}
    for text in ["one </s> two", "<pad> three", "<s>four</s>", "five <unk>"]:
        ids = tr.tokenizer.encode(text).ids
        assert not specials & set(ids) and ids.count(cfg.unk_id) >= 2, (text, ids)
    for prefix in ["<pad> null", "<s>", "</s> null"]:
        assert cfg.unk_id in tr.tokenizer.encode(prefix).ids and not specials & set(tr.tokenizer.encode(prefix).ids)
        with pytest.raises(ValueError, match=r"^target_prefix\[0\] .* has characters the model's tokenizer does "
                                             r"not know \(they become <unk>\)"):
            tr.translate_batch(["one two"], target_prefix=[prefix])


def test_lone_surrogates_become_replacement_characters(tr):
    bad = "one \udcff two \ud800"                      # what surrogateescape makes of invalid bytes
    (r, ok), messages = caught(tr.translate_batch, ["three", bad], beam_size=1)
    assert messages == ["input 1 is not valid Unicode (lone surrogates); they were replaced with U+FFFD"]
    assert r.hypotheses == [tr.translate("three", beam_size=1)]
    assert ok.hypotheses == [tr.translate("one \ufffd two \ufffd", beam_size=1)]
    pieces, messages = caught(lambda: list(tr.generate_tokens(bad, beam_size=1)))
    assert "".join(pieces) == ok.hypotheses[0] and len(messages) == 1


def test_non_text_inputs_are_type_errors_naming_the_input(tr):
    with pytest.raises(TypeError, match=r"^texts\[2\] must be str, got bytes$"):
        tr.translate_batch(["one", "two", b"three"])
    with pytest.raises(TypeError, match=r"^texts\[0\] must be str, got NoneType$"):
        tr.translate_batch([None])
    with pytest.raises(TypeError, match="got one str: wrap it in a list"):
        tr.translate_batch("one two")
    with pytest.raises(ValueError, match=r"^sources\[1\] holds an id outside the vocabulary \[0, \d+\): 100000$"):
        tr.translate_ids([[5, 2], [100000, 2]])
    with pytest.raises(ValueError, match=r"^sources\[0\] holds an id outside the vocabulary \[0, \d+\): -1$"):
        tr.translate_ids([[-1, 2]])


def mixed_texts(n: int, seed: int):
    """n sources of 1..12 words, with every awkward kind of text among them."""
    texts = [s for s, _ in toy_pairs(n, seed=seed, min_words=1, max_words=12)]
    rng = random.Random(seed)
    awkward = ["", "   ", LONG_LINE, "one \x00 two", "\x1b[31mthree\x1b[0m", "😀 four", "五 six", SURROGATES]
    spots = rng.sample(range(n), len(awkward))
    for spot, text in zip(spots, awkward):
        texts[spot] = text
    return texts, dict(zip(awkward, spots))


def test_batch_of_1000_mixed_lengths_equals_one_by_one(tr):
    texts, spot = mixed_texts(1000, seed=11)
    together, messages = caught(tr.translate_batch, texts, beam_size=1, max_batch_size=64, return_scores=True)
    assert len(together) == 1000
    assert sorted(messages) == sorted([
        f"input {spot[LONG_LINE]} has more than 512 tokens (EOS included); truncated to max_input_length=512",
        f"input {spot[SURROGATES]} is not valid Unicode (lone surrogates); they were replaced with U+FFFD"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = [tr.translate_batch([t], beam_size=1, return_scores=True)[0] for t in texts]
    # batches of other shapes run other kernel paths: the same decodes up to float32 rounding (agreement.py's bound
    # from the package's weights; where the tokens part, a tie judged by the engine teacher-forced)
    assert_same_decodes(Float32Bounds.of_graph(Path(tr.package.root) / "decoder_step.onnx"), engine_judge(tr.engine, tr.config),
                        [tr.source_ids(t) for t in texts], results_as_hypotheses(together),
                        results_as_hypotheses(alone), greedy=True, eos_id=tr.config.eos_id, what="batch against alone")
    assert together[spot[""]].hypotheses == together[spot["   "]].hypotheses == [""]
    assert together[spot[""]].token_ids == [[]]                           # blank: no decoding at all
    assert together[spot[LONG_LINE]].truncated and sum(r.truncated for r in together) == 1
    for r in together:                                                    # each text is its own ids, detokenized
        assert r.hypotheses == [tr.detokenize(ids) for ids in r.token_ids]


# --- a text of any length: tokenized from a prefix -----------------------------------------------------
@pytest.mark.parametrize("limit", [1, 7, 100, 512])
def test_a_long_text_tokenized_from_a_prefix_is_the_whole_text_cut(tr, limit):
    """The ids of a text far over max_input_length are those of the whole text tokenized and cut."""
    eos = tr.config.eos_id
    texts = [" ".join(toy_pairs(1, seed=limit, min_words=40_000, max_words=40_000)[0][0].split()),
             "  ".join(["seven, one.  two;three"] * 5000) + " nine\t\tfour"]
    for text in texts:
        whole = tr.tokenizer.encode(text).ids + [eos]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            (r,) = tr.translate_batch([text], max_input_length=limit, beam_size=2)
        assert r.truncated and [str(w.message) for w in caught] == [
            f"input 0 has more than {limit} tokens (EOS included); truncated to max_input_length={limit}"]
        assert r.token_ids == [tr.translate_ids([whole[:limit - 1] + [eos]], beam_size=2)[0][0].tokens]


def test_a_text_longer_than_its_character_bound_is_cut_there(tiny_package, tmp_path):
    """With a tokenizer for which whitespace is no token, past max_input_length x 64 characters of
    nothing but spaces, the rest is not read."""
    def whitespace_split(tok):
        tok["pre_tokenizer"] = {"type": "WhitespaceSplit"}
        return tok
    tr = Translator(edited_copy(tiny_package, tmp_path, tokenizer=whitespace_split), device="cpu", intra_threads=1)
    text = "seven" + " " * 1000 + "one"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (r,) = tr.translate_batch([text], max_input_length=5)
    assert [str(w.message) for w in caught] == [
        "input 0 is longer than 320 characters (max_input_length=5 x 64); the rest was not translated"]
    assert r.truncated and r.token_ids == tr.translate_batch(["seven"])[0].token_ids
