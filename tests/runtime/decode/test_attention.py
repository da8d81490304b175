"""Cross-attention and word alignments (translate_batch(return_attention=True, return_alignment=True); the
format-2 decoder step's cross_attention output): against the PyTorch model, and the formats users read."""
from __future__ import annotations

import numpy as np
import pytest

from tests import DATA
from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.decode.alignment import format_alignment, hard_alignment, word_index
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.translator import Translator


@pytest.fixture(scope="module")
def translator(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


@pytest.mark.parametrize("opts", [dict(beam_size=1), dict(beam_size=4, num_hypotheses=4),
                                  dict(beam_size=3, num_hypotheses=2, length_penalty=0.0)])
def test_attention_is_the_pytorch_models(translator, tiny_model, opts):
    """Every returned hypothesis's rows, beams reordered and sentences leaving the batch along the way, equal the
    teacher-forced PyTorch forward's last-layer cross-attention over that hypothesis (training/reference.py)."""
    from seq2onnx.training.reference import cross_attention
    texts = [s for s, _ in toy_pairs(12, seed=3)] + ["one", "nine nine nine nine nine nine nine"]
    results = translator.translate_batch(texts, return_attention=True, **opts)
    worst, checked = 0.0, 0
    for text, r in zip(texts, results):
        source = translator.tokenizer.encode(text).ids + [translator.config.eos_id]
        assert len(r.attention) == len(r.hypotheses)
        for ids, rows in zip(r.token_ids, r.attention):
            assert len(rows) == len(ids) and all(len(row) == len(source) for row in rows)   # source + EOS, no padding
            if not ids:                 # an empty hypothesis (EOS first) has no rows: np.array([]) would be (0,)
                continue
            rows = np.array(rows)
            assert np.allclose(rows.sum(axis=1), 1.0, atol=1e-5)
            want = cross_attention(tiny_model, source, ids).numpy()[:len(ids)]
            worst = max(worst, float(np.abs(rows - want).max()))
            checked += 1
    assert checked >= len(texts) and worst < 1e-4


def test_alignment_of_the_toy_task(translator):
    """The toy task reverses the words ("one two three" -> "drei zwei eins"): pairs name words, source first."""
    texts = ["one two three", "", "five six"]
    r = translator.translate_batch(texts, beam_size=2, num_hypotheses=2, return_alignment=True)
    both = translator.translate_batch(texts, beam_size=2, num_hypotheses=2, return_alignment=True,
                                      return_attention=True)
    assert r[0].attention is None and len(r[0].alignment) == 2
    for ids, pairs, rows in zip(r[0].token_ids, r[0].alignment, both[0].attention):
        words = len(translator.detokenize(ids).split())
        assert pairs == sorted(set(pairs)) and all(0 <= s < 3 and 0 <= t < words for s, t in pairs)
        assert {t for _, t in pairs} == set(range(words))                  # every target word is aligned
        pieces = [translator.tokenizer.id_to_token(i) for i in translator.tokenizer.encode(texts[0]).ids]
        assert pairs == hard_alignment(np.array(rows), pieces, [translator.tokenizer.id_to_token(i) for i in ids])
    assert r[1].alignment == [[]] and both[1].attention == [[]]
    assert [x.alignment for x in r] == [x.alignment for x in both]


def test_hard_alignment_groups_pieces_into_words():
    src = ["\u2581three", "\u2581hund", "red", "\u2581one"]                     # 3 words
    tgt = ["\u2581drei", "hundert", "\u2581eins"]                             # 2 words
    attention = np.array([[0.7, 0.1, 0.1, 0.05, 0.05],                       # drei -> three
                          [0.1, 0.2, 0.6, 0.05, 0.05],                       # hundert -> red (word 1)
                          [0.0, 0.0, 0.1, 0.3, 0.6]])                        # eins -> one; EOS column ignored
    assert word_index(src) == [0, 1, 1, 2] and word_index(tgt) == [0, 0, 1]
    assert hard_alignment(attention, src, tgt) == [(0, 0), (1, 0), (2, 1)]
    assert format_alignment(hard_alignment(attention, src, tgt)) == "0-0 1-0 2-1"
    assert hard_alignment(np.zeros((0, 5)), src, []) == []
    with pytest.raises(ValueError, match="does not fit 3 target and 4 source pieces"):
        hard_alignment(attention[:, :4], src, tgt)


def test_attention_costs_nothing_unasked_and_needs_format_2(translator, tmp_path):
    """Without the flags no attention is fetched or kept; a format-1 package (the earlier decoder step) says
    clearly that it has none, before any work."""
    r = translator.translate_batch(["one two"], beam_size=2)[0]
    assert r.attention is None and r.alignment is None
    old = DATA / "numbers-en-de-earlier-contract"
    tr1 = Translator(old, device="cpu", intra_threads=1)
    assert tr1.package.decoder_format == 1 and tr1.translate("four") == "vier"
    for flags in (dict(return_attention=True), dict(return_alignment=True)):
        with pytest.raises(Seq2OnnxError, match=r"has no cross-attention output \(a format_version 1 package\): re-export the model"):
            tr1.translate_batch(["four"], **flags)
    with pytest.raises(ValueError, match="return_attention must be True or False"):
        translator.translate_batch(["one"], return_attention="yes")
