"""beam_rules="transformers" and the generation filters against transformers' generate() itself.

The runtime's one decoding loop (decoding.decode: its searches and filters) drives tiny random MarianMTModel and
M2M100ForConditionalGeneration models through hf_engine.HFEngine, so both sides compute the same float32 log-probs:
what differs is the search. On random sources, greedy and beam 4 (early_stopping False / True / "never", length
penalties 0.6, 1.0, 2.0, n-best 2, min_length, forced EOS, bad_words_ids for PAD, forced BOS, renormalize) must give
generate()'s tokens, and its sequences_scores within 1e-5, up to ties (agreement.py): two candidates within float32
rounding of each other may rank either way. The same cases under the default rules ("seq2onnx") part from
transformers on some sentences: the last test shows that these cases tell the rules apart.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, List

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.agreement import Float32Bounds, assert_same_decodes                      # noqa: E402
from tests.hf_engine import HFEngine, tiny_m2m100, tiny_marian                       # noqa: E402
from seq2onnx.runtime.decode.decoding import decode, pad_sources, step_limits         # noqa: E402
from seq2onnx.runtime.decode.logit_filters import build_filters                       # noqa: E402
from seq2onnx.runtime.options import DecodingOptions                           # noqa: E402
from seq2onnx.runtime.decode.search import Hypothesis                                 # noqa: E402

N_SOURCES = 200
MAX_LENGTH = 20                                    # transformers' max_length: the decoder start + 19 generated
LANG = 7                                           # M2M100's forced BOS (a target language token)
SCORE_TOL = 1e-5


@lru_cache(maxsize=None)
def built(name: str):
    model, config = {"marian": tiny_marian, "m2m100": tiny_m2m100}[name]()
    torch.set_num_threads(1)
    rng = np.random.default_rng(1)
    sources = [[int(x) for x in rng.integers(4, 290, rng.integers(1, 10))] + [config.eos_id]
               for _ in range(N_SOURCES)]
    return model, config, sources


# name -> (model, generate()'s keyword arguments); every case states its search (HF's defaults never apply)
CASES: Dict[str, tuple] = {
    "greedy": ("marian", dict(num_beams=1, bad_words_ids="pad")),
    "greedy-forced": ("m2m100", dict(num_beams=1, forced_bos_token_id=LANG, forced_eos_token_id=True, min_length=4)),
    "beam-lp1": ("marian", dict(num_beams=4, length_penalty=1.0, early_stopping=False, bad_words_ids="pad")),
    "beam-lp0.6-nbest2": ("marian", dict(num_beams=4, length_penalty=0.6, early_stopping=False,
                                         num_return_sequences=2, bad_words_ids="pad", forced_eos_token_id=True)),
    "beam-lp2-never": ("marian", dict(num_beams=4, length_penalty=2.0, early_stopping="never", bad_words_ids="pad")),
    "beam-true-min": ("marian", dict(num_beams=4, length_penalty=1.0, early_stopping=True, min_length=5,
                                     forced_eos_token_id=True, bad_words_ids="pad")),
    "beam-m2m-forced": ("m2m100", dict(num_beams=4, length_penalty=1.0, early_stopping=True, num_return_sequences=2,
                                       forced_bos_token_id=LANG, forced_eos_token_id=True, bad_words_ids="pad")),
    "beam-m2m-lp2": ("m2m100", dict(num_beams=4, length_penalty=2.0, early_stopping=False,
                                    forced_bos_token_id=LANG)),
    "beam-m2m-renormalize": ("m2m100", dict(num_beams=4, length_penalty=0.6, early_stopping=False, min_length=3,
                                            bad_words_ids="pad", renormalize_logits=True)),
}


def hf_kwargs(config, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The case as generate() takes it: max_length, ids filled in."""
    kw = dict(kwargs, max_length=MAX_LENGTH, do_sample=False)
    if kw.get("bad_words_ids") == "pad":
        kw["bad_words_ids"] = [[config.pad_id]]
    if kw.get("forced_eos_token_id"):
        kw["forced_eos_token_id"] = config.eos_id
    return kw


def our_options(config, kwargs: Dict[str, Any], rules: str) -> DecodingOptions:
    """The same case as DecodingOptions (the contract's mapping: our lengths count generated tokens)."""
    beams = kwargs["num_beams"]
    return DecodingOptions(
        beam_size=beams, num_hypotheses=kwargs.get("num_return_sequences", 1),
        length_penalty=kwargs.get("length_penalty", 1.0), max_decoding_length=MAX_LENGTH - 1,
        min_decoding_length=max(0, kwargs.get("min_length", 0) - 1), max_length_a=0, max_length_b=None,
        beam_rules=rules, early_stopping=kwargs.get("early_stopping", False) if rules == "transformers" else False,
        suppress_ids=[config.pad_id] if kwargs.get("bad_words_ids") else [],
        forced_bos_id=kwargs.get("forced_bos_token_id"), forced_eos=bool(kwargs.get("forced_eos_token_id")),
        renormalize=kwargs.get("renormalize_logits", False))


def judge_for(model, config, options: DecodingOptions):
    """Teacher-forced log-probs of a hypothesis through the same engine and filters (forced tokens: 0): the judge
    of ties for assert_same_decodes."""
    engine = HFEngine(model)

    def judge(source, tokens, finished):
        out = list(tokens) + ([config.eos_id] if finished else [])
        limits = step_limits([source], options, config)
        filters = build_filters(options, config, None, limits)
        ids, mask = pad_sources([source], config.pad_id)
        encoder_mask, cross = engine.encode(ids, mask)
        past, last, got = None, np.array([[config.start_id]]), []
        for t, token in enumerate(out):
            log_probs, past = engine.step(last, encoder_mask, past, cross)
            for f in filters:
                f(log_probs, np.array([out[:t]], dtype=np.int64), np.zeros(1, dtype=np.int64), t)
            got.append(float(log_probs[0, token]))
            last = np.array([[token]])
        return got
    return judge


def bounds_of(model) -> Float32Bounds:
    decoder = model.get_decoder()
    norm = decoder.layer_norm if getattr(decoder, "layer_norm", None) is not None else \
        decoder.layers[-1].final_layer_norm
    return Float32Bounds.of_weights(model.get_output_embeddings().weight.detach().numpy().T,
                                    norm.weight.detach().numpy(), norm.bias.detach().numpy())


@lru_cache(maxsize=None)
def generated(case: str) -> List[List[Hypothesis]]:
    """generate()'s answer per source: its sequences (after the decoder start, up to EOS) and sequences_scores."""
    name, kwargs = CASES[case]
    model, config, sources = built(name)
    kw = hf_kwargs(config, kwargs)
    ids, mask = pad_sources(sources, config.pad_id)
    with torch.no_grad():
        out = model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                             output_scores=True, output_logits=True, return_dict_in_generate=True, **kw)
    n, lp = kw.get("num_return_sequences", 1), kw.get("length_penalty", 1.0)
    result = []
    for i, src in enumerate(sources):
        hyps = []
        for j in range(n):
            seq = out.sequences[i * n + j, 1:].tolist()
            finished = config.eos_id in seq
            tokens = seq[:seq.index(config.eos_id)] if finished else seq
            steps = len(tokens) + finished
            if kw["num_beams"] > 1:
                normalized = float(out.sequences_scores[i * n + j])
                hyps.append(Hypothesis(tokens, normalized * steps ** lp, normalized, finished))
            else:                                  # greedy: no sequences_scores; its own logits' log-probs
                total = sum(0.0 if torch.isfinite(out.scores[t][i]).sum() == 1       # a forced token
                            else float(torch.log_softmax(out.logits[t][i], -1)[tok])
                            for t, tok in enumerate(tokens + [config.eos_id] * finished))
                hyps.append(Hypothesis(tokens, total, total / steps ** lp, finished))
        result.append(hyps)
    return result


def kwargs_of(case: str) -> Dict[str, Any]:
    return CASES[case][1]


def ours(case: str, rules: str) -> List[List[Hypothesis]]:
    name, kwargs = CASES[case]
    model, config, sources = built(name)
    return decode(HFEngine(model), config, sources, our_options(config, kwargs, rules))


def mismatches(case: str, got: List[List[Hypothesis]]) -> List[int]:
    """The sources whose hypotheses are not generate()'s, up to ties (agreement.assert_same_decodes)."""
    name, kwargs = CASES[case]
    model, config, sources = built(name)
    options = our_options(config, kwargs, "transformers")
    judge, bounds, expected = judge_for(model, config, options), bounds_of(model), generated(case)
    bad = []
    for i in range(len(sources)):
        try:
            assert_same_decodes(bounds, judge, sources[i:i + 1], got[i:i + 1], expected[i:i + 1],
                                greedy=options.beam_size == 1, eos_id=config.eos_id,
                                length_penalty=options.length_penalty)
        except AssertionError:
            bad.append(i)
    return bad


@pytest.mark.parametrize("case", list(CASES))
def test_transformers_rules_equal_generate(case):
    got, expected = ours(case, "transformers"), generated(case)
    assert mismatches(case, got) == [], case
    # where the tokens agree (all but ties), generate()'s sequences_scores to 1e-5 (ours float32 as its own)
    same = [(g, e) for gs, es in zip(got, expected) for g, e in zip(gs, es) if g.tokens == e.tokens]
    assert len(same) >= 0.95 * sum(map(len, expected)), case
    worst = max(abs(g.normalized_score - e.normalized_score) for g, e in same)
    assert worst <= SCORE_TOL, f"{case}: sequences_scores differ by {worst:.3g}"
    # the cases reach what they test: hypotheses of varied lengths, some cut by the limit (or by a forced EOS)
    lengths = {len(h.tokens) for hs in expected for h in hs}
    assert len(lengths) >= (5 if kwargs_of(case).get("length_penalty", 1.0) < 2 else 2), lengths
    assert any(len(h.tokens) + h.finished == MAX_LENGTH - 1 for hs in expected for h in hs), case


def test_forced_tokens_count_and_score_zero():
    """A forced BOS is the first generated token with log-prob 0 (it counts in the length); a forced EOS ends every
    hypothesis at the limit with log-prob 0; min_length keeps EOS away before it."""
    model, config, sources = built("m2m100")
    options = our_options(config, CASES["beam-m2m-forced"][1], "transformers")
    judge = judge_for(model, config, options)
    for src, hyps in zip(sources[:40], ours("beam-m2m-forced", "transformers")[:40]):
        for h in hyps:
            assert h.tokens[0] == LANG and h.finished
            log_probs = judge(src, h.tokens, True)
            assert log_probs[0] == 0.0
            if len(h.tokens) + 1 == MAX_LENGTH - 1:                   # ended by the forced EOS
                assert log_probs[-1] == 0.0
    for hyps in ours("beam-true-min", "transformers"):
        assert all(len(h.tokens) >= 4 for h in hyps)                 # min_length 5 = 4 tokens before EOS


def test_the_cases_tell_the_rules_apart():
    """The default rules ("seq2onnx": another stopping rule and another finished set) part from generate() on some
    sentences of these cases, so the equality above is the transformers rules' doing."""
    def parted(case):            # another best hypothesis, by far more than a tie (1e-3 in normalized score)
        return sum(g[0].tokens != e[0].tokens and abs(g[0].normalized_score - e[0].normalized_score) > 1e-3
                   for g, e in zip(ours(case, "seq2onnx"), generated(case)))
    counts = {case: parted(case) for case in ("beam-lp1", "beam-lp2-never")}
    print("sentences that differ under beam_rules='seq2onnx':", counts)
    assert sum(counts.values()) >= 5, counts


def test_option_checks():
    with pytest.raises(ValueError, match="beam_rules must be one of 'seq2onnx', 'transformers', got 'hf'"):
        DecodingOptions(beam_rules="hf")
    with pytest.raises(ValueError, match="early_stopping must be True, False or 'never', got 'always'"):
        DecodingOptions(beam_rules="transformers", early_stopping="always")
    with pytest.raises(ValueError, match="early_stopping applies to beam_rules='transformers' only"):
        DecodingOptions(early_stopping=True)
    with pytest.raises(ValueError, match=r"suppress_ids must hold ids \(int >= 0\), got -1"):
        DecodingOptions(suppress_ids=[1, -1])
    with pytest.raises(ValueError, match="forced_bos_id must be an integer >= 0"):
        DecodingOptions(forced_bos_id=-2)
    model, config, sources = built("marian")
    with pytest.raises(ValueError, match=r"suppress_ids holds an id outside the vocabulary \[0, 300\): 300"):
        decode(HFEngine(model), config, sources[:1], DecodingOptions(suppress_ids=[300]))
    assert DecodingOptions(suppress_ids=[3, 4]).suppress_ids == (3, 4)
