"""The Translator API on the exported tiny model: text in/out, batching, options, streaming,
compute types, devices and thread-safety."""
from __future__ import annotations

import json
import logging
import random
import shutil
import threading
import warnings

import pytest

from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge
from tests.fixtures_training import toy_pairs
from tests.limits import reference_max_length
from seq2onnx.runtime.errors import ModelPackageError, Seq2OnnxError
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.engine.session import cuda_status
from seq2onnx.runtime.translator import Translator, split_batches


@pytest.fixture(scope="module")
def translator(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def pairs():
    return toy_pairs(30, seed=2)          # the validation sentences of the tiny run


def test_translate_is_the_reference_greedy_decoding_as_text(translator, tiny_model, pairs):
    """Tokenize, decode, detokenize around exactly the PyTorch reference's tokens (not: around a model that
    learned well; that is the tiny_run fixture's own check)."""
    from seq2onnx.training import reference          # torch: imported here, as test_translator_memory.py's worker
                                                     # imports this module and must stay torch-free
    texts = [s for s, _ in pairs]
    eos = translator.config.eos_id
    sources = [translator.tokenizer.encode(t).ids + [eos] for t in texts]
    ref = reference.greedy_search(tiny_model, sources, max_length=reference_max_length(translator.config, sources))
    assert [translator.translate(t, beam_size=1) for t in texts] == [translator.detokenize(h.tokens) for h in ref]


def test_translate_batch_keeps_caller_order_across_batchings(translator, pairs):
    texts = [s for s, _ in pairs] + ["one", "two three four five six seven eight nine"]
    expected = [r.hypotheses for r in translator.translate_batch(texts, beam_size=2)]
    assert expected == [[translator.translate(t, beam_size=2)] for t in texts]
    for kw in (dict(max_batch_size=1), dict(max_batch_size=3), dict(max_batch_size=20, batch_type="tokens")):
        assert [r.hypotheses for r in translator.translate_batch(texts, beam_size=2, **kw)] == expected


def test_split_batches_sorts_and_splits():
    lengths = [5, 1, 3, 9, 2]
    assert split_batches(lengths, 2, "examples") == [[1, 4], [2, 0], [3]]
    assert split_batches(lengths, 8, "tokens") == [[1, 4], [2], [0], [3]]     # padded tokens: n * longest
    assert split_batches(lengths, 0, "examples") == [[1, 4, 2, 0, 3]]


def test_scores_and_nbest(translator, pairs):
    r = translator.translate_batch([pairs[1][0]], beam_size=4, num_hypotheses=3, return_scores=True,
                                   length_penalty=0.7)[0]
    assert len(r.hypotheses) == len(r.token_ids) == len(r.scores) == 3
    assert len(set(r.hypotheses)) == 3
    assert r.normalized_scores == sorted(r.normalized_scores, reverse=True)
    for ids, s, ns in zip(r.token_ids, r.scores, r.normalized_scores):
        assert ns == pytest.approx(s / (len(ids) + 1) ** 0.7)                   # EOS counts in the length
    plain = translator.translate_batch([pairs[1][0]])[0]
    assert plain.scores is None and plain.normalized_scores is None


def test_target_prefix_is_forced(translator, pairs):
    src = pairs[2][0]
    prefix = "null null"
    r = translator.translate_batch([src, src], target_prefix=[prefix, None])
    prefix_ids = translator.tokenizer.encode(prefix).ids
    assert r[0].token_ids[0][:len(prefix_ids)] == prefix_ids
    assert r[1].hypotheses[0] == translator.translate(src)
    assert translator.translate(src, target_prefix=prefix).startswith(prefix)


def test_max_input_length_truncates_with_warning(translator):
    text = " ".join(["seven"] * 30)
    with pytest.warns(UserWarning, match="max_input_length=5"):
        r = translator.translate_batch([text, "one"], max_input_length=5)
    assert r[0].truncated and not r[1].truncated
    with pytest.raises(ValueError, match="max_input_length"):
        translator.translate_batch(["one"], max_input_length=0)


def test_relative_length_limit(translator, pairs):
    for r in translator.translate_batch([s for s, _ in pairs[:5]], max_length_a=0.0, max_length_b=2):
        assert len(r.token_ids[0]) <= 2
    src = pairs[0][0]
    src_len = len(translator.tokenizer.encode(src).ids) + 1
    r = translator.translate_batch([src], max_length_a=0.5, max_length_b=0)[0]
    assert len(r.token_ids[0]) <= int(0.5 * src_len)


def test_a_runaway_stops_at_the_default_relative_limit_and_says_so(translator, pairs):
    """By construction, not by luck: EOS forbidden for 200 tokens makes every hypothesis a runaway. The default
    limit (max_length_a 3, max_length_b 10: Marian's length factor) stops it at 3 * source length + 10 steps,
    long before max_decoding_length 256, and TranslationResult.finished says it did not end."""
    assert (DecodingOptions().max_length_a, DecodingOptions().max_length_b) == (3.0, 10)
    texts = [s for s, _ in pairs[:3]] + ["eight"]
    src_lens = [len(translator.tokenizer.encode(t).ids) + 1 for t in texts]           # EOS included
    for beam_size in (1, 4):
        results = translator.translate_batch(texts, beam_size=beam_size, min_decoding_length=200)
        assert [len(r.token_ids[0]) for r in results] == [3 * n + 10 for n in src_lens]
        assert [r.finished for r in results] == [[False]] * len(texts)
    # off: only max_decoding_length limits
    [r] = translator.translate_batch(["eight"], beam_size=1, min_decoding_length=200, max_decoding_length=200,
                                     max_length_a=0.0, max_length_b=None)
    assert (len(r.token_ids[0]), r.finished) == (200, [False])
    # translations that end say so, blank inputs too
    assert all(r.finished == [True] for r in translator.translate_batch([s for s, _ in pairs[:5]] + [" "]))


def test_repetition_controls_change_nothing_they_should_not(translator, pairs):
    texts = [s for s, _ in pairs[:10]]
    for r in translator.translate_batch(texts, no_repeat_ngram_size=1, beam_size=2):
        ids = r.token_ids[0]
        assert len(ids) == len(set(ids))                                          # no token twice
    assert translator.translate_batch(texts, repetition_penalty=1.0)[0].hypotheses == \
        translator.translate_batch(texts)[0].hypotheses


@pytest.mark.parametrize("opts", [dict(beam_size=1), dict(beam_size=4),
                                  dict(beam_size=1, sampling_topk=0, sampling_temperature=1.5, seed=11)])
def test_generate_tokens_streams_the_translation(translator, pairs, opts):
    for src, _ in pairs[:6] + [("nine eight seven six five four three two", "")]:
        pieces = list(translator.generate_tokens(src, **opts))
        assert all(pieces)
        assert "".join(pieces) == translator.translate(src, **opts)
    greedy_pieces = list(translator.generate_tokens(pairs[3][0], beam_size=1))
    assert len(greedy_pieces) == len(translator.translate_batch([pairs[3][0]], beam_size=1)[0].token_ids[0])


def test_generate_tokens_rejects_nbest(translator):
    with pytest.raises(ValueError, match="num_hypotheses"):
        list(translator.generate_tokens("one", num_hypotheses=2))


def test_int8_variant_decodes_its_own_graphs(tiny_package, pairs, translator):
    """compute_type="int8" runs the int8 graphs: token-identical to decoding those files opened directly
    (export/parity.py's OnnxPair, the parity gate's own sessions): its few-rows step for one row, its step for
    five copies of the row (more than few_rows.max_rows; the copies quantize like the row alone, since int8
    quantizes activations per call and the rows that share a call change each other's results by a rounding)."""
    from seq2onnx.export import parity               # torch: see above
    tr8 = Translator(tiny_package, device="cpu", compute_type="int8")
    assert tr8.variant == "int8"
    few_rows = tr8.package.variants["int8"].few_rows         # None where onnxruntime < 1.22 exported it
    assert few_rows is None or few_rows.max_rows < 5
    bounds = Float32Bounds.of_graph(tiny_package / "decoder_step.onnx", int8=True)
    graphs = [(tiny_package / "decoder_step.int8.onnx", 5)] + ([(few_rows.decoder_step, 1)] if few_rows else [])
    for decoder, copies in graphs:
        pair = parity.OnnxPair(tiny_package / "encoder.int8.onnx", decoder, tr8.config)
        for src, _ in pairs[:10]:
            ids = tr8.tokenizer.encode(src).ids + [tr8.config.eos_id]
            [expected] = parity.onnx_greedy(pair, [ids])
            # copies of one sentence: the same quantization scales, other batch shapes (other kernel paths); the same
            # decode up to agreement.py's int8 bound, where they part a tie judged by the int8 engine teacher-forced
            got = tr8.translate_ids([ids] * copies, beam_size=1)
            assert_same_decodes(bounds, engine_judge(tr8.engine, tr8.config), [ids] * copies, got,
                                [[expected]] * copies, greedy=True, eos_id=tr8.config.eos_id, what=f"{src} x{copies}")


def test_compute_type_errors(tiny_package, tmp_path):
    with pytest.raises(Seq2OnnxError, match="CUDA only"):
        Translator(tiny_package, device="cpu", compute_type="float16")
    with pytest.raises(ValueError, match="compute_type"):
        Translator(tiny_package, device="cpu", compute_type="int4")
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_package, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    del manifest["variants"]["int8"]
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelPackageError, match=r"no int8 variant; it has fp32 \(float32\)"):
        Translator(pkg, device="cpu", compute_type="int8")


def test_bad_constructor_arguments(tiny_package):
    with pytest.raises(ValueError, match="intra_threads"):
        Translator(tiny_package, intra_threads=-1)
    with pytest.raises(ValueError, match="device"):
        Translator(tiny_package, device="tpu")


@pytest.mark.skipif(cuda_status()[0], reason="a usable GPU is present: the CUDA path is tested in runtime/engine/test_cuda.py")
def test_devices_without_gpu(tiny_package, caplog):
    with pytest.raises(Seq2OnnxError, match="device 'cuda' cannot be used"):
        Translator(tiny_package, device="cuda")
    with caplog.at_level(logging.INFO, logger="seq2onnx.runtime"):
        tr = Translator(tiny_package, device="auto")
    assert tr.device == "cpu"
    assert [r.getMessage() for r in caplog.records if "runs on cpu" in r.getMessage()]


def load_requests(n: int, seed: int):
    """n requests of mixed lengths (1..12 words, blank, unknown characters, over max_input_length) and
    options (greedy, beam, n-best, sampling with a seed, length limits, penalties, batching), as
    (kind, texts, options); kind "batch" is translate_batch, "stream" is generate_tokens."""
    rng = random.Random(seed)
    texts = [s for s, _ in toy_pairs(200, seed=seed, min_words=1, max_words=12)]
    texts += ["", "  ", "one \x00 two 😀", "三 four", " ".join(["seven"] * 40)]
    options = [dict(beam_size=1), dict(beam_size=4, num_hypotheses=2), dict(beam_size=2, length_penalty=0.5),
               dict(beam_size=1, sampling_topk=0, seed=5, num_hypotheses=2), dict(beam_size=1, sampling_topk=5,
               sampling_topp=0.8, sampling_temperature=0.7, seed=6), dict(beam_size=3, min_decoding_length=3,
               max_decoding_length=8), dict(beam_size=1, repetition_penalty=1.3, no_repeat_ngram_size=2),
               dict(beam_size=4, max_batch_size=2), dict(beam_size=2, max_batch_size=30, batch_type="tokens"),
               dict(beam_size=1, max_input_length=6), dict(beam_size=4, max_length_a=0.5, max_length_b=1)]
    requests = []
    for _ in range(n):
        if rng.random() < 0.15:
            requests.append(("stream", [rng.choice(texts)], dict(beam_size=rng.choice([1, 4]))))
        else:
            requests.append(("batch", rng.sample(texts, rng.randint(1, 6)), rng.choice(options)))
    return requests


def run_request(translator, request):
    kind, texts, options = request
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                                  # truncation warnings
        if kind == "stream":
            return ["".join(translator.generate_tokens(texts[0], **options))]
        return [(r.hypotheses, r.token_ids, r.truncated) for r in translator.translate_batch(texts, **options)]


def test_thread_safety(translator):
    """8 threads x 50 requests of mixed lengths and options share one Translator: every result equals
    the sequential run's, and no call fails."""
    requests = load_requests(400, seed=21)
    expected = [run_request(translator, r) for r in requests]
    got = [None] * len(requests)
    errors = []
    barrier = threading.Barrier(8)

    def work(worker):
        try:
            barrier.wait()
            for i in range(worker, len(requests), 8):
                got[i] = run_request(translator, requests[i])
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert sum(g is not None for g in got) == 400
    assert got == expected
    assert {r[0] for r in requests} == {"batch", "stream"} and len({str(r[2]) for r in requests}) >= 12


def test_a_call_decodes_in_the_cache_memory_the_last_call_left(tiny_package, pairs):
    """The engine keeps the cache memory of the call that ended last (cache_memory.py SpareMemory) and the next call
    decodes in it: the results are those of a Translator that never ran, after a bigger call left its longer,
    wider caches behind."""
    texts = [src for src, _ in pairs[:12]]
    fresh, used = (Translator(tiny_package, device="cpu", intra_threads=1) for _ in range(2))
    used.translate_batch(texts * 3, beam_size=4, num_hypotheses=4)               # 36 sentences x 4 beams
    n, sets = used.engine.spare._sets
    assert n == 2 * used.config.decoder_layers and all(len(s) == n for s in sets)
    for options in (dict(beam_size=4, num_hypotheses=2), dict(beam_size=1)):
        got = used.translate_batch(texts[:3], return_scores=True, **options)
        assert used.engine.spare._sets[1] is sets                               # the same memory, back again
        assert got == fresh.translate_batch(texts[:3], return_scores=True, **options)


# --- scoring (CTranslate2's score_batch) -----------------------------------------------------------
def test_score_of_a_translation_is_the_score_decoding_reported(translator, pairs):
    texts = [s for s, _ in pairs]
    for beam_size in (1, 4):
        results = translator.translate_batch(texts, beam_size=beam_size, num_hypotheses=min(beam_size, 2),
                                             return_scores=True)
        sources, targets, reported = [], [], []
        for text, r in zip(texts, results):
            for ids, score, finished in zip(r.token_ids, r.scores, r.finished):
                if finished:                                   # an unfinished hypothesis's score has no EOS
                    sources.append(translator.tokenizer.encode(text).ids + [translator.config.eos_id])
                    targets.append(ids)
                    reported.append(score)
        assert len(targets) >= len(texts)
        scored = translator.score_ids(sources, targets, max_batch_size=7)     # other batches than decoding's
        assert all(len(lp) == len(t) + 1 for lp, t in zip(scored, targets))
        assert max(abs(sum(lp) - s) for lp, s in zip(scored, reported)) < 1e-4


def test_score_batch_is_the_reference_log_probs(translator, tiny_model, pairs):
    import torch
    from seq2onnx.training.tokenizer import decoder_io
    results = translator.score_batch([s for s, _ in pairs], [t for _, t in pairs])
    eos = translator.config.eos_id
    worst = 0.0
    for (src, tgt), r in zip(pairs, results):
        s_ids = translator.tokenizer.encode(src).ids + [eos]
        t_ids = translator.tokenizer.encode(tgt).ids
        assert r.tokens == [translator.tokenizer.id_to_token(i) for i in t_ids] + ["</s>"]
        dec_in, labels = decoder_io(t_ids, translator.config.bos_id, eos)
        with torch.no_grad():
            logits = tiny_model(torch.tensor([s_ids]), torch.ones(1, len(s_ids), dtype=torch.long),
                                torch.tensor([dec_in]))
            want = torch.log_softmax(logits.float(), -1)[0, torch.arange(len(labels)), torch.tensor(labels)]
        worst = max(worst, float(abs(torch.tensor(r.log_probs) - want.double()).max()))
    assert worst < 1e-4


def test_score_batch_input_errors(translator):
    with pytest.raises(ValueError, match="one target per source"):
        translator.score_batch(["one two"], ["eins", "zwei"])
    with pytest.raises(TypeError, match="must be str"):
        translator.score_batch(["one"], [7])
    with pytest.raises(ValueError, match=r"targets\[0\] must hold 0\.\.511 ids, got 600"):
        translator.score_ids([[4, translator.config.eos_id]], [[4] * 600])
    long_target = " ".join(["eins"] * 2 * translator.config.max_positions)
    with pytest.warns(UserWarning, match="target 0 is longer than the model's"):
        r = translator.score_batch(["one"], [long_target])[0]
    assert len(r.log_probs) == translator.config.max_positions and r.tokens[-1] == "</s>"
