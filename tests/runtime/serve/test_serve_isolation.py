"""Faults and deadlines in `seq2onnx serve`'s schedulers (runtime/serve/), run in this process without HTTP
(no server extras needed):
  * one request's bad option or hostile input is its own error, under every batching policy: the requests it shared
    a batch with get translate_batch's answers (with continuous batching too, where an id past the vocabulary
    could otherwise fail every request of the batch);
  * a job whose deadline passed leaves the running batch at once, its rows with it (else they decode on and
    hold the batch's room while the next request waits);
  * sampling with no beam size decodes with beam size 1 in translate_batch, a server request and the CLI alike.
Jobs are queued before a scheduler's worker starts, so that they meet in its first batch whatever the machine's speed;
the continuous loop is driven pass by pass (ContinuousScheduler.turn) where the order of events matters."""
from __future__ import annotations

import shutil
import time
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest
from onnx import helper, numpy_helper

from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, results_as_hypotheses
from seq2onnx.runtime import Translator
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.option_table import request_options
from seq2onnx.runtime.options import OptionError, with_defaults
from seq2onnx.runtime.serve.continuous import ContinuousScheduler
from seq2onnx.runtime.serve.scheduler import (STREAM, TRANSLATE, DeadlineExceeded, DynamicScheduler,
                                              RequestScheduler)
from seq2onnx.runtime.package.shipped_models import resolve_model_dir
from tests.runtime.engine.test_session import after, edit_graph, i64

MODEL = "numbers-en-de"                 # the shipped model (tests/runtime/serve/test_serve.py's)
POLICIES = [ContinuousScheduler, DynamicScheduler, RequestScheduler]
WAIT = 300                              # seconds a future may take before the test calls it hung

# good requests: text and options (return_scores: their scores are compared too)
GOOD: List[Tuple[str, Dict[str, Any]]] = [
    ("one", {}),
    ("two hundred and five", {"beam_size": 1}),
    ("seventeen", {"beam_size": 2, "num_hypotheses": 2}),
    ("forty-four", {"target_prefix": ["vier"]}),
    ("three thousand", {"constraints": [["tausend"]]}),
    ("eleven", {"beam_size": 3, "no_repeat_ngram_size": 2}),
    ("seven", {"sampling_topk": 5, "seed": 3}),             # sampling, no beam_size given
]
# every option that can be wrong, alone in a request of one text (ids past the vocabulary, lengths past the model's,
# languages it lacks, prefixes and phrases its tokenizer cannot spell, values out of range or of the wrong shape)
BAD: List[Dict[str, Any]] = [
    {"suppress_ids": [99999]},
    {"forced_bos_id": 99999},
    {"max_input_length": 513},
    {"max_input_length": 0},
    {"target_lang": "fra"},
    {"source_lang": "xx"},
    {"beam_size": 0},
    {"num_hypotheses": 5},
    {"sampling_topk": 5, "beam_size": 4},
    {"min_decoding_length": 10, "max_decoding_length": 5},
    {"early_stopping": True},
    {"beam_szie": 4},
    {"max_batch_size": -1},
    {"return_alignment": "yes"},
    {"target_prefix": ["drei", "vier"]},
    {"target_prefix": ["\ud800"]},
    {"target_prefix": ["\u2713"]},          # a character the tokenizer lacks: found once the prefix is tokenized
    {"constraints": "drei"},
    {"constraints": [["drei"]], "beam_size": 1},
    {"constraints": [["\u2713"]]},
]


@pytest.fixture(scope="module")
def tr() -> Translator:
    return Translator(MODEL, device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def same_decodes(tr):
    """assert_same_decodes(texts, options, got): `got` (results of return_scores=True) decode the texts as
    translate_batch(texts, **options) does, up to float32 rounding of other batch shapes (tests/agreement.py)."""
    bounds = Float32Bounds.of_graph(resolve_model_dir(MODEL) / "decoder_step.onnx")
    judge = engine_judge(tr.engine, tr.config)

    def check(texts: List[str], options: Dict[str, Any], got: List[Any]) -> None:
        expected = tr.translate_batch(texts, return_scores=True, **options)
        if "sampling_topk" in options:                 # seeded per sentence: the same draws in any batch
            assert [r.token_ids for r in got] == [r.token_ids for r in expected], options
            return
        assert_same_decodes(bounds, judge, [tr.source_ids(t) for t in texts], results_as_hypotheses(got),
                            results_as_hypotheses(expected), greedy=options.get("beam_size", 4) == 1,
                            eos_id=tr.config.eos_id, what=f"{texts} {options}")
    return check


def message_of(error, call, *args, **kwargs) -> str:
    with pytest.raises(error) as e:
        call(*args, **kwargs)
    return str(e.value)


# --- one request's fault is its own --------------------------------------------------------------------------
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.policy)
def test_bad_options_fail_their_own_request_and_no_other(tr, same_decodes, policy):
    scheduler = policy(tr)
    jobs = []
    for i in range(max(len(GOOD), len(BAD))):           # interleaved: each bad one beside good ones
        if i < len(GOOD):
            text, options = GOOD[i]
            jobs.append(("good", [text], options, scheduler.submit(TRANSLATE, [text], {**options,
                                                                                      "return_scores": True})))
        if i < len(BAD):                                 # return_scores: dynamic batches it with the good ones
            jobs.append(("bad", ["three"], BAD[i], scheduler.submit(TRANSLATE, ["three"], {**BAD[i],
                                                                                        "return_scores": True})))
    stream = scheduler.submit(STREAM, ["twelve"], {})
    bad_stream = scheduler.submit(STREAM, ["twelve"], {"num_hypotheses": 2})
    scheduler.start()
    try:
        for kind, texts, options, job in jobs:
            if kind == "good":
                same_decodes(texts, options, job.future.result(WAIT))
            else:
                error = job.future.exception(WAIT)
                assert isinstance(error, ValueError), (options, error)     # the server's 400
                assert str(error) == message_of(ValueError, tr.translate_batch, texts, **options), options
        assert stream.future.result(WAIT)[0].hypotheses == tr.translate_batch(["twelve"])[0].hypotheses
        assert str(bad_stream.future.exception(WAIT)) == "a stream is one hypothesis: num_hypotheses must be 1"
    finally:
        scheduler.close(drain=False, timeout=WAIT)


def poison_rows_of_source_length(length: int):
    """A decoder step whose log-probs are NaN on the rows whose source has `length` ids (its encoder mask's sum): a
    graph that fails on one request's rows only, whichever rows share the step (greedy rows: a mask row per row)."""
    return after("log_probs", lambda raw, out: [
        helper.make_node("ReduceSum", ["encoder_attention_mask", "axis_1"], ["source_length"], keepdims=1),
        helper.make_node("Equal", ["source_length", "poisoned_length"], ["poisoned"]),
        helper.make_node("Where", ["poisoned", "nan", "zero"], ["poison"]),
        helper.make_node("Add", [raw, "poison"], [out])],
        [i64("axis_1", [1]), i64("poisoned_length", [length]),
         numpy_helper.from_array(np.array([np.nan], dtype=np.float32), "nan"),
         numpy_helper.from_array(np.array([0.0], dtype=np.float32), "zero")])


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.policy)
def test_a_step_that_fails_on_one_requests_rows_fails_that_request_alone(tmp_path, policy):
    """Defence in depth: what no check before the batch can see (here a graph that returns NaN on one source's
    rows) fails the requests whose rows caused it; the others decode again on their own and get their answers."""
    pkg = tmp_path / MODEL
    shutil.copytree(resolve_model_dir(MODEL), pkg)
    good, bad = ["one", "three", "seven", "twenty"], "nine hundred and ninety-nine thousand"
    tr = Translator(pkg, device="cpu", compute_type="float32", intra_threads=1)
    lengths = {t: len(tr.source_ids(t)) for t in good + [bad]}
    assert lengths[bad] not in [lengths[t] for t in good], lengths
    edit_graph(pkg, "decoder_step.onnx", poison_rows_of_source_length(lengths[bad]))
    tr = Translator(pkg, device="cpu", compute_type="float32", intra_threads=1)
    # one length limit for all: one batch (continuous: one length class; its jobs of equal options one search)
    options = {"beam_size": 1, "max_decoding_length": 12, "max_length_a": 0, "max_length_b": None}
    expected = {t: tr.translate_batch([t], **options)[0].token_ids for t in good}
    broken = message_of(ModelPackageError, tr.translate_batch, [bad], **options)
    assert "returned NaN or infinite log-probs" in broken
    scheduler = policy(tr)
    jobs = {t: scheduler.submit(TRANSLATE, [t], options) for t in good[:2] + [bad] + good[2:]}
    scheduler.start()
    try:
        error = jobs.pop(bad).future.exception(WAIT)
        assert isinstance(error, ModelPackageError) and str(error) == broken
        assert {t: job.future.result(WAIT)[0].token_ids for t, job in jobs.items()} == expected
    finally:
        scheduler.close(drain=False, timeout=WAIT)


# --- an expired job's rows leave at once ----------------------------------------------------------------------
def test_an_expired_job_leaves_the_running_batch_at_once(tr, same_decodes):
    """The loop driven pass by pass (no worker thread): a wide job runs, its deadline passes, and at the next pass its
    rows are gone; the next request decodes alone; the wide job's client gets DeadlineExceeded (504)."""
    scheduler = ContinuousScheduler(tr, max_batch_rows=256)
    wide = scheduler.submit(TRANSLATE, ["one"] * 8, {"beam_size": 64, "min_decoding_length": 100,
                                                     "max_decoding_length": 100, "max_length_a": 0,
                                                     "max_length_b": None})
    assert scheduler.turn(block=False) and scheduler.running_rows == 8 * 64
    wide.deadline = time.monotonic()                     # it passed
    word = scheduler.submit(TRANSLATE, ["three"], {"return_scores": True})
    scheduler.turn(block=False)
    assert isinstance(wide.future.exception(0), DeadlineExceeded)
    assert scheduler.running == [] and scheduler.cohorts == [] and scheduler.running_rows == 0
    scheduler.turn(block=False)
    assert [r.job for r in scheduler.running] == [word] and sum(c.rows for c in scheduler.cohorts) == 4
    while not word.future.done():
        scheduler.turn(block=False)
    same_decodes(["three"], {}, word.future.result(0))
    assert scheduler.outcomes["expired"] == 1 and scheduler.outcomes["done"] == 1
    assert scheduler.cohorts == [] and scheduler.running_rows == 0


def test_a_cancelled_job_sharing_a_decoding_leaves_with_the_last_job_that_shares_it(tr):
    """Jobs of equal options admitted together share one Decoding: a cancelled one's sentences decode on while a
    live one's do, and leave with them (else, once the live one finished, nothing would hold them and they would decode
    to their end). Each sentence decodes exactly its limit, 2 x its source ids: the live one's 4 steps, the other's
    16."""
    options = {"beam_size": 2, "min_decoding_length": 16, "max_decoding_length": 16, "max_length_a": 2,
               "max_length_b": 0}
    long, short = "nine hundred and ninety-nine thousand", "three"
    assert (len(tr.source_ids(long)), len(tr.source_ids(short))) == (8, 2)
    scheduler = ContinuousScheduler(tr)
    gone = scheduler.submit(TRANSLATE, [long] * 4, options)
    live = scheduler.submit(TRANSLATE, [short], options)
    scheduler.turn(block=False)
    assert len(scheduler.running) == 2 and len(scheduler.cohorts) == 1 and len(scheduler.cohorts[0].decodings) == 1
    gone.cancel()
    turns = 1
    while not live.future.done():
        scheduler.turn(block=False)
        turns += 1
    assert turns == 4 and len(live.future.result(0)[0].token_ids[0]) == 4
    assert scheduler.cohorts == [] and scheduler.running_rows == 0 and scheduler.outcomes["cancelled"] == 1


# --- sampling without a beam size ----------------------------------------------------------------------------
def test_sampling_without_a_beam_size_decodes_with_beam_size_1(tr, tmp_path, capsys):
    sampled = tr.translate_batch(["seven", "twelve"], sampling_topk=5, seed=3, num_hypotheses=2)
    assert [r.token_ids for r in sampled] == \
        [r.token_ids for r in tr.translate_batch(["seven", "twelve"], sampling_topk=5, seed=3, num_hypotheses=2,
                                                 beam_size=1)]
    assert tr.translate("seven", sampling_topk=0, seed=1) == tr.translate("seven", sampling_topk=0, seed=1, beam_size=1)
    with pytest.raises(OptionError, match=r"^sampling \(sampling_topk=5\) needs beam_size=1, got beam_size=4$"):
        tr.translate_batch(["seven"], sampling_topk=5, beam_size=4)
    # over a package's generation defaults too (a converted model's num_beams): the call samples, beam size 1
    assert with_defaults({"sampling_topk": 5}, {"beam_size": 6})["beam_size"] == 1
    assert with_defaults({"sampling_topk": 5, "beam_size": 6}, {})["beam_size"] == 6
    assert with_defaults({}, {"beam_size": 6}) == {"beam_size": 6}
    # a server request: its options are taken, its job decodes one row per text and sample
    assert request_options({"sampling_topk": 5}) == {"sampling_topk": 5}
    scheduler = ContinuousScheduler(tr)
    assert scheduler.rows_of(["seven", "twelve"], {"sampling_topk": 5}) == 2
    job = scheduler.submit(TRANSLATE, ["seven", "twelve"], {"sampling_topk": 5, "seed": 3, "num_hypotheses": 2})
    while not job.future.done():
        scheduler.turn(block=False)
    assert [r.token_ids for r in job.future.result(0)] == [r.token_ids for r in sampled]
    # the command line
    source = tmp_path / "in.txt"
    source.write_text("seven\ntwelve\n")
    assert main(["translate", MODEL, "--input", str(source), "--sampling-topk", "5", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert out == "".join(r.hypotheses[0] + "\n" for r in tr.translate_batch(["seven", "twelve"], sampling_topk=5,
                                                                            seed=3))
