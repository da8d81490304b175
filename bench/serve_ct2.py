"""CTranslate2 behind `seq2onnx serve`'s HTTP front: the best server a user could build on 2 cores (bench/serve.py).

    python -m bench.serve_ct2 PACKAGE --ct2 CT2_DIR --compute-type int8 --inter-threads 2 --intra-threads 1 --port P

CTranslate2 has no server and cannot add a sentence to a running batch, so its best serving setup is a dynamic
batcher (Triton's idea) in front of its asynchronous `translate_batch`: CT2Scheduler is our DynamicScheduler (the
same collection for up to --max-wait-ms and grouping by options) whose batches go to
`ctranslate2.Translator.translate_batch(asynchronous=True)`. A new batch is collected only once one of its
inter_threads workers is free, so requests that arrive while every worker decodes wait in the queue and form the
next, larger batch (rather than a queue of small batches inside CTranslate2). inter_threads=2 x intra_threads=1
decodes two batches at once on one core each; inter_threads=1 x intra_threads=2 one batch on both cores.

Only decoding differs from our servers: texts are checked and tokenized by our Translator of the same model
(prepare_batch: ids, then CTranslate2's token strings of them) and the results built by it (batch_results, from the
ids CTranslate2 returns, as Hypothesis objects). That Translator is opened without its ONNX engine (text_side), so
the server's memory holds CTranslate2's model alone. It serves /v1/translate and LibreTranslate's /translate;
streams and scores need our engine and answer an error, and so do target_prefix and constraints.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional

if __package__ in (None, ""):          # run as a script: python bench/serve_ct2.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seq2onnx.runtime.decode.decoding import step_limits  # noqa: E402
from seq2onnx.runtime.package.manifest import read_package  # noqa: E402
from seq2onnx.runtime.decode.search import Hypothesis, normalize  # noqa: E402
from seq2onnx.runtime.serve.continuous import BATCHING_KEYWORDS  # noqa: E402
from seq2onnx.runtime.serve.scheduler import PER_TEXT, DynamicScheduler, Job  # noqa: E402
from seq2onnx.runtime.translator import Translator  # noqa: E402

# our DecodingOptions passed on to CTranslate2's translate_batch under the same names
SAME_NAMES = ("beam_size", "num_hypotheses", "length_penalty", "min_decoding_length", "repetition_penalty",
              "no_repeat_ngram_size", "sampling_topk", "sampling_topp", "sampling_temperature")


def text_side(package_dir: str) -> Translator:
    """Our Translator of the package without its ONNX engine: prepare_batch and batch_results read only the package
    (tokenizer, detokenizer, config, generation defaults). A call that needs the engine (a stream, a score, the
    attention) raises AttributeError, which the server answers as that request's error."""
    translator = Translator.__new__(Translator)
    translator.package = read_package(package_dir)
    translator.config = translator.package.config
    translator.device, translator.variant = "cpu", "fp32"
    translator.tokenizer = translator.package.tokenizer
    translator.detokenizer = translator.package.detokenizer
    return translator


class CT2Scheduler(DynamicScheduler):
    """DynamicScheduler's batches decoded by CTranslate2's asynchronous translate_batch (module doc)."""

    policy = "ctranslate2"

    def __init__(self, translator: Translator, ct2_dir: str, compute_type: str, inter_threads: int,
                 intra_threads: int, max_queue: int = 256, max_batch_rows: int = 256, name: str = "model",
                 max_wait_ms: float = 5.0):
        import ctranslate2

        self.ct2 = ctranslate2.Translator(ct2_dir, device="cpu", compute_type=compute_type,
                                          inter_threads=inter_threads, intra_threads=intra_threads)
        # CTranslate2 speaks token strings: its own vocabulary maps our ids to them and back
        self.vocabulary: List[str] = json.loads((Path(ct2_dir) / "shared_vocabulary.json").read_text())
        self.ids = {token: i for i, token in enumerate(self.vocabulary)}
        self.free = threading.Semaphore(inter_threads)         # CTranslate2 workers not decoding a batch of ours
        self.waiters = ThreadPoolExecutor(inter_threads, thread_name_prefix="ct2-results")
        self.inter_threads = inter_threads
        self.rows_lock = threading.Lock()
        super().__init__(translator, max_queue, max_batch_rows, name, max_wait_ms)

    def take(self, max_jobs: Optional[int] = None, max_rows: Optional[int] = None,
             timeout: Optional[float] = None, block: bool = True) -> List[Job]:
        if timeout is None and block:       # DynamicScheduler.run's first take of a batch: once a worker is free
            with self.free:
                pass
        return super().take(max_jobs, max_rows, timeout, block)

    def run(self) -> None:
        super().run()
        for _ in range(self.inter_threads):                     # closed: the batches in flight finish first
            self.free.acquire()

    def run_translate(self, jobs: List[Job], options: Dict[str, Any]) -> None:
        """Jobs of equal options: each prepared on its own (its error is its own), their sources in one
        asynchronous translate_batch per step limit; a waiter thread resolves them."""
        ready = []
        for job in jobs:
            if not job.live:
                self._drop(job)
                continue
            try:
                if any(job.options.get(key) is not None for key in PER_TEXT):
                    raise ValueError(f"the CTranslate2 bench server takes no {' or '.join(PER_TEXT)}")
                ready.append((job, self.translator.prepare_batch(
                    job.texts, **{k: v for k, v in job.options.items() if k not in BATCHING_KEYWORDS})))
            except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
                self.fail(job, e)
        if not ready:
            return
        decode = ready[0][1].decode_options
        sources = [s for _, request in ready for s in request.sources]
        if not sources:                                         # blank texts only: nothing to decode
            self._resolve(ready, [])
            return
        limits = step_limits(sources, decode, self.translator.config)       # [sources]
        suppress = decode.suppress_ids or (self.translator.config.pad_id, self.translator.config.bos_id)
        kwargs = {name: getattr(decode, name) for name in SAME_NAMES}
        kwargs.update(return_scores=True, suppress_sequences=[[self.vocabulary[i]] for i in suppress])
        batches = []                                            # (source indices, CTranslate2's async results)
        self.free.acquire()
        try:
            for limit in sorted(set(limits.tolist())):
                index = [i for i, x in enumerate(limits) if x == limit]
                batches.append((index, self.ct2.translate_batch(
                    [[self.vocabulary[t] for t in sources[i]] for i in index], max_decoding_length=int(limit),
                    asynchronous=True, **kwargs)))
        except Exception as e:  # noqa: BLE001
            self.free.release()
            for job, _ in ready:
                self.fail(job, e)
            return
        rows = sum(j.rows for j, _ in ready)
        with self.rows_lock:
            self.running_rows += rows
        self.waiters.submit(self._complete, ready, batches, len(sources), limits, decode.length_penalty, rows)

    def _complete(self, ready, batches, n: int, limits, length_penalty: float, rows: int) -> None:
        """A waiter thread: CTranslate2's results as Hypothesis lists, then each job's TranslationResults."""
        try:
            hyps: List[Any] = [None] * n
            for index, results in batches:
                for i, result in zip(index, results):
                    out = result.result()
                    hyps[i] = [Hypothesis(ids, score, normalize(score, len(ids), length_penalty),
                                          finished=bool(len(ids) < limits[i]))
                               for ids, score in ((([self.ids[t] for t in h]), s)
                                                  for h, s in zip(out.hypotheses, out.scores))]
            self._resolve(ready, hyps)
        except Exception as e:  # noqa: BLE001
            for job, _ in ready:
                self.fail(job, e)
        finally:
            with self.rows_lock:
                self.running_rows -= rows
            self.free.release()

    def _resolve(self, ready, hyps: List[Any]) -> None:
        start = 0
        for job, request in ready:
            mine = hyps[start:start + len(request.sources)]
            start += len(request.sources)
            if not job.live:
                self._drop(job)
                continue
            try:
                results = self.translator.batch_results(request, mine)
            except Exception as e:  # noqa: BLE001
                self.fail(job, e)
                continue
            self.finish_translations(job, results)


def main(argv=None) -> int:
    import uvicorn

    from seq2onnx.runtime.serve.app import create_app
    from seq2onnx.runtime.serve.service import Settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("package", help="our package of the model (tokenization and results)")
    ap.add_argument("--ct2", required=True, help="the CTranslate2 model folder (bench/ct2_convert.py)")
    ap.add_argument("--compute-type", default="int8", choices=["int8", "float32"])
    ap.add_argument("--inter-threads", type=int, default=2)
    ap.add_argument("--intra-threads", type=int, default=1)
    ap.add_argument("--max-wait-ms", type=float, default=5.0)
    ap.add_argument("--max-batch-rows", type=int, default=256)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args = ap.parse_args(argv)
    name = Path(args.package).name                              # as `seq2onnx serve` names a model
    scheduler = CT2Scheduler(text_side(args.package), args.ct2, args.compute_type, args.inter_threads,
                             args.intra_threads, max_batch_rows=args.max_batch_rows, name=name,
                             max_wait_ms=args.max_wait_ms).start()
    app = create_app({name: scheduler}, Settings())
    uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", access_log=False,
                                  lifespan="on")).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
