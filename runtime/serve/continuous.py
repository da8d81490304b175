"""Continuous batching: sentences join the running decoder batch at the next step, greedy and beam alike.

One loop per model (the Scheduler's worker thread). Before every decoder step it admits waiting jobs, up to
max_batch_rows decoder rows: their texts are checked and tokenized as translate_batch does them
(Translator.prepare_batch), encoded (a few encoder runs of similar source lengths: decoding.py encoder_runs), and their
rows appended to the running batch (decoding.py RunningBatch, over decoder_state.py's DecoderState: extend); the rows
of jobs that end leave places that the last rows take (DecoderState: place_rows), so few rows move. Then one decoder
step runs every row of every job; each job's own search (greedy, beam, sampling: decoding.py Decoding) advances on its
own rows with its own options and step count, and the rows of a job that finished, was cancelled or passed its deadline
leave at once (DecoderState.keep). Each row carries its own position (decoder step contract 3, graph_io.py). Greedy
(and sampling) jobs share one batch, with a cross K/V row per row; beam jobs of beam size K share another, whose K rows
of a sentence share its cross K/V row; and each of those is split by length class (the cache capacity a job's longest
sentence can reach, from its step limit), so that a short sentence's step neither attends over a long one's cache
positions nor pads its cross K/V to a long source, and a batch's row copies (rows joining and leaving) stay small. The
loop steps each batch in turn (one decoder run per batch and step).

A package whose decoder step takes one position for all rows (manifest format before 4) cannot take rows into a
batch that has stepped: there, jobs that arrive while a batch runs start a batch of their own (a cohort), and each
loop iteration steps every cohort once: batches grouped by step.

A job's answer is translate_batch's for the same texts and options: the same preparation, the same Decoding per
request, the same results (Translator.batch_results); only the rows it shares a step with differ.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..constraints import split_work
from ..decoding import Decoding, RunningBatch, TextStream, step_limits
from ..search import BeamSearch
from ..options import Arg, OptionError
from ..results import TranslationResult
from .scheduler import NOT_STREAMED, SCORE, STREAM, TRANSLATE, Job, Scheduler

# the shortest length class, in cache positions: jobs that can run at most this many steps share a batch
MIN_LENGTH_CLASS = 16

# translate_batch's keywords the scheduler sets itself (it batches), for a job's prepare_batch
BATCHING_KEYWORDS = ("max_batch_size", "batch_type")


class _Running:
    """A job in the batch: its prepared request and where its sources decode, as (Decoding, the request's source
    indices, their indices in that Decoding) parts: one part, or a few when its constraints are much work
    (constraints.split_work); a Decoding may hold other jobs' sources too (jobs of equal options admitted
    together); and for a stream its TextStream."""

    def __init__(self, job: Job, request: Any, parts: List[Tuple[Decoding, List[int], List[int]]],
                 stream: Optional[TextStream] = None):
        self.job, self.request, self.parts, self.stream = job, request, parts, stream

    @property
    def done(self) -> bool:
        """Every source of the job has left its Decoding (the Decoding may go on with other jobs' sources)."""
        return all(not set(mine).intersection(d.active()) for d, _, mine in self.parts)

    @property
    def decodings(self) -> List[Decoding]:
        return [d for d, _, _ in self.parts]

    def hypotheses(self) -> List[Any]:
        hyps: List[Any] = [None] * len(self.request.sources)
        for d, theirs, mine in self.parts:
            for i, j in zip(theirs, mine):
                hyps[i] = d.hypotheses_of(j)
        return hyps


class ContinuousScheduler(Scheduler):
    policy = "continuous"

    def __init__(self, translator: Any, max_queue: int = 256, max_batch_rows: int = 256, name: str = "model",
                 min_length_class: int = MIN_LENGTH_CLASS):
        super().__init__(translator, max_queue, max_batch_rows, name)
        self.min_length_class = min_length_class        # the shortest length class (_length_class)
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
        """Prepare each job (one-line errors fail that job alone), decode the sources of jobs with equal options in
        one Decoding (one search over them all, each job finishing when its own sources have), and add the rows of
        all (RunningBatch.add: encoder runs by source length)."""
        new: List[Decoding] = []
        merged: Dict[Any, List[Tuple[Job, Any]]] = {}
        for job in jobs:
            if job.kind == SCORE:
                self.run_score(job)
                continue
            try:
                request = self._request(job)
            except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
                self.fail(job, e)
                continue
            key = self._merge_key(job, request)
            if key is None:
                new += self._start(self._alone(job, request))
            else:
                merged.setdefault(key, []).append((job, request))
        for group in merged.values():
            new += self._start(*self._together(group))
        by_group: Dict[Tuple[int, int], List[Decoding]] = {}
        for d in new:
            by_group.setdefault(self._group_of(d), []).append(d)
        for group, decodings in by_group.items():
            cohort = next((c for c in self.cohorts if c.key == group and c.can_add()), None)
            if cohort is None:
                cohort = RunningBatch(self.translator.engine, self.translator.config)
                cohort.key = group
                self.cohorts.append(cohort)
            elif cohort.state is not None and cohort.state.past is not None:
                self.joined_running += len({id(r) for r in self.running
                                            if any(d in decodings for d in r.decodings)})
            cohort.add(decodings, share_cross=group[0] > 1)
        self._count_rows()

    def _group_of(self, d: Decoding) -> Tuple[int, int]:
        """The batch a Decoding's rows join: (rows per cross row, length class). Beam searches of beam size K share a
        batch whose K rows of a sentence share its cross K/V (when the graph takes them per sentence: a quarter of
        the cross K/V at beam 4); greedy and sampling rows (1) another, with a cross K/V row per row. Each batch
        steps in turn: one decoder run per batch and step."""
        k = d.search.k if isinstance(d.search, BeamSearch) and self.translator.engine.cross_per_sentence else 1
        return k, self._length_class(d.max_steps)

    def _length_class(self, steps: int) -> int:
        """The cache capacity a sentence of at most `steps` decoder steps can reach (the engine's capacity rule),
        at least min_length_class."""
        return max(self.min_length_class, self.translator.engine.capacity_for(steps - 1, 0))

    def _request(self, job: Job) -> Any:
        options = {k: v for k, v in job.options.items() if k not in BATCHING_KEYWORDS}
        if job.kind == STREAM:
            options = {k: v for k, v in options.items() if k not in NOT_STREAMED}
            if options.get("num_hypotheses", 1) != 1:
                raise OptionError("a stream is one hypothesis: ", Arg("num_hypotheses"), " must be 1")
        return self.translator.prepare_batch(job.texts, **options)

    def _merge_key(self, job: Job, request: Any) -> Any:
        """Jobs with equal keys share one Decoding: translations (not streams) without constraints or sampling
        (a sample's draws would not depend on the batch, but its search is per call), of equal decoding options
        and length class."""
        if job.kind != TRANSLATE or request.phrases is not None or request.decode_options.sampling:
            return None
        limits = step_limits(request.sources, request.decode_options, self.translator.config)
        return request.decode_options, self._length_class(int(limits.max()) if len(limits) else 0)

    def _alone(self, job: Job, request: Any) -> _Running:
        config, phrases = self.translator.config, request.source_phrases
        everything = list(range(len(request.sources)))
        groups = [everything] if phrases is None or not any(phrases) else \
            split_work(everything, phrases, request.decode_options.beam_size)
        parts = []
        for group in groups:
            d = Decoding(config, [request.sources[i] for i in group], request.decode_options,
                         None if request.prefixes is None else [request.prefixes[i] for i in group],
                         constraints=None if phrases is None else [phrases[i] for i in group])
            parts.append((d, group, list(range(len(group)))))
        stream = TextStream(self.translator.detokenize) if job.kind == STREAM else None
        return _Running(job, request, parts, stream)

    def _together(self, group: List[Tuple[Job, Any]]) -> List[_Running]:
        """One Decoding over the sources of jobs of equal options."""
        sources = [x for _, r in group for x in r.sources]
        prefixed = any(r.prefixes is not None for _, r in group)
        prefixes = [p for _, r in group for p in (r.prefixes or [[] for _ in r.sources])] if prefixed else None
        d = Decoding(self.translator.config, sources, group[0][1].decode_options, prefixes)
        out, first = [], 0
        for job, request in group:
            n = len(request.sources)
            out.append(_Running(job, request, [(d, list(range(n)), list(range(first, first + n)))]))
            first += n
        return out

    def _start(self, *running: _Running) -> List[Decoding]:
        """Jobs with nothing to decode (blank texts, 0-step limits) finish now; the others join `running`. -> their
        Decodings that decode (once each)."""
        new: List[Decoding] = []
        for r in running:
            if r.done:
                self._finish(r)
                continue
            self.running.append(r)
            new += [d for d in r.decodings if not d.done and d not in new]
        return new

    def _drop_gone(self) -> None:
        """Jobs whose client went away or whose deadline passed: their rows leave at this step."""
        for running in [r for r in self.running if not r.job.live]:
            for d in running.decodings:            # a Decoding shared with live jobs decodes on for them
                if any(d in r.decodings for r in self.running):
                    continue
                for cohort in list(self.cohorts):
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
                cohort.decodings, cohort.places, cohort.state = [], [], None
            if not cohort.decodings:
                self.cohorts.remove(cohort)
        for running in list(self.running):
            if running.stream is not None and not running.done:
                piece = running.stream.update(running.decodings[0].search)      # a stream decodes alone
                if piece:
                    self.emit(running.job, piece)
            if running.done:
                self.running.remove(running)
                self._finish(running)
        self._count_rows()

    def _finish(self, running: _Running) -> None:
        job, request = running.job, running.request
        hyps = running.hypotheses()
        try:
            if running.stream is not None:
                results = self._stream_result(running, hyps)
            else:
                results = self.translator.batch_results(request, hyps)
        except Exception as e:  # noqa: BLE001
            self.fail(job, e)
            return
        self.finish_translations(job, results)

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
