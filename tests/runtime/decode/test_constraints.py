"""Terminology constraints (translate_batch(constraints=...), runtime/decode/constraints.py) on the exported tiny model:
the runtime's constrained beam search against the PyTorch reference (training/reference.py
constrained_beam_search), what every returned hypothesis holds, what happens when none within the length limit
can, the errors, --constraint on the command line, and the automata alone."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests import fixtures_training
from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, hypotheses, torch_judge
from tests.fixtures_training import DE, holds, toy_pairs
from tests.limits import reference_max_length
from tests.runtime.cli.test_commands import one_line_error
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.decode.constraints import MAX_CONSTRAINT_WORK, Constraints, split_work, work
from seq2onnx.runtime.decode.decoding import decode, step_limits
from seq2onnx.runtime.decode.top_candidates import top_candidates
from seq2onnx.runtime.options import DecodingOptions, OptionError
from seq2onnx.runtime.translator import Translator

SHIPPED = "numbers-en-de"                     # where a bound needs a model of 512 positions
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def translator(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


def toy_constraints(pairs, seed, most=2):
    return fixtures_training.toy_constraints(pairs, random.Random(seed), most)


@pytest.fixture(scope="module")
def batch(translator):
    """(texts, constraints, source ids, phrase ids) of 24 toy sentences of 1..6 words with 1-2 phrases each."""
    pairs = toy_pairs(24, seed=21, min_words=1, max_words=6)
    texts = [s for s, _ in pairs]
    constraints = toy_constraints(pairs, seed=5)
    eos = translator.config.eos_id
    sources = [translator.tokenizer.encode(t).ids + [eos] for t in texts]
    return texts, constraints, sources, translator.constraint_ids(constraints, len(texts))


def summary(results):
    return [[(h.tokens, h.finished, h.missing_constraints) for h in hyps] for hyps in results]


def assert_same_as_reference(model, sources, got, ref, length_penalty=1.0):
    """The runtime's constrained decodes as the PyTorch reference's, up to float32 rounding: agreement.py's bound
    derived from the model's weights, and where the tokens part a tie judged by PyTorch teacher-forced; where they
    agree, the same phrases missing."""
    assert_same_decodes(Float32Bounds.of_model(model), torch_judge(model), sources, got, ref, greedy=False,
                        eos_id=model.cfg.eos_id, length_penalty=length_penalty, what="constrained")
    for g, r in zip(got, ref):
        for a, b in zip(g, r):
            if a.tokens == b.tokens:
                assert a.missing_constraints == b.missing_constraints


# --- the same tokens and scores as the PyTorch reference ----------------------------------------------------
@pytest.mark.parametrize("beam_size, num_hypotheses, max_batch_size", [(4, 1, 0), (4, 2, 5), (5, 1, 7), (5, 3, 0)])
def test_constrained_beam_search_matches_reference(translator, tiny_model, batch, beam_size, num_hypotheses,
                                                   max_batch_size):
    from seq2onnx.training import reference
    _, constraints, sources, phrases = batch
    limits = reference_max_length(translator.config, sources)
    ref = reference.constrained_beam_search(tiny_model, sources, phrases, beam_size=beam_size,
                                            num_hypotheses=num_hypotheses, max_length=limits)
    got = translator.translate_ids(sources, beam_size=beam_size, num_hypotheses=num_hypotheses,
                                   constraint_ids=phrases, max_batch_size=max_batch_size)
    assert_same_as_reference(tiny_model, sources, got, ref)
    # the constraints were in force: they changed translations, and every best hypothesis holds its phrases
    plain = translator.translate_ids(sources, beam_size=beam_size, num_hypotheses=num_hypotheses)
    changed = sum(g[0].tokens != p[0].tokens for g, p in zip(got, plain))
    assert changed >= len(sources) // 4
    assert any(h.finished for g in got for h in g)
    for g, ph in zip(got, phrases):
        assert all(holds(g[0].tokens, p) for p in ph) and g[0].missing_constraints == 0


@pytest.mark.parametrize("opts", [
    dict(beam_size=4, max_decoding_length=2),                       # too short for some phrase sets
    dict(beam_size=3, num_hypotheses=3, max_decoding_length=4, length_penalty=0.6),
    dict(beam_size=4, min_decoding_length=5, length_penalty=1.3),
])
def test_length_limits_and_penalties_match_reference(translator, tiny_model, opts):
    """Where no hypothesis within the limit can hold every phrase, the reference's hypotheses come back: those
    missing fewest phrases first, unfinished (cut at the limit), flagged."""
    from seq2onnx.training import reference
    pairs = toy_pairs(16, seed=31, min_words=2, max_words=5)
    texts = [s for s, _ in pairs]
    phrases = translator.constraint_ids(toy_constraints(pairs, seed=6, most=3), len(texts))
    eos = translator.config.eos_id
    sources = [translator.tokenizer.encode(t).ids + [eos] for t in texts]
    limits = reference_max_length(translator.config, sources, max_decoding_length=opts.get("max_decoding_length", 256))
    ref = reference.constrained_beam_search(
        tiny_model, sources, phrases, beam_size=opts["beam_size"], num_hypotheses=opts.get("num_hypotheses", 1),
        length_penalty=opts.get("length_penalty", 1.0), max_length=limits,
        min_length=opts.get("min_decoding_length", 0))
    got = translator.translate_ids(sources, constraint_ids=phrases, max_batch_size=5, **opts)
    assert_same_as_reference(tiny_model, sources, got, ref, opts.get("length_penalty", 1.0))
    for hyps, ph, limit in zip(got, phrases, limits):
        for h in hyps:
            assert h.missing_constraints == sum(not holds(h.tokens, p) for p in ph)
            assert len(h.tokens) + h.finished <= limit
            if h.missing_constraints:
                assert not h.finished                                  # EOS only once every phrase is held
        if sum(len(p) for p in ph) <= limit:                           # room for them all: they are held
            assert hyps[0].missing_constraints == 0
    if opts.get("max_decoding_length") == 2:
        assert any(hyps[0].missing_constraints for hyps in got)        # the case this parameter is for


def source_ids(config):
    """Strategy: a source of 1..9 ordinary ids (no specials) ending with EOS."""
    specials = {config.pad_id, config.bos_id, config.eos_id, config.unk_id}
    ordinary = [i for i in range(config.vocab_size) if i not in specials]
    return st.lists(st.sampled_from(ordinary), min_size=1, max_size=9).map(lambda s: s + [config.eos_id])


@PROPERTY
@given(data=st.data())
def test_every_hypothesis_holds_its_phrases_when_they_fit(translator, data):
    """Any source, any phrases of the vocabulary's words: the best hypothesis holds every phrase whenever their
    lengths add up to the length limit or less (the top bank climbs one bank a step); every hypothesis's
    missing_constraints counts the phrases it does not hold; no hypothesis passes the limit."""
    cfg = translator.config
    sources = data.draw(st.lists(source_ids(cfg), min_size=1, max_size=4))
    words = [translator.tokenizer.encode(w).ids for w in DE]
    phrase = st.lists(st.sampled_from(words), min_size=1, max_size=3).map(lambda ws: sum(ws, []))
    phrases = data.draw(st.lists(st.lists(phrase, min_size=0, max_size=3), min_size=len(sources),
                                 max_size=len(sources)))
    k = data.draw(st.integers(2, 5))
    opts = dict(beam_size=k, num_hypotheses=data.draw(st.integers(1, k)),
                max_decoding_length=data.draw(st.integers(1, 12)),
                length_penalty=data.draw(st.sampled_from([0.0, 1.0])))
    limits = step_limits(sources, DecodingOptions(**opts), cfg)
    for hyps, ph, limit in zip(translator.translate_ids(sources, constraint_ids=phrases, **opts), phrases, limits):
        distinct = [list(p) for p in {tuple(p) for p in ph}]
        for h in hyps:
            assert h.missing_constraints == sum(not holds(h.tokens, p) for p in distinct)
            assert len(h.tokens) + h.finished <= limit
        if sum(len(p) for p in distinct) <= limit:
            assert hyps[0].missing_constraints == 0


def test_sentences_without_phrases_decode_as_without_constraints(translator, batch):
    """A sentence with no phrases (None, []) in a constrained batch has one bank: the unconstrained search."""
    texts, constraints, _, _ = batch
    mixed = [c if i % 3 == 0 else ([] if i % 3 == 1 else None) for i, c in enumerate(constraints)]
    sources = [translator.source_ids(t) for t in texts]
    bounds = Float32Bounds.of_graph(Path(translator.package.root) / "decoder_step.onnx")
    judge = engine_judge(translator.engine, translator.config)
    for opts in (dict(beam_size=4, num_hypotheses=2), dict(beam_size=5, length_penalty=0.6)):
        got = translator.translate_batch(texts, constraints=mixed, return_scores=True, **opts)
        plain = translator.translate_batch(texts, return_scores=True, **opts)
        for i, (g, p) in enumerate(zip(got, plain)):
            if i % 3:
                # a constrained batch runs other rows beside it (other kernel shapes): the same decodes up to
                # agreement.py's bound, where they part a tie judged by the engine teacher-forced
                assert_same_decodes(bounds, judge, [sources[i]], [hypotheses(g.token_ids, g.scores, g.normalized_scores,
                                    g.finished)], [hypotheses(p.token_ids, p.scores, p.normalized_scores, p.finished)],
                                    greedy=False, eos_id=translator.config.eos_id,
                                    length_penalty=opts.get("length_penalty", 1.0), what=f"input {i}")
                assert g.constraints_met == [True] * len(g.token_ids)
        assert any(g.token_ids != p.token_ids for g, p in zip(got[::3], plain[::3]))
        assert [r.token_ids for r in translator.translate_batch(texts, constraints=[[]] * len(texts), **opts)] \
            == [p.token_ids for p in plain]
        assert plain[0].constraints_met is None


# --- the text API -------------------------------------------------------------------------------------------
def test_a_phrase_is_tokenized_as_its_words_are_in_a_sentence(translator):
    """Alone, a phrase is tokenized as where it starts a word of the translation (its first piece a word start);
    whitespace runs are one space."""
    tok = translator.tokenizer
    for i, word in enumerate(DE):
        other = DE[(i + 3) % len(DE)]
        in_context = tok.encode(f"{other} {word} {other}").ids
        (alone,) = translator.constraint_ids([[word]], 1)[0]
        assert in_context[len(tok.encode(other).ids):][:len(alone)] == alone
        assert tok.id_to_token(alone[0]).startswith("\u2581")
    assert translator.constraint_ids([["  drei \t vier "]], 1) == translator.constraint_ids([["drei vier"]], 1)
    once = translator.constraint_ids([["drei", "vier"]], 1)
    assert translator.constraint_ids([["drei", "drei ", "vier"]], 1) == once          # a repeat need appear once


def test_translate_batch_reports_what_each_hypothesis_holds(translator):
    texts = ["one two three", "", "four five", "six"]
    constraints = [["zwei eins"], ["drei"], None, ["neun", "acht null"]]
    out = translator.translate_batch(texts, beam_size=4, num_hypotheses=2, constraints=constraints)
    assert out[0].constraints_met == [True, True] and all("zwei eins" in h for h in out[0].hypotheses)
    assert out[1].hypotheses == [""] and out[1].constraints_met == [False]     # a blank text is not translated
    assert out[2].constraints_met == [True, True]
    assert all("neun" in h and "acht null" in h for h in out[3].hypotheses) and out[3].constraints_met == [True, True]
    assert translator.translate("one two three", beam_size=4, constraints=["zwei eins"]) == out[0].hypotheses[0]
    streamed = "".join(translator.generate_tokens("six", beam_size=4, constraints=["neun", "acht null"]))
    assert streamed == translator.translate("six", beam_size=4, constraints=["neun", "acht null"])


def test_the_length_limit_returns_the_closest_hypotheses_flagged(translator):
    """Three one-word phrases and room for two: the hypotheses hold two, are cut at the limit, and say so."""
    out = translator.translate_batch(["one two"], beam_size=4, num_hypotheses=2, max_decoding_length=2,
                                     constraints=[["drei", "vier", "fünf"]], return_scores=True)[0]
    assert out.constraints_met == [False, False] and out.finished == [False, False]
    assert all(len(h.split()) == 2 and set(h.split()) < {"drei", "vier", "fünf"} for h in out.hypotheses)
    assert len(set(out.hypotheses[0].split())) == 2                        # the best holds two of them


def test_attention_is_kept_with_constraints(translator, tiny_model, batch):
    """return_attention: each constrained hypothesis's rows are the PyTorch model's over that hypothesis."""
    from seq2onnx.training.reference import cross_attention
    texts, constraints, sources, _ = batch
    results = translator.translate_batch(texts[:10], beam_size=4, num_hypotheses=2, constraints=constraints[:10],
                                         return_attention=True, return_alignment=True)
    worst = 0.0
    for source, r in zip(sources, results):
        assert len(r.attention) == len(r.alignment) == len(r.hypotheses)
        for ids, rows in zip(r.token_ids, r.attention):
            rows = np.array(rows)
            assert rows.shape == (len(ids), len(source))
            worst = max(worst, float(np.abs(rows - cross_attention(tiny_model, source, ids).numpy()[:len(ids)]).max()))
    assert worst < 1e-4


ERRORS = [
    (dict(constraints="drei"), "constraints must be a list of 1 phrase lists"),
    (dict(constraints=[["drei"], ["vier"]]), "constraints must be a list of 1 phrase lists"),
    (dict(constraints=["drei"]), r"constraints\[0\] must be a list of phrases \(str\), got str: wrap it in a list"),
    (dict(constraints=[[3]]), r"constraints\[0\]\[0\] must be a str, got int"),
    (dict(constraints=[["drei", " \t"]]), r"constraints\[0\]\[1\] ' \\t' is empty"),
    (dict(constraints=[["\u6f22"]]), r"constraints\[0\]\[0\] '\u6f22' has characters the model's tokenizer"),
    (dict(constraints=[["drei " * 2000]]), "longer than a translation can be"),
    (dict(constraints=[["drei vier"] + [" ".join([w] * 60) for w in DE]]), r"constraints\[0\]: its phrases hold \d+ tokens in all"),
    (dict(constraints=[["drei"]], beam_size=1), "beam_size must be >= 2 for constraints"),
    (dict(constraints=[["drei"]], beam_size=1, sampling_topk=0), "beam_size must be >= 2"),
]


@pytest.mark.parametrize("kwargs, message", ERRORS)
def test_bad_constraints_are_one_line_value_errors(translator, kwargs, message):
    with pytest.raises(ValueError, match=message) as caught:
        translator.translate_batch(["one two"], **kwargs)
    assert "\n" not in str(caught.value)


def test_bad_constraint_ids_are_one_line_value_errors(translator):
    cfg = translator.config
    source = [[5, cfg.eos_id]]
    for ids, message in [([[[cfg.eos_id]]], "holds the id"), ([[[cfg.vocab_size]]], "holds an id outside"),
                         ([[[]]], r"must hold 1\.\.\d+ ids, got 0"), ([[[5]], [[6]]], "one per source")]:
        with pytest.raises(ValueError, match=message) as caught:
            translator.translate_ids(source, beam_size=2, constraint_ids=ids)
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="beam_size must be >= 2"):
        translator.translate_ids(source, beam_size=1, constraint_ids=[[[5]]])
    assert translator.translate_ids(source, beam_size=1, constraint_ids=[[]])[0][0].tokens == \
        translator.translate_ids(source, beam_size=1)[0][0].tokens                  # nothing asked: greedy is fine


# --- the command line ---------------------------------------------------------------------------------------
def run_cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def test_cli_constraint_is_the_apis(tiny_package, tmp_path, capsys, translator):
    lines = ["one two three", "four", "", "five six seven eight"]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rc, out, err = run_cli(["translate", str(tiny_package), "-i", str(src), "--device", "cpu", "--beam-size", "4",
                            "--constraint", "neun", "--constraint", "zwei  drei", "--max-batch-size", "3"], capsys)
    assert rc == 0 and err == ""
    expected = translator.translate_batch(lines, beam_size=4, constraints=[["neun", "zwei drei"]] * len(lines))
    assert out.splitlines() == [r.hypotheses[0] for r in expected]
    assert all("neun" in t and "zwei drei" in t for t in out.splitlines() if t)


def test_cli_constraint_errors_and_warnings(tiny_package, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("one two\nthree\n", encoding="utf-8")
    base = ["translate", str(tiny_package), "-i", str(src), "--device", "cpu"]
    for extra, message in [(["--constraint", "drei", "--beam-size", "1"], "--beam-size must be >= 2 for --constraint"),
                           (["--constraint", " "], "--constraint ' ' is empty"),
                           (["--constraint", "\u6f22"], "--constraint '\u6f22' has characters")]:
        rc, out, err = run_cli(base + extra, capsys)
        assert rc == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1
    rc, out, err = run_cli(base + ["--constraint", "drei vier fünf", "--max-decoding-length", "2"], capsys)
    assert rc == 0 and len(out.splitlines()) == 2
    warnings = err.strip().splitlines()
    assert len(warnings) == 2 and all("holds every --constraint" in w for w in warnings)
    assert "line 1:" in warnings[0] and "line 2:" in warnings[1]


# --- the parts alone ----------------------------------------------------------------------------------------
def progress(tokens, phrase):
    """The longest proper prefix of the phrase that the tokens end with."""
    return max(n for n in range(len(phrase)) if n <= len(tokens) and list(tokens[len(tokens) - n:]) == phrase[:n])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(4, 7), min_size=1, max_size=4), min_size=1, max_size=3),
       st.lists(st.integers(3, 8), max_size=25))
def test_automata_follow_the_phrases(phrases, tokens):
    """Each phrase's state after each token is its progress (held: its length), and the bank the ids met."""
    c = Constraints([phrases], beam_size=1, vocab_size=10)
    sentence = np.zeros(1, dtype=np.int64)
    for t in range(len(tokens)):
        c.advance(np.zeros(1, dtype=np.int64), np.array([tokens[t]]), sentence)
        seen = tokens[:t + 1]
        want = [len(p) if holds(seen, p) else progress(seen, p) for p in phrases]
        assert c.state[0].tolist() == want
        held = [p for p in phrases if holds(seen, p)]
        partial = max([progress(seen, p) for p in phrases if p not in held], default=0)
        assert c.bank(c.state, sentence).tolist() == [sum(len(p) for p in held) + partial]
        assert c.missing(np.zeros(1, dtype=np.int64), sentence).tolist() == [len(phrases) - len(held)]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(0, 10**6))
def test_order_without_phrases_is_the_score_order(sentences, k, seed):
    """Sentences without phrases: one bank, dealt in score order (ties to the lower flat index)."""
    rng = np.random.default_rng(seed)
    v = 12
    cand = rng.integers(-4, 1, size=(sentences, k * v)).astype(np.float32)        # many ties
    cand[:, v:] -= 100 * (rng.random((sentences, 1)) < 0.5)                     # sometimes beam 0 far ahead
    cand[rng.random(cand.shape) < 0.2] = -np.inf
    cand[:, 0] = 0.0                                                             # a finite candidate per row
    c = Constraints([[] for _ in range(sentences)], beam_size=k, vocab_size=v)
    order = c.order(cand, top_candidates(cand, 2 * k), np.arange(sentences), k)
    finite = np.take_along_axis(cand, top_candidates(cand, 2 * k), axis=1) > -np.inf
    assert np.array_equal(np.where(finite, order, -1), np.where(finite, top_candidates(cand, 2 * k), -1))


# --- refused by size before any work ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    return Translator(SHIPPED, device="cpu", intra_threads=1)


def one_word_phrases(translator, n):
    """n distinct phrases of two words that are one token each (2 tokens a phrase)."""
    vocab = translator.tokenizer.get_vocab()
    words = sorted(t[1:] for t in vocab if t.startswith("\u2581") and len(t) > 1
                   and len(translator.tokenizer.encode(t[1:]).ids) == 1)
    phrases = [f"{a} {b}" for a in words for b in words][:n]
    assert len(phrases) == n
    return phrases


def test_too_many_phrases_are_refused_by_their_number_first(translator):
    """The number of phrases is checked before any phrase is looked at (a repeat check over 60,000 phrases is
    quadratic). The last phrase is not even a str: the error is about the number, so no phrase was read."""
    phrases = [f"drei {i}" for i in range(59_999)] + [7]
    with pytest.raises(OptionError, match=r"^constraints\[0\] holds 60000 phrases; a translation holds at most "
                                          rf"{translator.config.max_positions} tokens") as e:
        translator.translate_batch(["one"], constraints=[phrases])
    assert "\n" not in str(e.value)
    ids = [[5]] * 59_999 + ["not ids"]
    with pytest.raises(OptionError, match=r"^constraint_ids\[0\] holds 60000 phrases"):
        translator.translate_ids([[5, translator.config.eos_id]], constraint_ids=[ids])


def test_a_huge_phrase_is_refused_by_its_length_first(translator):
    """One phrase of 20 MB is refused by its length, before its words are split or tokenized."""
    with pytest.raises(OptionError, match=r"^constraints\[0\]\[1\] 'drei drei .*' is longer than a translation can "
                                          "be") as e:
        translator.translate_batch(["one"], constraints=[["vier", "drei " * 4_000_000]])
    assert "\n" not in str(e.value)


# --- the work of a step is bounded -------------------------------------------------------------------------
@pytest.mark.parametrize("sentences", [[[[5]], [[6, 7], [8]]], [[[5, 6, 7]] * 3, [], [[9]]], [[], []]])
@pytest.mark.parametrize("beam_size", [2, 5])
def test_work_counts_what_a_constrained_step_holds(translator, sentences, beam_size):
    """`work` is what the bound is about: the states Constraints.order computes (a state per phrase of each of
    beam_size x (phrases + 3) candidates per sentence, every sentence padded to the most phrases) and the
    entries of the automata's tables. Measured here on the arrays themselves."""
    if not any(sentences):
        assert work(sentences, beam_size) == 0                   # no phrases: no automata run
        return
    c = Constraints(sentences, beam_size, translator.config.vocab_size)
    v, k, a = translator.config.vocab_size, beam_size, len(sentences)
    cand = np.random.default_rng(0).standard_normal((a, k * v)).astype(np.float32)
    top = np.argsort(-cand, axis=1, kind="stable")[:, :2 * k]
    seen = []
    original = c.step
    c.step = lambda state, sentence, token: seen.append(state.size) or original(state, sentence, token)
    c.order(cand, top, np.arange(a), k)
    assert work(sentences, beam_size) == seen[0] + c.table.size


def test_a_sentence_over_the_work_bound_is_refused_in_one_line(shipped, capsys):
    """Beam 256, 16 sentences x 256 phrases (gigabytes and minutes of work): refused before any
    work, by the API and by the command line, naming the flags."""
    phrases = one_word_phrases(shipped, 256)
    texts = [f"three hundred and {w}" for w in "one two three four five six seven eight".split()] * 2
    assert work([shipped.constraint_ids([phrases], 1)[0]], 256) > MAX_CONSTRAINT_WORK
    with pytest.raises(OptionError, match=r"^constraints\[0\]: 256 phrases at beam_size 256 make [\d,]+ automaton "
                                          r"states a step, more than the [\d,]+ allowed") as e:
        shipped.translate_batch(texts, beam_size=256, constraints=[phrases] * len(texts))
    assert "\n" not in str(e.value)
    args = ["translate", SHIPPED, "--device", "cpu", "--beam-size", "256", "-i", "/dev/null"]
    rc, out, err = run_cli(args + [a for p in phrases for a in ("--constraint", p)], capsys)
    message = one_line_error(err)
    assert rc == 2 and out == "" and message.startswith("--constraint: 256 phrases at --beam-size 256 make")
    assert message.endswith("give fewer phrases or a smaller --beam-size")
    # just under the bound: accepted (the same 256 phrases at beam 8)
    assert work([shipped.constraint_ids([phrases], 1)[0]], 8) <= MAX_CONSTRAINT_WORK


def test_a_batch_over_the_work_bound_is_decoded_in_groups():
    """Sentences each within the bound are decoded a few at a time: every group within it, each sentence once, in
    order, and no group could have taken the next sentence."""
    rng = np.random.default_rng(31)
    phrases = [[list(rng.integers(4, 100, rng.integers(1, 4))) for _ in range(rng.integers(0, 120))]
               for _ in range(300)]
    for beam_size in (4, 64, 256):
        batch = list(range(len(phrases)))
        groups = split_work(batch, phrases, beam_size)
        assert [i for g in groups for i in g] == batch
        assert all(work([phrases[i] for i in g], beam_size) <= MAX_CONSTRAINT_WORK for g in groups)
        assert all(work([phrases[i] for i in g + [h[0]]], beam_size) > MAX_CONSTRAINT_WORK
                   for g, h in zip(groups, groups[1:]))
    assert len(split_work(batch, phrases, 256)) > len(split_work(batch, phrases, 4)) > 1


def test_decode_refuses_a_batch_over_the_work_bound(shipped):
    """The id-level decode (no batching of its own) refuses a batch whose step would pass the bound,
    though each sentence alone is within it; translate_ids splits the same batch and decodes it."""
    phrases = [[[t] for t in range(4, 104)]] * 40                     # 100 one-token phrases each
    assert work(phrases[:1], 16) <= MAX_CONSTRAINT_WORK < work(phrases, 16)
    source = shipped.source_ids("three")
    with pytest.raises(OptionError, match=r"^40 sentences with constraints at beam_size 16 make [\d,]+ automaton "
                                          r"states a step, more than the [\d,]+ allowed"):
        decode(shipped.engine, shipped.config, [source] * 40, DecodingOptions(beam_size=16), constraints=phrases)
    assert len(split_work(range(40), phrases, 16)) > 1
