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

One job's fault is its own: its options were checked against the model before it was queued (Scheduler.check), and a
job that fails its preparation fails alone. A batch whose step (or rows joining) raises all the same goes whole, and
its jobs decode again from the start, each in a batch of its own, where only a job whose own rows fail gets the error
(_broken).
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from ..decode.constraints import split_work
from ..decode.decoding import Decoding, RunningBatch, TextStream, step_limits
from ..decode.search import BeamSearch
from ..options import DecodingOptions
from ..results import TranslationResult
from ..text_input import TranslateRequest
from .scheduler import SCORE, STREAM, TRANSLATE, Job, Scheduler

if TYPE_CHECKING:
    from ..translator import Translator

# the shortest length class, in cache positions: jobs that can run at most this many steps share a batch
MIN_LENGTH_CLASS = 16


class _Running:
    """A job in the batch: its prepared request and where its sources decode, as (Decoding, the request's source
    indices, their indices in that Decoding) parts: one part, or a few when its constraints are much work
    (constraints.split_work); a Decoding may hold other jobs' sources too (jobs of equal options admitted
    together); and for a stream its TextStream."""

    def __init__(self, job: Job, request: TranslateRequest, parts: List[Tuple[Decoding, List[int], List[int]]],
                 stream: Optional[TextStream] = None):
        self.job, self.request, self.parts, self.stream = job, request, parts, stream
        self.alone = False          # it decodes in batches of its own (a batch it shared failed)

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

    def __init__(self, translator: Translator, max_queue: int = 256, max_batch_rows: int = 256, name: str = "model",
                 min_length_class: int = MIN_LENGTH_CLASS):
        super().__init__(translator, max_queue, max_batch_rows, name)
        self.min_length_class = min_length_class        # the shortest length class (_length_class)
        self.cohorts: List[RunningBatch] = []           # one with decoder contract 3; more only with older ones
        self.running: List[_Running] = []
        self._alone_keys = itertools.count()             # the keys of batches of one job's own (_broken)

    # --- the loop ----------------------------------------------------------------------------------------
    def run(self) -> None:
        while self.turn():
            pass

    def turn(self, block: bool = True) -> bool:
        """One pass of the loop: admit waiting jobs while there is room (waiting for one while nothing runs, when
        `block`), let the rows of jobs gone leave, step every batch once. -> False once closed and drained."""
        idle = not self.running
        jobs: List[Job] = []
        room = self.max_batch_rows - self.running_rows
        if room > 0 or idle:
            jobs = self.take(max_rows=max(room, 1), block=idle and block, timeout=None if idle else 0)
        if not jobs and idle:
            return not self.drained
        self._admit(jobs)
        self._drop_gone()
        if self.running:
            self._step()
        return True

    def _admit(self, jobs: List[Job]) -> None:
        """Prepare each job (one-line errors fail that job alone), decode the sources of jobs with equal options in
        one Decoding (one search over them all, each job finishing when its own sources have), and add the rows of
        all (RunningBatch.add: encoder runs by source length)."""
        new: List[Decoding] = []
        merged: Dict[Tuple[DecodingOptions, int], List[Tuple[Job, TranslateRequest]]] = {}
        for job in jobs:
            if job.kind == SCORE:
                self.run_score(job)
                continue
            try:
                request = self._request(job)
                key = self._merge_key(job, request)
            except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
                self.fail(job, e)
                continue
            if key is None:
                new += self._start(*self._each_alone([(job, request)]))
            else:
                merged.setdefault(key, []).append((job, request))
        for group in merged.values():
            try:
                running = self._together(group)
            except Exception:  # noqa: BLE001 - each on its own, so that an error is its job's alone
                running = self._each_alone(group)
            new += self._start(*running)
        self._place(new)

    def _place(self, decodings: Sequence[Decoding], alone: Optional[int] = None) -> None:
        """Add the Decodings' rows to the batches of their groups (_group_of): a running batch of the group where
        rows can join, else a new one; `alone`: a new batch of their own, keyed by it, that no other job joins.
        A batch whose add fails is broken (_broken)."""
        by_group: Dict[Tuple[int, ...], List[Decoding]] = {}
        for d in decodings:
            at = self._group_of(d)
            by_group.setdefault(at if alone is None else (*at, alone), []).append(d)
        for key, group in by_group.items():
            held = {id(d) for r in self.running for d in r.decodings}
            group = [d for d in group if id(d) in held]        # not those of a job an earlier group's _broken took
            if not group:
                continue
            cohort = next((c for c in self.cohorts if c.key == key and c.can_add()), None)
            if cohort is None:
                cohort = RunningBatch(self.translator.engine, self.translator.config, key)
                self.cohorts.append(cohort)
            elif cohort.has_stepped:
                self.joined_running += len({id(r) for r in self.running if any(d in group for d in r.decodings)})
            try:
                cohort.add(group, share_cross=key[0] > 1)
            except Exception as e:  # noqa: BLE001 - the encoder run or the rows joining failed
                self._broken(cohort, e, group)
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

    def _request(self, job: Job) -> TranslateRequest:
        return self.translator.prepare_batch(job.texts, *job.records())

    def _merge_key(self, job: Job, request: TranslateRequest) -> Optional[Tuple[DecodingOptions, int]]:
        """Jobs with equal keys share one Decoding: translations (not streams) without constraints or sampling
        (a sample's draws would not depend on the batch, but its search is per call), of equal decoding options
        and length class."""
        if job.kind != TRANSLATE or request.phrases is not None or request.decode_options.sampling:
            return None
        limits = step_limits(request.sources, request.decode_options, self.translator.config)
        return request.decode_options, self._length_class(int(limits.max()) if len(limits) else 0)

    def _alone(self, job: Job, request: TranslateRequest, stream: Optional[TextStream] = None) -> _Running:
        """A job's own Decodings (a few when its constraints are much work); a stream's TextStream (`stream`: the
        one it had, with what it emitted, when it decodes again)."""
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
        if job.kind == STREAM and stream is None:
            stream = TextStream(self.translator.detokenize)
        return _Running(job, request, parts, stream)

    def _each_alone(self, jobs: Sequence[Tuple[Job, TranslateRequest]]) -> List[_Running]:
        """_alone for each job; a job whose Decodings cannot start fails, alone."""
        out = []
        for job, request in jobs:
            try:
                out.append(self._alone(job, request))
            except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
                self.fail(job, e)
        return out

    def _together(self, group: List[Tuple[Job, TranslateRequest]]) -> List[_Running]:
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
        """Jobs whose client went away or whose deadline passed: their rows leave at this step (_sweep)."""
        gone = [r for r in self.running if not r.job.live]
        for running in gone:
            self.running.remove(running)
            self._drop(running.job)
        if gone:
            self._sweep()

    def _sweep(self) -> None:
        """The Decodings that no running job holds any more leave their batches, with their rows (a Decoding shared
        by jobs of equal options decodes on while one of them runs); empty batches go."""
        held = {id(d) for r in self.running for d in r.decodings}
        for cohort in list(self.cohorts):
            for d in [d for d in cohort.decodings if id(d) not in held]:
                cohort.drop(d)
            if not cohort.decodings:
                self.cohorts.remove(cohort)
        self._count_rows()

    def _broken(self, cohort: RunningBatch, error: BaseException, joining: Sequence[Decoding] = ()) -> None:
        """A batch whose step, or whose rows joining (`joining`), raised: its state is unknown, so it goes whole.
        Whose rows caused it is known only where it held one job's: that job gets the error. Otherwise each of its
        jobs decodes again from the start in batches of its own (its search depends on its own rows only: the same
        answer; a stream's TextStream goes on from what it emitted), where a job whose own rows fail gets the error:
        one request's fault never fails the requests it shared a step with."""
        if cohort in self.cohorts:
            self.cohorts.remove(cohort)
        hit = [r for r in self.running if any(d in cohort.decodings or d in joining for d in r.decodings)]
        for running in hit:
            self.running.remove(running)
        self._sweep()                            # their Decodings in other batches leave
        for running in hit:
            if not running.job.live:
                self._drop(running.job)
            elif len(hit) == 1 or running.alone:
                self.fail(running.job, error)
            else:
                try:
                    again = self._alone(running.job, running.request, running.stream)
                except Exception as e:  # noqa: BLE001
                    self.fail(running.job, e)
                    continue
                again.alone = True
                self._place(self._start(again), alone=next(self._alone_keys))

    def _step(self) -> None:
        for cohort in list(self.cohorts):
            if cohort not in self.cohorts:                  # broken by an earlier batch's retries
                continue
            try:
                self.decoder_steps += 1
                cohort.step()
            except Exception as e:  # noqa: BLE001 - a graph that failed on these rows, or a bug
                self._broken(cohort, e)
                continue
            if not cohort.decodings:
                self.cohorts.remove(cohort)
        for running in list(self.running):
            try:
                if running.stream is not None and not running.done:
                    piece = running.stream.update(running.decodings[0].search)      # a stream decodes alone
                    if piece:
                        self.emit(running.job, piece)
            except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
                self.running.remove(running)
                self.fail(running.job, e)
                continue
            if running.done:
                self.running.remove(running)
                self._finish(running)
        self._sweep()

    def _finish(self, running: _Running) -> None:
        job, request = running.job, running.request
        hyps = running.hypotheses()
        try:
            if running.stream is not None:
                results = self._stream_result(running, running.stream, hyps)
            else:
                results = self.translator.batch_results(request, hyps)
        except Exception as e:  # noqa: BLE001
            self.fail(job, e)
            return
        self.finish_translations(job, results)

    def _stream_result(self, running: _Running, stream: TextStream, hyps: List[Any]) -> List[TranslationResult]:
        if not hyps:                                            # a blank text: the empty translation
            return [TranslationResult([""], [[]], [0.0], [0.0], finished=[True])]
        best = hyps[0][0]
        piece = stream.final(best.tokens)
        if piece:
            self.emit(running.job, piece)
        return [TranslationResult([stream.emitted], [list(best.tokens)], [best.score],
                                  [best.normalized_score], finished=[best.finished])]

    def _count_rows(self) -> None:
        self.running_rows = sum(c.rows for c in self.cohorts)
