"""runtime/options.py: every decoding option and Translator argument at and beyond its bounds, through the Python
API (the command line's: cli/test_commands.py); target prefixes and phrases the vocabulary cannot spell; ids and texts
of the wrong type or outside the vocabulary. Each case has one defined result (a translation, the empty output) or a
one-line error naming the argument and what it expects. The defined results are listed in docs/CONTRACTS.md
("Runtime input") and in `seq2onnx translate --help`."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, results_as_hypotheses
from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.options import MAX_BEAM_SIZE, OptionError
from seq2onnx.runtime.translator import MAX_THREADS, Translator

SOURCES = [s for s, _ in toy_pairs(5, seed=14)]


@pytest.fixture(scope="module")
def tr(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


def hyps(results):
    return [(r.hypotheses, r.token_ids) for r in results]


def caught(fn, *args, **kwargs):
    """-> (result, warning messages) of fn(*args, **kwargs)."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        result = fn(*args, **kwargs)
    return result, [str(x.message) for x in w]


# --- max_decoding_length 0 and 1 -------------------------------------------------------------------
@pytest.mark.parametrize("opts", [dict(beam_size=1), dict(beam_size=4, num_hypotheses=4),
                                  dict(beam_size=1, sampling_topk=0, num_hypotheses=3, seed=2)])
def test_max_decoding_length_0_is_the_empty_output(tr, opts):
    texts = [s for s, _ in toy_pairs(5, seed=3)]
    for r in tr.translate_batch(texts, max_decoding_length=0, return_scores=True, **opts):
        assert (r.hypotheses, r.token_ids, r.scores, r.normalized_scores) == ([""], [[]], [0.0], [0.0])


def test_max_decoding_length_1_is_the_first_token(tr):
    texts = [s for s, _ in toy_pairs(8, seed=3)] + ["😀"]
    full = tr.translate_batch(texts, beam_size=1)
    one = tr.translate_batch(texts, beam_size=1, max_decoding_length=1, return_scores=True)
    beam = tr.translate_batch(texts, beam_size=4, max_decoding_length=1, return_scores=True)
    for f, o in zip(full, one):
        # the same first step (the same batch, shapes and thread count: the same arithmetic), so exact
        assert o.token_ids == [f.token_ids[0][:1]]                 # the greedy path's first token, or EOS
        assert len(o.token_ids[0]) + o.finished[0] == 1            # one step: a token (unfinished) or EOS
    # beam 4 runs its first step on other shapes: the same one token up to float32 rounding (agreement.py)
    assert_same_decodes(Float32Bounds.of_graph(Path(tr.package.root) / "decoder_step.onnx"), engine_judge(tr.engine, tr.config),
                        [tr.source_ids(t) for t in texts], results_as_hypotheses(beam), results_as_hypotheses(one),
                        greedy=True, eos_id=tr.config.eos_id, what="beam 4 against greedy, one step")


@pytest.mark.parametrize("opts", [dict(beam_size=1), dict(beam_size=3, num_hypotheses=2),
                                  dict(beam_size=1, sampling_topk=0, seed=5)])
def test_a_row_whose_filters_forbid_every_token_ends_there(tr, opts):
    # no_repeat_ngram_size=1 uses up each token once, and EOS stays forbidden far past the vocabulary:
    # once every token is used, nothing may follow and the hypothesis ends there, unfinished
    usable = tr.config.vocab_size - 3                                   # all but PAD, BOS and EOS
    results, messages = caught(tr.translate_batch, ["three one four", "eight"], no_repeat_ngram_size=1,
                               min_decoding_length=usable + 50, max_decoding_length=usable + 60,
                               max_length_a=0.0, max_length_b=None, return_scores=True, **opts)
    assert messages == []
    for r in results:
        assert len(r.token_ids) == opts.get("num_hypotheses", 1)
        for ids, score in zip(r.token_ids, r.scores):
            assert len(ids) == usable and len(set(ids)) == usable          # every usable token, once
            assert score > float("-inf") and score == score                  # finite, not nan
    prefixed = tr.translate_batch(["eight"], target_prefix=["eight eight"], no_repeat_ngram_size=1,
                                  beam_size=1, return_scores=True)[0]
    assert prefixed.scores[0] > float("-inf") and tr.config.pad_id not in prefixed.token_ids[0]


# --- every option at and beyond its bounds --------------------------------------------------------------
TEXTS = ["three one four", "one five nine two six", "eight"]


def at_bound_cases():
    """(options, check(translator, results)) with each option at a bound."""
    def greedy(tr):
        return tr.translate_batch(TEXTS, beam_size=1)

    def same_as(**ref):
        return lambda tr, rs: hyps(rs) == hyps(tr.translate_batch(TEXTS, **ref))

    def sorted_nbest(n):
        return lambda tr, rs: all(len(r.hypotheses) == n and len(set(map(tuple, r.token_ids))) == n
                                  and r.normalized_scores == sorted(r.normalized_scores, reverse=True) for r in rs)

    def normalized(lp):
        return lambda tr, rs: all(ns == pytest.approx(s / (len(t) + 1) ** lp) for r in rs
                                  for t, s, ns in zip(r.token_ids, r.scores, r.normalized_scores))

    return [
        (dict(beam_size=1), lambda tr, rs: hyps(rs) == hyps(greedy(tr))),
        (dict(beam_size=MAX_BEAM_SIZE, num_hypotheses=MAX_BEAM_SIZE), sorted_nbest(MAX_BEAM_SIZE)),
        (dict(beam_size=1, sampling_topk=0, num_hypotheses=MAX_BEAM_SIZE, seed=1, max_decoding_length=4),
         lambda tr, rs: all(len(r.hypotheses) == MAX_BEAM_SIZE and all(len(t) <= 4 for t in r.token_ids) for r in rs)),
        (dict(beam_size=4, length_penalty=-10.0), normalized(-10.0)),
        (dict(beam_size=4, length_penalty=10.0), normalized(10.0)),
        (dict(max_decoding_length=10**18), same_as()),
        (dict(min_decoding_length=5, max_decoding_length=5),
         lambda tr, rs: all(len(t) == 5 for r in rs for t in r.token_ids)),
        (dict(max_length_a=1000.0), same_as()),
        (dict(max_length_a=0.0, max_length_b=0), lambda tr, rs: [r.token_ids for r in rs] == [[[]]] * 3),
        (dict(max_length_b=2**31 - 1), same_as()),
        (dict(beam_size=1, sampling_topk=10**9, seed=4), same_as(beam_size=1, sampling_topk=0, seed=4)),
        (dict(beam_size=1, sampling_topk=0, sampling_topp=1e-6, seed=4), lambda tr, rs: hyps(rs) == hyps(greedy(tr))),
        (dict(beam_size=1, sampling_topk=0, sampling_temperature=0, seed=4),
         lambda tr, rs: hyps(rs) == hyps(greedy(tr))),
        (dict(beam_size=1, sampling_topk=0, sampling_temperature=1e-4, seed=4),
         lambda tr, rs: hyps(rs) == hyps(greedy(tr))),
        (dict(beam_size=1, sampling_topk=0, sampling_temperature=1e4, seed=4, max_decoding_length=6),
         lambda tr, rs: all(len(r.token_ids[0]) <= 6 for r in rs)),
        (dict(beam_size=1, repetition_penalty=1e4), lambda tr, rs: all(len(set(r.token_ids[0])) == len(r.token_ids[0])
                                                                       for r in rs)),
        (dict(beam_size=1, repetition_penalty=1e-4, max_decoding_length=9), lambda tr, rs: all(
            len(r.token_ids[0]) <= 9 for r in rs)),
        (dict(no_repeat_ngram_size=10**9), same_as()),
        (dict(beam_size=1, sampling_topk=0, seed=0), same_as(beam_size=1, sampling_topk=0, seed=0)),
        (dict(beam_size=1, sampling_topk=0, seed=2**64), same_as(beam_size=1, sampling_topk=0, seed=2**64)),
        (dict(max_batch_size=0), same_as(max_batch_size=1)),
        (dict(max_input_length=1), lambda tr, rs: all(r.truncated for r in rs)
         and [r.token_ids for r in rs] == [[h.tokens for h in tr.translate_ids([[tr.config.eos_id]])[0]]] * 3),
        (dict(max_input_length=512), same_as()),
    ]


@pytest.mark.parametrize("opts, check", at_bound_cases())
def test_option_at_its_bound_is_defined(tr, opts, check):
    results, messages = caught(tr.translate_batch, TEXTS, return_scores=True, **opts)
    assert len(results) == 3
    assert all(m.startswith("input ") and "truncated to max_input_length=1" in m for m in messages)   # no numpy noise
    assert check(tr, results)


BEYOND = [
    (dict(beam_size=0), "beam_size must be an integer in [1, 256], got 0"),
    (dict(beam_size=257), "beam_size must be an integer in [1, 256], got 257"),
    (dict(beam_size=2.0), "beam_size must be an integer in [1, 256], got 2.0"),
    (dict(beam_size=True), "beam_size must be an integer in [1, 256], got True"),
    (dict(beam_size=4, num_hypotheses=0), "num_hypotheses must be an integer in [1, 4], got 0"),
    (dict(beam_size=4, num_hypotheses=5), "num_hypotheses must be an integer in [1, 4], got 5"),
    (dict(beam_size=1, sampling_topk=0, num_hypotheses=257), "num_hypotheses must be an integer in [1, 256], got 257"),
    (dict(length_penalty=-10.5), "length_penalty must be a number in [-10, 10], got -10.5"),
    (dict(length_penalty=1e308), "length_penalty must be a number in [-10, 10], got 1e+308"),
    (dict(length_penalty=float("nan")), "length_penalty must be a number in [-10, 10], got nan"),
    (dict(max_decoding_length=-1), "max_decoding_length must be an integer >= 0, got -1"),
    (dict(min_decoding_length=-1), "min_decoding_length must be an integer in [0, 256], got -1"),
    (dict(min_decoding_length=257), "min_decoding_length must be an integer in [0, 256], got 257"),
    (dict(max_length_a=-0.5), "max_length_a must be a number in [0, 1000], got -0.5"),
    (dict(max_length_a=1e300), "max_length_a must be a number in [0, 1000], got 1e+300"),
    (dict(max_length_b=-1), "max_length_b must be an integer in [0, 2147483647], got -1"),
    (dict(max_length_b=2**31), "max_length_b must be an integer in [0, 2147483647], got 2147483648"),
    (dict(sampling_topk=-1), "sampling_topk must be an integer >= 0, got -1"),
    (dict(sampling_topp=0.0), "sampling_topp must be a number in [1e-06, 1], got 0.0"),
    (dict(sampling_topp=1e-300), "sampling_topp must be a number in [1e-06, 1], got 1e-300"),
    (dict(sampling_topp=1.01), "sampling_topp must be a number in [1e-06, 1], got 1.01"),
    (dict(sampling_temperature=-0.1), "sampling_temperature must be a number 0 or in [0.0001, 10000], got -0.1"),
    (dict(sampling_temperature=1e-300), "sampling_temperature must be a number 0 or in [0.0001, 10000], got 1e-300"),
    (dict(sampling_temperature=1e300), "sampling_temperature must be a number 0 or in [0.0001, 10000], got 1e+300"),
    (dict(repetition_penalty=0.0), "repetition_penalty must be a number in [0.0001, 10000], got 0.0"),
    (dict(repetition_penalty=1e300), "repetition_penalty must be a number in [0.0001, 10000], got 1e+300"),
    (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size must be an integer >= 0, got -1"),
    (dict(seed=-1), "seed must be an integer >= 0, got -1"),
    (dict(beam_size=4, sampling_topk=0), "sampling (sampling_topk=0) needs beam_size=1, got beam_size=4"),
    (dict(beam_szie=4), "unknown decoding option(s) beam_szie; known: beam_rules, beam_size, "),
    (dict(max_batch_size=-1), "max_batch_size must be an integer >= 0, got -1"),
    (dict(batch_type="sentences"), "batch_type must be one of examples, tokens, got 'sentences'"),
    (dict(max_input_length=0), "max_input_length must be an integer in [1, 512] (the model's max_positions), got 0"),
    (dict(max_input_length=513), "max_input_length must be an integer in [1, 512] (the model's max_positions), got 513"),
]


@pytest.mark.parametrize("opts, message", BEYOND)
def test_option_beyond_its_bound_is_a_value_error_naming_it(tr, opts, message):
    with pytest.raises(ValueError) as e:
        tr.translate_batch(TEXTS, **opts)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_translator_arguments_at_and_beyond_their_bounds(tiny_package, tr):
    wide = Translator(tiny_package, device="cpu", intra_threads=MAX_THREADS, inter_threads=MAX_THREADS)
    assert hyps(wide.translate_batch(TEXTS)) == hyps(tr.translate_batch(TEXTS))
    Translator(tiny_package, device="cpu", intra_threads=0, inter_threads=1).translate("one")
    for kwargs, message in [(dict(intra_threads=-1), f"intra_threads must be an integer in [0, {MAX_THREADS}], got -1"),
                            (dict(intra_threads=MAX_THREADS + 1),
                             f"intra_threads must be an integer in [0, {MAX_THREADS}], got {MAX_THREADS + 1}"),
                            (dict(intra_threads=2**40), f"intra_threads must be an integer in [0, {MAX_THREADS}], "
                                                        f"got {2**40}"),
                            (dict(inter_threads=0), f"inter_threads must be an integer in [1, {MAX_THREADS}], got 0"),
                            (dict(device_id=-1), "device_id must be an integer >= 0, got -1"),
                            (dict(optimization="max"), "optimization must be one of disable, basic, extended, all"),
                            (dict(device="tpu"), "device must be one of auto, cpu, cuda, got 'tpu'")]:
        with pytest.raises(ValueError) as e:
            Translator(tiny_package, **kwargs)
        assert str(e.value).startswith(message)


# --- target prefixes and phrases: text the vocabulary can spell --------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(target_prefix=["drei \udcff"]), r"target_prefix\[0\] is not valid text \(it holds lone surrogates"),
    (dict(constraints=[["vier", "drei \udcff"]]), r"constraints\[0\]\[1\] is not valid text \(it holds lone"),
    (dict(target_prefix=["\u65e5\u672c"]), r"target_prefix\[0\] '\u65e5\u672c' has characters the model's tokenizer "
                                           r"does not know \(they become <unk>\): no translation can start with it"),
    (dict(constraints=[["\u65e5\u672c"]]), r"constraints\[0\]\[0\] '\u65e5\u672c' has characters the model's "
                                           r"tokenizer does not know \(they become <unk>\): no translation can hold it"),
    # a prefix no translation can hold (never cut in silence); a prefix of bytes
    (dict(target_prefix=["drei " * 600]), r"target_prefix\[0\] 'drei drei .*' is longer than a translation can be"),
    (dict(target_prefix=[b"drei"]), r"target_prefix\[0\] must be a str, got bytes"),
])
def test_prefixes_and_phrases_the_vocabulary_cannot_spell_are_refused(tr, kwargs, message):
    with pytest.raises(OptionError, match="^" + message) as e:
        tr.translate_batch(["one"], beam_size=2, **kwargs)
    assert "\n" not in str(e.value)


def test_a_prefix_the_vocabulary_can_spell_is_kept(tr):
    """The rule refuses only what the vocabulary lacks: a known prefix starts every translation, as before."""
    (r,) = tr.translate_batch(["one two"], target_prefix=["drei"])
    assert r.hypotheses[0].startswith("drei")


# --- the API's argument types ---------------------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    # ids, prefixes and phrases of the wrong type
    (lambda tr, s: tr.translate_ids([s], constraint_ids=[7], beam_size=2),
     r"constraint_ids\[0\] must be a list of id lists \(or None\), got int"),
    (lambda tr, s: tr.translate_batch(["one"], target_prefix=[5]), r"target_prefix\[0\] must be a str, got int"),
    (lambda tr, s: tr.translate_batch(["one"], target_prefix="drei"),
     r"target_prefix must be a list of one str \(or None\) per input, got str"),
    # floats, strings, bools and nested lists where ids belong; a forced EOS
    (lambda tr, s: tr.translate_ids([[5.0, 2]]), r"sources\[0\] must hold ids \(int\), got 5.0 \(float\)"),
    (lambda tr, s: tr.translate_ids([s, ["5", 2]]), r"sources\[1\] must hold ids \(int\), got '5' \(str\)"),
    (lambda tr, s: tr.translate_ids([[True, 2]]), r"sources\[0\] must hold ids \(int\), got True \(bool\)"),
    (lambda tr, s: tr.translate_ids([[5, [2]]]), r"sources\[0\] must hold ids \(int\), got \[2\] \(list\)"),
    (lambda tr, s: tr.translate_ids("five"), r"sources must be a list of id lists, got str"),
    (lambda tr, s: tr.translate_ids([s], target_prefix_ids=[[2.5]]),
     r"target_prefix_ids\[0\] must hold ids \(int\), got 2.5 \(float\)"),
    (lambda tr, s: tr.translate_ids([s], target_prefix_ids=[7]), r"target_prefix_ids\[0\] must be a list of ids \(int\), got int"),
    (lambda tr, s: tr.translate_ids([s], target_prefix_ids=[[5, tr.config.eos_id]]),
     r"target_prefix_ids\[0\] holds the id \d+, which no translation holds \(PAD, BOS, EOS\)"),
    (lambda tr, s: tr.translate_ids([s], constraint_ids=[[[5, 1.5]]], beam_size=2),
     r"constraint_ids\[0\]\[0\] must hold ids \(int\), got 1.5 \(float\)"),
    (lambda tr, s: tr.score_ids([s], ["drei"]), r"targets\[0\] must be a list of ids \(int\), got str"),
])
def test_api_arguments_of_the_wrong_type_are_one_line(tr, call, message):
    source = tr.source_ids("one two")
    with pytest.raises((TypeError, ValueError), match="^" + message + "$") as e:
        call(tr, source)
    assert isinstance(e.value, OptionError) and "\n" not in str(e.value)


def test_ids_of_any_integer_type_are_accepted(tr):
    """numpy arrays and numpy integers are ids as good as ints: the same result as lists."""
    source = tr.source_ids("one two three")
    expected = tr.translate_ids([source], target_prefix_ids=[source[:1]])
    got = tr.translate_ids([np.array(source, dtype=np.int32)], target_prefix_ids=[(np.int64(source[0]),)])
    assert [h.tokens for h in got[0]] == [h.tokens for h in expected[0]]


# --- ids outside the vocabulary ---------------------------------------------------------------------------
def test_translate_ids_refuses_ids_outside_the_vocabulary(tr):
    vocab, eos = tr.config.vocab_size, tr.config.eos_id
    source = tr.tokenizer.encode(SOURCES[0]).ids + [eos]
    for bad in (-1, vocab, 10**9):
        with pytest.raises(ValueError, match=rf"^target_prefix_ids\[1\] holds an id outside the vocabulary "
                                             rf"\[0, {vocab}\): {bad}$"):
            tr.translate_ids([source, source], target_prefix_ids=[[5], [5, bad]])
        with pytest.raises(ValueError, match=r"^sources\[0\] holds an id outside the vocabulary"):
            tr.translate_ids([[bad, eos]])
    with pytest.raises(ValueError, match=r"^target_prefix_ids must hold one id list per source \(2\), got 1$"):
        tr.translate_ids([source, source], target_prefix_ids=[[5]])
    assert tr.translate_ids([source], target_prefix_ids=[[]]) == tr.translate_ids([source])
