"""Batch invariance under continuous batching: thousands of concurrent /v1/translate requests of mixed lengths and
options against `seq2onnx serve numbers-en-de` (a real subprocess on 127.0.0.1), each answer compared with
Translator.translate_batch([its text]) with the same options, sequentially.

Rows share decoder steps with whatever else is running, so their float32 sums run in other kernels' orders: tokens
are compared tie-aware and scores within bounds derived from the arithmetic (tests/agreement.py), never within a
figure measured on one CPU. int8 quantizes activations per tensor over the whole batch (agreement.py: another batch,
another scale), which the int8 judge bounds cover.
"""
from __future__ import annotations

import asyncio
import random
from typing import Any, Dict, List

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra")
pytest.importorskip("starlette", reason="the serve extra: pip install '.[serve]'")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, hypotheses  # noqa: E402
from seq2onnx.runtime import Translator  # noqa: E402
from seq2onnx.runtime.engine.session import cuda_status  # noqa: E402
from seq2onnx.runtime.package.shipped_models import resolve_model_dir  # noqa: E402
from tests.runtime.serve.test_serve import MODEL, Server  # noqa: E402

REQUESTS = 1000
CONCURRENCY = 200
OPTIONS: List[Dict[str, Any]] = [
    {"beam_size": 1},
    {"beam_size": 4},
    {"beam_size": 4, "num_hypotheses": 2, "length_penalty": 0.6},
    {"beam_size": 2, "max_decoding_length": 4},             # cut by its limit, mid-batch
    {"beam_size": 1, "min_decoding_length": 6},
    {"beam_size": 3, "num_hypotheses": 3, "no_repeat_ngram_size": 2},
]
UNITS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "fifteen", "twenty", "thirty-four", "fifty", "seventy-seven", "ninety-nine"]


def _text(rng: random.Random) -> str:
    """Numbers of 1 to ~10 words, so rows of one step end at different steps and sources differ in length."""
    parts = [rng.choice(UNITS)]
    if rng.random() < 0.6:
        parts = [rng.choice(UNITS[:9]), "hundred", "and"] + parts
    if rng.random() < 0.4:
        parts = [rng.choice(UNITS), "thousand"] + parts
    return " ".join(parts)


async def _send_all(url: str, work: List[Any]) -> List[Dict[str, Any]]:
    # keep-alive shorter than uvicorn's 5 s: a connection the server closes as idle is never reused
    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY, keepalive_expiry=2)
    gate = asyncio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        async def one(text: str, options: Dict[str, Any]) -> Dict[str, Any]:
            async with gate:
                r = await client.post("/v1/translate", json={"model": MODEL, "texts": [text], "return_scores": True,
                                                              **options})
            assert r.status_code == 200, r.text
            return r.json()["results"][0]
        return await asyncio.gather(*(one(t, o) for t, o in work))


CUDA_OK, CUDA_REASON = cuda_status()


@pytest.mark.parametrize("device, compute_type, flags", [
    ("cpu", "float32", ()),
    # two schedulers over the one model, a thread each (runtime/serve/pool.py)
    ("cpu", "int8", ("--instances", "2", "--intra-threads", "1")),
    # the CUDA engine's rows joining and leaving (its DecoderState), on a machine with a GPU
    pytest.param("cuda", "float32", (),
                 marks=pytest.mark.skipif(not CUDA_OK, reason=f"no CUDA device: {CUDA_REASON}"))])
def test_continuous_batching_answers_as_translate_batch_alone(tmp_path, device, compute_type, flags):
    rng = random.Random(7)
    work = [(_text(rng), rng.choice(OPTIONS)) for _ in range(REQUESTS)]
    server = Server(tmp_path, "--device", device, "--compute-type", compute_type, "--max-queue", str(REQUESTS),
                    "--max-batch-rows", "128", *flags)
    try:
        got = asyncio.run(_send_all(server.url, work))
        metrics = {s.name: s.value for f in text_string_to_metric_families(httpx.get(server.url + "/metrics").text)
                   for s in f.samples if s.labels.get("model") == MODEL}
    finally:
        server.stop()
    # continuous batching really happened: requests joined batches that had stepped
    assert metrics["seq2onnx_joined_running_total"] > REQUESTS / 10, metrics
    assert metrics["seq2onnx_decoder_steps_total"] < REQUESTS * 5, metrics        # rows shared steps

    tr = Translator(MODEL, device=device, compute_type=compute_type, intra_threads=1)
    graph = resolve_model_dir(MODEL) / "decoder_step.onnx"
    bounds = Float32Bounds.of_graph(graph, int8=compute_type == "int8")
    judge = engine_judge(tr.engine, tr.config)
    for (text, options), answer in zip(work, got):
        expected = tr.translate_batch([text], return_scores=True, **options)[0]
        mine = hypotheses(answer["token_ids"], answer["scores"], answer["normalized_scores"], answer["finished"])
        theirs = hypotheses(expected.token_ids, expected.scores, expected.normalized_scores, expected.finished)
        assert_same_decodes(bounds, judge, [tr.source_ids(text)], [mine], [theirs],
                            greedy=options["beam_size"] == 1, eos_id=tr.config.eos_id,
                            length_penalty=options.get("length_penalty", 1.0), what=f"{text!r} {options}")
        if mine and [h.tokens for h in mine] == [h.tokens for h in theirs]:
            assert answer["hypotheses"] == expected.hypotheses
