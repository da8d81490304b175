"""Continuous batching: sentences join the running decoder batch at the next step, greedy and beam alike.

One loop per model (the Scheduler's worker thread). Before every decoder step it admits waiting jobs, up to
max_batch_rows decoder rows: their texts are checked and tokenized as translate_batch does them
(Translator.prepare_batch), encoded in one encoder run, and their rows appended to the running batch
(decoding.py RunningBatch, over decoder_state.py's DecoderState: extend). Then one decoder step runs every row of
every job; each job's own search (greedy, beam, sampling: decoding.py Decoding) advances on its own rows with its own
options and step count, and the rows of a job that finished, was cancelled or passed its deadline leave at once
(DecoderState.keep). Greedy and beam jobs share one batch: each row carries its own position (decoder step contract
3, graph_io.py) and its own cross K/V copy.

A package whose decoder step takes one position for all rows (manifest format before 4) cannot take rows into a
batch that has stepped: there, jobs that arrive while a batch runs start a batch of their own (a cohort), and each
loop iteration steps every cohort once: batches grouped by step.

A job's answer is translate_batch's for the same texts and options: the same preparation, the same Decoding per
request, the same results (Translator.batch_results); only the rows it shares a step with differ.
"""
from __future__ import annotations

from typing import Any, List, Optional

from ..constraints import split_work
from ..decoding import Decoding, RunningBatch, TextStream
from ..options import Arg, OptionError
from ..results import TranslationResult
from .scheduler import NOT_STREAMED, SCORE, STREAM, Job, Scheduler

# translate_batch's keywords the scheduler sets itself (it batches), for a job's prepare_batch
BATCHING_KEYWORDS = ("max_batch_size", "batch_type")


class _Running:
    """A job in the batch: its prepared request and the Decodings of its sources (one, or a few when its
    constraints are much work: constraints.split_work), and for a stream its TextStream."""

    def __init__(self, job: Job, request: Any, parts: List[List[int]], decodings: List[Decoding],
                 stream: Optional[TextStream]):
        self.job, self.request, self.parts, self.decodings, self.stream = job, request, parts, decodings, stream

    @property
    def done(self) -> bool:
        return all(d.done for d in self.decodings)


class ContinuousScheduler(Scheduler):
    policy = "continuous"

    def __init__(self, translator: Any, max_queue: int = 256, max_batch_rows: int = 256, name: str = "model"):
        super().__init__(translator, max_queue, max_batch_rows, name)
        self.cohorts: List[RunningBatch] = []           # one with decoder contract 3; more only with older ones
        self.running: List[_Running] = []
        self.joined_running = 0                          # jobs admitted into a batch that had stepped
        self.decoder_steps = 0

    # --- the loop ----------------------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            idle = not self.running
            jobs: List[Job] = []
            room = self.max_batch_rows - self.running_rows
            if room > 0 or idle:
                jobs = self.take(max_rows=max(room, 1), block=idle, timeout=None if idle else 0)
            if not jobs and idle:
                if self.drained:
                    return
                continue
            self._admit(jobs)
            self._drop_gone()
            if self.running:
                self._step()

    def _admit(self, jobs: List[Job]) -> None:
        """Prepare each job (one-line errors fail that job alone) and add the rows of all in one encoder run."""
        new: List[Decoding] = []
        for job in jobs:
            if job.kind == SCORE:
                self.run_score(job)
                continue
            try:
                running = self._prepare(job)
            except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
                self.fail(job, e)
                continue
            if running.done:                        # nothing to decode (blank texts, a 0-step limit)
                self._finish(running)
                continue
            self.running.append(running)
            new += [d for d in running.decodings if not d.done]
        if not new:
            return
        if not self.cohorts or not self.cohorts[-1].can_add():
            self.cohorts.append(RunningBatch(self.translator.engine, self.translator.config))
        cohort = self.cohorts[-1]
        if cohort.state is not None and cohort.state.past is not None:
            self.joined_running += len({id(r) for r in self.running if any(d in new for d in r.decodings)})
        cohort.add(new)
        self._count_rows()

    def _prepare(self, job: Job) -> _Running:
        options = {k: v for k, v in job.options.items() if k not in BATCHING_KEYWORDS}
        stream = None
        if job.kind == STREAM:
            options = {k: v for k, v in options.items() if k not in NOT_STREAMED}
            if options.get("num_hypotheses", 1) != 1:
                raise OptionError("a stream is one hypothesis: ", Arg("num_hypotheses"), " must be 1")
            stream = TextStream(self.translator.detokenize)
        request = self.translator.prepare_batch(job.texts, **options)
        config, phrases = self.translator.config, request.source_phrases
        everything = list(range(len(request.sources)))
        parts = [everything] if phrases is None or not any(phrases) else \
            split_work(everything, phrases, request.decode_options.beam_size)
        decodings = [Decoding(config, [request.sources[i] for i in part], request.decode_options,
                              None if request.prefixes is None else [request.prefixes[i] for i in part],
                              constraints=None if phrases is None else [phrases[i] for i in part])
                     for part in parts]
        return _Running(job, request, parts, decodings, stream)

    def _drop_gone(self) -> None:
        """Jobs whose client went away or whose deadline passed: their rows leave at this step."""
        for running in [r for r in self.running if not r.job.live]:
            for cohort in list(self.cohorts):
                for d in running.decodings:
                    if d in cohort.decodings:
                        cohort.drop(d)
                if not cohort.decodings:
                    self.cohorts.remove(cohort)
            self.running.remove(running)
            self._drop(running.job)

    def _step(self) -> None:
        for cohort in list(self.cohorts):
            try:
                self.decoder_steps += 1
                cohort.step()
            except Exception as e:  # noqa: BLE001 - a broken graph: every job of the cohort gets the error
                for running in [r for r in self.running if any(d in cohort.decodings for d in r.decodings)]:
                    self.running.remove(running)
                    self.fail(running.job, e)
                cohort.decodings, cohort.state = [], None
            if not cohort.decodings:
                self.cohorts.remove(cohort)
        for running in list(self.running):
            if running.stream is not None and not running.done:
                piece = running.stream.update(running.decodings[0].search)
                if piece:
                    self.emit(running.job, piece)
            if running.done:
                self.running.remove(running)
                self._finish(running)
        self._count_rows()

    def _finish(self, running: _Running) -> None:
        job, request = running.job, running.request
        hyps: List[Any] = [None] * len(request.sources)
        for part, d in zip(running.parts, running.decodings):
            for i, h in zip(part, d.hypotheses()):
                hyps[i] = h
        try:
            if running.stream is not None:
                results = self._stream_result(running, hyps)
            else:
                results = self.translator.batch_results(request, hyps)
        except Exception as e:  # noqa: BLE001
            self.fail(job, e)
            return
        self.count_tokens(sum(len(r.token_ids[0]) for r in results if r.token_ids))
        self.finish(job, results)

    def _stream_result(self, running: _Running, hyps: List[Any]) -> List[TranslationResult]:
        if not hyps:                                            # a blank text: the empty translation
            return [TranslationResult([""], [[]], [0.0], [0.0], finished=[True])]
        best = hyps[0][0]
        piece = running.stream.final(best.tokens)
        if piece:
            self.emit(running.job, piece)
        return [TranslationResult([running.stream.emitted], [list(best.tokens)], [best.score],
                                  [best.normalized_score], finished=[best.finished])]

    def _count_rows(self) -> None:
        self.running_rows = sum(c.rows for c in self.cohorts)
