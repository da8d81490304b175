"""Inputs to the runtime: awkward text and every option at and beyond its bounds, through
the Python API and the CLI. Each case has one defined result (a translation, the empty output,
truncation with a warning) or a one-line error naming the problem; never a traceback, and the other
lines of a batch are translated as if alone. The defined results are listed in docs/CONTRACTS.md
("Runtime input") and in `seq2onnx translate --help`."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, results_as_hypotheses
from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.cli.commands import format_output
from seq2onnx.runtime.options import MAX_BEAM_SIZE, DecodingOptions
from seq2onnx.runtime.translator import MAX_THREADS, Translator

LONG_LINE = ("seven " * 1667)[:10_000]                 # 10,000 characters, 1,667 words: over max_positions
SURROGATES = "seven \udcff"                             # what surrogateescape makes of b"seven \xff"
UNKNOWN = ["😀", "三", "\x00", "\x1b", "\x07", "\u200b"]  # emoji, CJK, NUL, ESC, BEL, zero-width space


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


# --- the CLI ------------------------------------------------------------------------------------------
def cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


DECODING_OPTIONS = set(DecodingOptions().to_dict())


def cli_flag(name: str) -> str:
    return "--n-best" if name == "num_hypotheses" else "--" + name.replace("_", "-")


# the decoding options of BEYOND the command line can express (numbers; its own checks for the rest)
CLI_BEYOND = [(o, m) for o, m in BEYOND
              if all(type(v) in (int, float) and k in DECODING_OPTIONS for k, v in o.items()) and o != dict(beam_size=2.0)]


@pytest.mark.parametrize("opts, message", CLI_BEYOND)
def test_cli_option_beyond_its_bound_is_one_line(tiny_package, capsys, opts, message):
    args = [a for k, v in opts.items() for a in (cli_flag(k), repr(v) if isinstance(v, float) else str(v))]
    rc, out, err = cli(["translate", str(tiny_package), *args], capsys)
    first = message.split(" ")[0]
    expected = message.replace(first, cli_flag(first), 1) if first in DECODING_OPTIONS else \
        message.replace("sampling_topk=", "--sampling-topk=").replace("beam_size=", "--beam-size=")   # "sampling (...)"
    assert rc == 2 and out == ""
    assert err.splitlines() == [err.strip()] and err.startswith(f"seq2onnx translate: error: {expected}"), err


@pytest.mark.parametrize("args, message", [
    (["--beam-size", "abc"], "argument --beam-size: invalid int value: 'abc' (see seq2onnx translate --help)"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate (see seq2onnx translate --help)"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--max-batch-size", "0"], "--max-batch-size must be >= 1, got 0"),
    (["--intra-threads", str(MAX_THREADS + 1)], f"--intra-threads must be an integer in [0, {MAX_THREADS}], "
                                                f"got {MAX_THREADS + 1}"),
    (["--inter-threads", "0"], f"--inter-threads must be an integer in [1, {MAX_THREADS}], got 0"),
    (["--max-input-length", "0"], "--max-input-length must be in [1, 512] (the model's max_positions), got 0"),
    (["--max-input-length", "513"], "--max-input-length must be in [1, 512] (the model's max_positions), got 513"),
    (["--n-best", "257", "--beam-size", "1", "--sampling-topk", "0"], "--n-best must be an integer in [1, 256], got 257"),
])
def test_cli_bad_command_lines_are_one_line(tiny_package, capsys, args, message):
    rc, out, err = cli(["translate", str(tiny_package), *args], capsys)
    assert rc == 2 and out == ""
    assert err.splitlines() == [err.strip()] and err.startswith(f"seq2onnx translate: error: {message}"), err


def test_cli_without_model_dir_is_one_line(capsys):
    rc, _, err = cli(["translate"], capsys)
    assert rc == 2 and err == ("seq2onnx translate: error: the following arguments are required: MODEL_DIR "
                               "(see seq2onnx translate --help)\n")
    rc, _, err = cli(["info", "--bogus"], capsys)
    assert rc == 2 and err.startswith("seq2onnx info: error: the following arguments are required: MODEL_DIR")


def length_limit_warning(line: int, result) -> str:
    """`seq2onnx translate`'s warning for a line whose translation `result` stopped at the length limit unended."""
    return (f"seq2onnx translate: warning: line {line}: the translation stopped at the length limit before it ended "
            f"({len(result.token_ids[0])} tokens): the model may be looping on this input; "
            "--max-length-a/--max-length-b/--max-decoding-length set the limit")


@pytest.mark.parametrize("args, opts", [
    (["--beam-size", "256", "--n-best", "256"], dict(beam_size=256, num_hypotheses=256)),
    (["--max-decoding-length", "0", "--n-best", "2"], dict(max_decoding_length=0, num_hypotheses=2)),
    (["--max-decoding-length", "1", "--beam-size", "1"], dict(max_decoding_length=1, beam_size=1)),
    (["--sampling-topk", "0", "--beam-size", "1", "--sampling-temperature", "10000", "--seed", "0",
      "--max-decoding-length", "5"], dict(sampling_topk=0, beam_size=1, sampling_temperature=1e4, seed=0,
                                          max_decoding_length=5)),
    (["--length-penalty", "-10", "--max-input-length", "1", "--intra-threads", str(MAX_THREADS)],
     dict(length_penalty=-10.0, max_input_length=1)),
])
def test_cli_option_at_its_bound_matches_the_api(tiny_package, tr, tmp_path, capsys, args, opts):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    rc, out, err = cli(["translate", str(tiny_package), "-i", str(src), "--scores", "--n-best", "1", "--device", "cpu",
                        *args], capsys)                                   # the same device as `tr`
    assert rc == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = tr.translate_batch(TEXTS, return_scores=True, **{"num_hypotheses": 1, **opts})
    n = opts.get("num_hypotheses", 1)
    rows = [line.split("\t") for line in out.splitlines()]
    if n > 1:
        assert [int(r[0]) for r in rows] == [i + 1 for i, e in enumerate(expected) for _ in e.hypotheses]
        rows = [r[1:] for r in rows]
    assert [r[1] for r in rows] == [h for e in expected for h in e.hypotheses]
    assert [float(r[0]) for r in rows] == pytest.approx([s for e in expected for s in e.normalized_scores], abs=1e-5)
    warned = []                                           # per line: cut to --max-input-length, not ended
    for i, e in enumerate(expected, 1):
        if e.truncated:
            warned.append(f"seq2onnx translate: warning: line {i}: longer than 1 tokens, truncated (--max-input-length)")
        if not e.finished[0]:
            warned.append(length_limit_warning(i, e))
    assert err.splitlines() == warned


def test_cli_stdin_of_1000_awkward_lines(tiny_package, tr):
    """A real process reads raw bytes: invalid UTF-8, NUL, control characters, emoji, CJK, blank lines and a
    10,000-character line among 1,000 lines. Every line gets its defined output, in order."""
    texts, spot = mixed_texts(1000, seed=12)
    raw = [t.encode("utf-8", "surrogateescape") for t in texts]          # SURROGATES -> b"seven \xff"
    raw[spot[""]] = b"\r"                                                   # CRLF of an empty line
    data = b"\n".join(raw)                                                  # no newline after the last line
    proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "translate", str(tiny_package),
                           "--beam-size", "2", "--device", "cpu", "--scores"], input=data, capture_output=True,
                          timeout=300, env=dict(os.environ, PYTHONIOENCODING="ascii"))
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    decoded = [t.replace("\udcff", "\ufffd") for t in texts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = tr.translate_batch(decoded, beam_size=2, max_batch_size=32, return_scores=True)
    lines = proc.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 1001
    rows = [line.split("\t") for line in lines[:-1]]
    assert [r[1] for r in rows] == [e.hypotheses[0] for e in expected]
    assert [float(r[0]) for r in rows] == pytest.approx([e.normalized_scores[0] for e in expected], abs=1e-5)
    assert rows[spot[""]] == rows[spot["   "]] == ["0.000000", ""]
    # a block's lines are read (invalid UTF-8 warned) before they are translated (cut, <unk> warned): compared by line,
    # in the order each line gets them
    warned = [f"seq2onnx translate: warning: line {spot[SURROGATES] + 1}: invalid UTF-8 replaced with U+FFFD"]
    for i, e in enumerate(expected, 1):
        if e.truncated:
            warned.append(f"seq2onnx translate: warning: line {i}: longer than 512 tokens, truncated (--max-input-length)")
        if e.source_unknown_tokens:
            warned.append(f"seq2onnx translate: warning: line {i}: holds characters the model's tokenizer never saw in "
                          f"training ({e.source_unknown_tokens} <unk> piece(s)): it lies outside what the model "
                          "learned, so its translation cannot be trusted")
        if not e.finished[0]:          # the tiny model may loop on an odd line: the warning goes with the result
            warned.append(length_limit_warning(i, e))
    assert [e.truncated for e in expected].count(True) == 1 and sum(e.source_unknown_tokens > 0 for e in expected) > 1

    def by_line(lines):
        return sorted(lines, key=lambda s: int(s.split("line ")[1].split(":")[0]))
    assert by_line(err.splitlines()) == by_line(warned)


def test_cli_output_lines_never_break_inside_a_translation():
    """Every character str.splitlines() breaks at becomes a space: one input line, one output line."""
    breaks = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    line = format_output(7, ["a" + "b".join(breaks) + "c", "d"], [-1.5, -2.0], 2, True).decode("utf-8")
    assert line.splitlines() == ["7\t-1.500000\ta" + "b".join(" " * len(breaks)) + "c", "7\t-2.000000\td"]
