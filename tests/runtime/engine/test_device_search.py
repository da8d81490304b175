"""The search head (gather_graph.search_head_model_bytes, IoBindingEngine.step_search, decoding.head_plan): a step's
filters and search in a graph chained after the decoder step, so that on CUDA nothing of size V leaves the device.

On the CPU provider, the engine with search_on_device against the same engine with the search in numpy (the log-probs
[R, V] read back, filtered and searched there): the same step graph and kernels, so the two differ only in the
search. Without renormalize the head's arithmetic is numpy's (float32 adds, a mask, TopK / ArgMax with ties to the
lower id): the same tokens and the same float32 scores, bit for bit, for greedy, beam, n-best, length penalties,
min/max length, forced BOS/EOS, suppressed ids and transformers' beam rules, at batch sizes 1..64. Renormalize's
exp and sum run in onnxruntime's kernels, whose float32 rounding is not numpy's: there the tokens are the same and
the scores agree to float32 rounding."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.decode.decoding import decode, head_plan
from seq2onnx.runtime.engine.cuda import IoBindingEngine
from seq2onnx.runtime.engine.gather_graph import search_head_model_bytes
from seq2onnx.runtime.decode.logit_filters import (ForcePrefix, ForceToken, NoRepeatNGram, RepetitionPenalty,
                                            SuppressEOSBeforeMin, SuppressTokens, renormalize)
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.decode.search import BeamSearch, RowSearch, Sampler
from seq2onnx.runtime.engine.session import SessionConfig, open_session


@pytest.fixture(scope="module")
def package(tiny_package):
    return read_package(tiny_package)


@pytest.fixture(scope="module")
def engines(package):
    """(the search in numpy, the search head): one decoder step graph through IO binding on the CPU provider."""
    sc = SessionConfig("cpu", intra_threads=1)
    v = package.variants["fp32"]

    def engine(on_device: bool) -> IoBindingEngine:
        built = IoBindingEngine(open_session(v.encoder, "encoder", package.config, sc),
                                open_session(v.decoder_step, "decoder_step", package.config, sc), package.config,
                                device="cpu", search_on_device=on_device)
        built.picks_top_k = on_device          # the numpy side reads every log-prob back (not step_top_k's TopK)
        return built
    return engine(False), engine(True)


@pytest.fixture(scope="module")
def sources(package):
    eos = package.config.eos_id
    return [package.tokenizer.encode(s).ids + [eos] for s, _ in toy_pairs(64, seed=5, min_words=1, max_words=9)]


def outcome(results):
    return [[(h.tokens, h.score, h.normalized_score, h.finished) for h in hyps] for hyps in results]


CASES = {
    "greedy": dict(beam_size=1),
    "beam4": dict(beam_size=4),
    "beam4-nbest2-lp0.6": dict(beam_size=4, num_hypotheses=2, length_penalty=0.6),
    "beam3-lp2-min-max": dict(beam_size=3, length_penalty=2.0, min_decoding_length=4, max_decoding_length=9),
    "greedy-min-max": dict(beam_size=1, min_decoding_length=5, max_decoding_length=7),
    "beam4-forced-bos-eos": dict(beam_size=4, forced_bos_id=7, forced_eos=True, max_length_a=1.0, max_length_b=2),
    "greedy-forced-bos-eos": dict(beam_size=1, forced_bos_id=7, forced_eos=True, max_decoding_length=6),
    "beam4-suppress": dict(beam_size=4, suppress_ids=[0, 1, 5, 9, 12]),
    "beam4-transformers": dict(beam_size=4, num_hypotheses=2, beam_rules="transformers", early_stopping=True,
                               min_decoding_length=2),
    "beam2-transformers-never": dict(beam_size=2, beam_rules="transformers", early_stopping="never",
                                     forced_eos=True, max_decoding_length=8),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("batch", [1, 5, 64])
def test_search_head_equals_the_numpy_search(engines, package, sources, case, batch):
    numpy_engine, head_engine = engines
    options = DecodingOptions(**CASES[case])
    got = decode(head_engine, package.config, sources[:batch], options)
    expected = decode(numpy_engine, package.config, sources[:batch], options)
    assert outcome(got) == outcome(expected)
    assert any(key[0] == "search_head_model_bytes" for key in head_engine._graphs)     # the head ran


@pytest.mark.parametrize("beam", [1, 4])
def test_search_head_renormalizes_as_numpy_to_float32_rounding(engines, package, sources, beam):
    numpy_engine, head_engine = engines
    options = DecodingOptions(beam_size=beam, num_hypotheses=min(beam, 2), renormalize=True, forced_eos=True,
                              min_decoding_length=2, suppress_ids=[0, 1, 6])
    got = decode(head_engine, package.config, sources[:24], options)
    expected = decode(numpy_engine, package.config, sources[:24], options)
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in expected]
    for g, e in zip(got, expected):
        assert [h.score for h in g] == pytest.approx([h.score for h in e], rel=1e-5, abs=1e-5)


def test_row_specific_filters_and_sampling_stay_on_the_host(engines, package, sources):
    """Repetition penalty, no-repeat n-grams, a target prefix, sampling and constraints need the log-probs on the
    host: head_plan says so, and the engine with search_on_device decodes them as the numpy one."""
    numpy_engine, head_engine = engines
    config = package.config
    host_only = [dict(beam_size=4, repetition_penalty=1.3), dict(beam_size=1, no_repeat_ngram_size=2),
                 dict(beam_size=1, sampling_topk=5, seed=3, num_hypotheses=2)]
    for kwargs in host_only:
        options = DecodingOptions(**kwargs)
        got = decode(head_engine, config, sources[:6], options)
        assert outcome(got) == outcome(decode(numpy_engine, config, sources[:6], options))
    limits = np.full(2, 9)
    beam, greedy = BeamSearch(2, 2, limits, config.eos_id, 1.0), RowSearch(2, 1, limits, config.eos_id, 1.0)
    force = ForceToken(7, np.zeros(2, dtype=np.int64))
    assert head_plan(beam, [SuppressTokens([0]), SuppressEOSBeforeMin(2, 3), force, renormalize]) is not None
    assert head_plan(greedy, [SuppressTokens([0]), force]) is not None
    for filters in ([RepetitionPenalty(1.2)], [NoRepeatNGram(2)], [ForcePrefix([[4], [5]])],
                    [renormalize, SuppressTokens([0])], [force, SuppressTokens([0])]):   # row-specific, or out of order
        assert head_plan(beam, filters) is None
    sampler = Sampler(DecodingOptions(beam_size=1, sampling_topk=2, seed=0), [[3], [4]], 1)
    assert head_plan(RowSearch(2, 1, limits, config.eos_id, 1.0, sampler), []) is None


@pytest.mark.parametrize("beam,forcing,renormalizing", [(False, True, True), (True, True, False), (True, False, True)])
def test_search_head_graph_on_hard_rows(beam, forcing, renormalizing):
    """The graph alone on log-probs with ties, -inf rows and columns, a forced row and a row forced to a masked id:
    greedy's ArgMax takes the lowest id of the best, beam's TopK the lowest flat id among equal candidates, a row
    all -inf stays -inf, the check column is log_probs[:, check_id]."""
    rng = np.random.default_rng(4)
    rows, vocab, k = 6, 11, 3
    lp = rng.integers(-4, 0, size=(rows, vocab)).astype(np.float32)         # ties
    lp[2] = -np.inf
    bias = np.zeros((1, vocab), dtype=np.float32)
    bias[0, [0, 4]] = -np.inf
    forced = np.array([[-1], [5], [-1], [-1], [4], [-1]], dtype=np.int64)
    cum = np.array([[0.0], [-1.0], [-np.inf], [-0.5], [-0.5], [-2.0]], dtype=np.float32)
    feeds = {"log_probs": lp, "bias": bias, "check_id": np.array([3], dtype=np.int64)}
    scores = lp + bias
    if forcing:
        feeds["forced"] = forced
        for r, t in enumerate(forced[:, 0]):
            if t >= 0:
                scores[r] = -np.inf
                scores[r, t] = 0.0
    if renormalizing:
        finite = np.isfinite(scores.max(axis=1))
        shifted = scores[finite] - scores[finite].max(axis=1, keepdims=True)
        scores[finite] = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    if beam:
        feeds.update(cum=cum, shape=np.array([rows // 2, 2 * vocab], dtype=np.int64), k=np.array([k], dtype=np.int64))
    session = ort.InferenceSession(search_head_model_bytes(beam, forcing, renormalizing),
                                   providers=["CPUExecutionProvider"])
    out = session.run(None, feeds)
    assert np.array_equal(out[-1], lp[:, 3:4])
    if beam:
        cand = (scores + cum).reshape(rows // 2, 2 * vocab)
        order = np.argsort(-cand, axis=1, kind="stable")[:, :k]
        assert np.array_equal(out[1], order)
        np.testing.assert_allclose(out[0], np.take_along_axis(cand, order, axis=1), rtol=1e-6)
    else:
        assert np.array_equal(out[0], scores.argmax(axis=1))
        np.testing.assert_allclose(out[1], scores.max(axis=1), rtol=1e-6)
