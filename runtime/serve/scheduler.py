"""The scheduler base of `seq2onnx serve`: one worker thread per model, a bounded queue of Jobs, and the two
baseline policies (RequestScheduler, DynamicScheduler). The continuous policy (continuous.py) subclasses
Scheduler and writes its own `run()`.

Construct a policy, then `start()` its worker thread. Threads: the app (asyncio) calls `submit` and
`Job.cancel`; the worker thread calls `run()`, which pulls jobs with `take()`, decodes, and resolves them with
`finish` / `fail`. A Job's `future` is a concurrent.futures.Future
(the app awaits it through asyncio.wrap_future); its `on_text(piece)` is called from the worker thread.

A subclass's `run()` loop (the contract):

    def run(self):
        while True:
            jobs = self.take(timeout=...)       # [] on timeout, or once closed with nothing queued
            if not jobs and self.drained:
                return                          # close(): stop admitting, then finish what is queued and running
            ...                                 # decode; per job: self.emit(job, piece) for streams,
                                                # self.finish(job, results) or self.fail(job, error);
                                                # drop a job whose `job.live` turned False (cancelled, deadline)
                                                # at the next step; count tokens with self.count_tokens(n);
                                                # keep self.running_rows current

`run()` must not raise for one job's fault (bad options, a hostile text): fail that job. Should it raise all the
same, the worker fails the jobs it holds (`self.held`) and starts `run()` again.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Hashable, List, Optional, Protocol, Sequence, Tuple

from ..options import MAX_BEAM_SIZE, PER_TEXT, Arg, DecodingOptions, OptionError, TranslationOptions, with_defaults
from ..results import TranslationResult

if TYPE_CHECKING:
    from ..translator import Translator


log = logging.getLogger("seq2onnx.serve")

TRANSLATE, SCORE, STREAM = "translate", "score", "stream"
# translate_batch's arguments that hold one entry per text (PER_TEXT): jobs whose other options are equal share a
# batch with these lists joined (a job that lacks one gives None per text, which translate_batch reads as "none")
# translate_batch's keywords that generate_tokens (a stream) does not take; a stream always returns its scores
NOT_STREAMED = ("return_scores", "max_batch_size", "batch_type")
# how a job ended: results, an error (its own fault, or a bug), its client gone, its deadline passed
OUTCOMES = ("done", "failed", "cancelled", "expired")
RETRY_AFTER_RANGE = (1, 60)                 # seconds a full queue tells a client to wait (Retry-After)
# a translation's options as Translator.check_options makes them: translate_batch's own, and how it decodes
Records = Tuple[TranslationOptions, DecodingOptions]


class QueueFull(Exception):
    """The queue holds max_queue jobs: try again after `retry_after` seconds (HTTP 429 + Retry-After)."""

    def __init__(self, retry_after: int):
        super().__init__(f"the queue is full; retry after {retry_after} s")
        self.retry_after = retry_after


class Closed(Exception):
    """The scheduler stopped admitting jobs (the server is shutting down: HTTP 503)."""


class Cancelled(Exception):
    """The job was cancelled (its client went away) before it finished."""


class DeadlineExceeded(Exception):
    """The job's deadline passed before it finished (HTTP 504)."""


class Job:
    """One request's work: translate `texts` (TRANSLATE, or STREAM: one text, pieces to `on_text`) or score
    `texts` against `targets` (SCORE), with `options` (translate_batch / score_batch keyword arguments, as the request
    gave them). A translation's or a stream's options are decoded as their records say (`call`, `decoding`:
    Translator.check_options', set by Scheduler.check before the job is queued).
    `future` resolves to List[TranslationResult] (List[ScoringResult] for SCORE), or to an exception."""

    def __init__(self, kind: str, texts: List[str], options: Dict[str, Any], *, targets: Optional[List[str]] = None,
                 on_text: Optional[Callable[[str], object]] = None, deadline: Optional[float] = None, rows: int = 0):
        self.kind, self.texts, self.options, self.targets = kind, texts, options, targets
        self.call: Optional[TranslationOptions] = None      # translate_batch's own keywords
        self.decoding: Optional[DecodingOptions] = None     # and the options it decodes with
        self.on_text = on_text
        self.deadline = deadline                    # time.monotonic() value, or None
        self.rows = rows                            # decoder rows it takes: texts x max(beam, n-best)
        self.future: "Future[List[Any]]" = Future()
        self.submitted = time.monotonic()
        self.started: Optional[float] = None        # when the worker took it
        self.first_token: Optional[float] = None    # when its first token (or, unstreamed, its results) came
        self.ended: Optional[float] = None
        self._cancelled = False

    def records(self) -> Tuple[TranslationOptions, DecodingOptions]:
        """A translation's or a stream's records (call, decoding), which Scheduler.check set before it was queued."""
        assert self.call is not None and self.decoding is not None
        return self.call, self.decoding

    def cancel(self) -> None:
        """Its client went away (or its deadline passed, app side): resolve it with Cancelled now; the worker
        drops its rows at the next step (a batch already inside translate_batch finishes, its results unused)."""
        self._cancelled = True
        _resolve(self.future, error=Cancelled("the client went away"))

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def expired(self, now: Optional[float] = None) -> bool:
        return self.deadline is not None and (time.monotonic() if now is None else now) >= self.deadline

    @property
    def live(self) -> bool:
        """Still worth decoding: not cancelled, not past its deadline, not resolved."""
        return not self._cancelled and not self.future.done() and not self.expired()

    @property
    def time_to_first_token(self) -> Optional[float]:
        return None if self.first_token is None else self.first_token - self.submitted


def _resolve(future: Future, result: Any = None, error: Optional[BaseException] = None) -> bool:
    """Set a future once (a race with cancel() is lost quietly): True when this call set it."""
    try:
        if future.done():
            return False
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
        return True
    except InvalidStateError:
        return False


class Schedules(Protocol):
    """What the app, the metrics and the loader ask of a model's scheduler: a Scheduler, or a SchedulerPool of
    several (pool.py)."""

    @property
    def translator(self) -> Translator: ...
    @property
    def policy(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def alive(self) -> bool: ...
    @property
    def queue_depth(self) -> int: ...
    @property
    def running_rows(self) -> int: ...
    @property
    def tokens_generated(self) -> int: ...
    @property
    def joined_running(self) -> int: ...
    @property
    def decoder_steps(self) -> int: ...
    @property
    def outcomes(self) -> Dict[str, int]: ...

    def submit(self, kind: str, texts: Sequence[str], options: Optional[Dict[str, Any]] = None, *,
               targets: Optional[Sequence[str]] = None, on_text: Optional[Callable[[str], object]] = None,
               timeout: Optional[float] = None, records: Optional[Records] = None) -> Job: ...

    def rows_of(self, texts: Sequence[str], options: Dict[str, Any]) -> int: ...

    def close(self, drain: bool = True, timeout: Optional[float] = None) -> None: ...


class Scheduler:
    """The base: the queue, the worker thread, and what a policy's `run()` uses (take, pending, emit, finish,
    fail, run_score, run_stream, count_tokens). Metrics read queue_depth, running_rows, tokens_generated,
    joined_running and decoder_steps;
    latency and time to first token are read from each Job once it resolves."""

    policy = "base"

    def __init__(self, translator: Translator, max_queue: int = 256, max_batch_rows: int = 256, name: str = "model"):
        self.translator = translator
        self.name = name
        self.max_queue = max_queue
        self.max_batch_rows = max_batch_rows        # decoder rows one batch may hold (beams included)
        self.running_rows = 0                       # rows in the batch being decoded now
        self.joined_running = 0                     # jobs admitted into a batch that had stepped (continuous batching)
        self.decoder_steps = 0                      # decoder steps run (continuous batching; 0 under the others)
        self.tokens_generated = 0                   # best hypotheses' tokens, over the server's life
        self.outcomes = dict.fromkeys(OUTCOMES, 0)  # jobs ended, by how
        self.held: List[Job] = []                   # the jobs run() took and has not resolved
        self._queue: Deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._seconds_per_job = 0.05                # a moving average, for Retry-After
        self._thread = threading.Thread(target=self._work, name=f"seq2onnx-serve-{name}", daemon=True)

    def start(self) -> "Scheduler":
        """Start the worker thread (after a subclass's __init__ has set what its run() reads)."""
        self._thread.start()
        return self

    # --- the app's side ----------------------------------------------------------------------------------
    def submit(self, kind: str, texts: Sequence[str], options: Optional[Dict[str, Any]] = None, *,
               targets: Optional[Sequence[str]] = None, on_text: Optional[Callable[[str], object]] = None,
               timeout: Optional[float] = None, records: Optional[Records] = None) -> Job:
        """Queue a job and return it at once; QueueFull when max_queue jobs wait, Closed once close() began. A job
        whose options the model refuses (check) is returned resolved with its error, never queued. A translation
        whose options are already records (check_options', for these texts) gives them as `records`, not options."""
        options = dict(options or {})
        rows = self.rows_of(texts, options) if records is None else record_rows(texts, records[1])
        job = Job(kind, list(texts), options, targets=None if targets is None else list(targets), on_text=on_text,
                  deadline=None if timeout is None else time.monotonic() + timeout, rows=rows)
        if records is not None:
            job.call, job.decoding = records
        else:
            try:
                self.check(job)
            except Exception as e:  # noqa: BLE001 - its own answer, at once: it never reaches a batch
                self.fail(job, e)
                return job
        with self._cond:
            if self._closed:
                raise Closed("the server is shutting down")
            self._drop_dead(time.monotonic())                 # their clients are gone: they hold no place
            if len(self._queue) >= self.max_queue:
                low, high = RETRY_AFTER_RANGE
                raise QueueFull(min(high, max(low, math.ceil(len(self._queue) * self._seconds_per_job))))
            self._queue.append(job)
            self._cond.notify_all()
        return job

    def check(self, job: Job) -> None:
        """A translation's or a stream's options checked against the model as translate_batch checks them before
        any work but tokenizing (Translator.check_options), and its records set: every policy refuses a bad option
        before the job is queued, so that no batch holds a job that would fail its step. What only tokenizing finds
        (a target prefix the tokenizer cannot spell) fails the job when it is prepared: alone (continuous), or when
        its batch is retried job by job (run_translate)."""
        if job.kind == SCORE:
            return
        options = stream_options(job.options) if job.kind == STREAM else job.options
        job.call, job.decoding = self.translator.check_options(len(job.texts), **options)

    def rows_of(self, texts: Sequence[str], options: Dict[str, Any]) -> int:
        """Decoder rows the texts take: one per beam (or per sample) each."""
        given = with_defaults(options, self.translator.package.generation)
        widths = given.get("beam_size", DecodingOptions.beam_size), given.get("num_hypotheses", 1)
        # a value of the wrong type counts 1: translate_batch refuses it before any work
        return len(texts) * min(MAX_BEAM_SIZE, max(w if type(w) is int else 1 for w in widths))

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def close(self, drain: bool = True, timeout: Optional[float] = None) -> None:
        """Stop admitting (submit raises Closed); with drain, finish what is queued and running, else fail the
        queued jobs with Closed; then join the worker thread (at most `timeout` seconds)."""
        with self._cond:
            self._closed = True
            if not drain:
                while self._queue:
                    _resolve(self._queue.popleft().future, error=Closed("the server is shutting down"))
            self._cond.notify_all()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # --- the policy's side -------------------------------------------------------------------------------
    @property
    def drained(self) -> bool:
        """close() was called and no job waits: run() returns once it holds none."""
        with self._cond:
            return self._closed and not self._queue

    def pending(self) -> int:
        """Jobs waiting to be taken."""
        return len(self._queue)

    def take(self, max_jobs: Optional[int] = None, max_rows: Optional[int] = None,
             timeout: Optional[float] = None, block: bool = True) -> List[Job]:
        """Pop waiting jobs in arrival order: at most max_jobs, and at most max_rows rows (the first job always,
        so that a wide one is not stuck). Waits up to `timeout` seconds (None: until one comes or close())
        when none waits and `block`; [] then. Jobs cancelled or past their deadline are resolved and skipped.
        The jobs returned are added to `held`."""
        now = time.monotonic()
        with self._cond:
            while True:
                self._drop_dead(now)
                if self._queue or self._closed or not block:
                    break
                if not self._cond.wait(timeout):
                    return []
                now = time.monotonic()
            taken: List[Job] = []
            rows = 0
            while self._queue and (max_jobs is None or len(taken) < max_jobs):
                job = self._queue[0]
                if taken and max_rows is not None and rows + job.rows > max_rows:
                    break
                self._queue.popleft()
                if not job.live:
                    self._end(job)
                    continue
                job.started = now
                rows += job.rows
                taken.append(job)
        self.held.extend(taken)
        return taken

    def _drop_dead(self, now: float) -> None:
        if any(not job.live for job in self._queue):
            for job in [j for j in self._queue if not j.live]:
                self._queue.remove(job)
                self._end(job)

    def _end(self, job: Job) -> None:
        """A job taken out of the queue, or dropped, without results: resolve it with why."""
        if job.cancelled:
            self.outcomes["cancelled"] += 1
        else:
            self.outcomes["expired"] += 1
            _resolve(job.future, error=DeadlineExceeded("the request's deadline passed"))
        job.ended = time.monotonic()

    def emit(self, job: Job, piece: str) -> None:
        """A stream's next piece of text, to its on_text."""
        if job.first_token is None:
            job.first_token = time.monotonic()
        if job.on_text is not None and job.live:
            job.on_text(piece)

    def finish(self, job: Job, results: List[Any]) -> None:
        now = time.monotonic()
        if job.first_token is None:
            job.first_token = now
        job.ended = now
        if job.expired(now) and not job.future.done():
            self.outcomes["expired"] += 1
            _resolve(job.future, error=DeadlineExceeded("the request's deadline passed"))
        else:
            self.outcomes["cancelled" if job.cancelled else "done"] += 1
            _resolve(job.future, results)
        self._release(job)
        if job.started is not None:                             # EWMA of a job's time in the worker
            self._seconds_per_job = 0.9 * self._seconds_per_job + 0.1 * (now - job.started)

    def finish_translations(self, job: Job, results: List[TranslationResult]) -> None:
        """finish with a job's TranslationResults, counting the tokens of their best hypotheses."""
        self.count_tokens(sum(len(r.token_ids[0]) for r in results if r.token_ids))
        self.finish(job, results)

    def fail(self, job: Job, error: BaseException) -> None:
        job.ended = time.monotonic()
        self.outcomes["failed"] += 1
        _resolve(job.future, error=error)
        self._release(job)

    def _release(self, job: Job) -> None:
        try:
            self.held.remove(job)
        except ValueError:
            pass

    def count_tokens(self, n: int) -> None:
        self.tokens_generated += n

    def run_score(self, job: Job) -> None:
        """A SCORE job: translator.score_batch, on its own."""
        try:
            assert job.targets is not None                  # a SCORE job has its targets (Service.submit)
            self.finish(job, self.translator.score_batch(job.texts, job.targets, **job.options))
        except Exception as e:  # noqa: BLE001 - one job's fault is that job's answer
            self.fail(job, e)

    def run_stream(self, job: Job) -> None:
        """A STREAM job on its own: translator.generate_tokens' pieces to emit(), stopped at the next piece once
        the job is not live; its result: the text, token ids, scores and finished of the Hypothesis streamed."""
        try:
            steps = self.translator.stream(job.texts[0], *job.records())
            pieces = []
            while True:
                try:
                    piece = next(steps)
                except StopIteration as stop:
                    best = stop.value                       # the Hypothesis streamed; None: a blank text
                    break
                if not job.live:
                    steps.close()
                    self._drop(job)
                    return
                pieces.append(piece)
                self.emit(job, piece)
            if best is None:
                self.finish(job, [TranslationResult([""], [[]], [0.0], [0.0], finished=[True])])
                return
            self.count_tokens(len(best.tokens))
            self.finish(job, [TranslationResult(["".join(pieces)], [list(best.tokens)], [best.score],
                                                [best.normalized_score], finished=[best.finished])])
        except Exception as e:  # noqa: BLE001
            self.fail(job, e)

    def run_translate(self, jobs: List[Job]) -> None:
        """Jobs of equal options (PER_TEXT aside: batch_key) in one translate_batch; its results split back. A batch
        that fails is retried job by job, so that only the job at fault gets the error."""
        jobs = [j for j in jobs if j.live or self._drop(j)]
        if not jobs:
            return
        texts = [t for j in jobs for t in j.texts]
        joined: Dict[str, Any] = {
            key: [x for j in jobs for x in getattr(j.call, key) or [None] * len(j.texts)] for key in PER_TEXT
            if any(getattr(j.call, key) is not None for j in jobs)}
        first, decoding = jobs[0].records()
        call = replace(first, **joined) if len(jobs) > 1 else first
        self.running_rows = sum(j.rows for j in jobs)
        try:
            results = self.translator.run_batch(texts, call, decoding)
        except Exception as e:  # noqa: BLE001
            if len(jobs) == 1:
                self.fail(jobs[0], e)
            else:
                for job in jobs:
                    self.run_translate([job])
            return
        finally:
            self.running_rows = 0
        start = 0
        for job in jobs:
            mine = results[start:start + len(job.texts)]
            start += len(job.texts)
            if job.live:
                self.finish_translations(job, mine)
            else:
                self._drop(job)

    def _drop(self, job: Job) -> bool:
        """A held job that is no longer live: resolved with why, let go. False (for filters)."""
        self._end(job)
        self._release(job)
        return False

    def run_one(self, job: Job) -> None:
        """Any job on its own, by its kind."""
        if not job.live:
            self._drop(job)
        elif job.kind == SCORE:
            self.run_score(job)
        elif job.kind == STREAM:
            self.run_stream(job)
        else:
            self.run_translate([job])

    def run(self) -> None:
        """The policy's loop (see the module docstring)."""
        raise NotImplementedError

    def _work(self) -> None:
        while True:
            try:
                self.run()
                return
            except Exception as e:  # noqa: BLE001 - a bug in a policy must not end the worker
                log.exception("seq2onnx serve: the %s scheduler of %s failed; restarting it", self.policy, self.name)
                for job in list(self.held):
                    self.fail(job, RuntimeError(f"internal error in the {self.policy} scheduler: {e}"))
                self.running_rows = 0
                if self.drained and not self.held:
                    return


def record_rows(texts: Sequence[str], decoding: DecodingOptions) -> int:
    """Decoder rows the texts take when they decode with `decoding` (rows_of, for records)."""
    return len(texts) * max(decoding.beam_size, decoding.num_hypotheses)


def stream_options(options: Dict[str, Any]) -> Dict[str, Any]:
    """A stream's translate_batch options: those generate_tokens takes, one hypothesis."""
    if options.get("num_hypotheses", 1) != 1:
        raise OptionError("a stream is one hypothesis: ", Arg("num_hypotheses"), " must be 1")
    return {k: v for k, v in options.items() if k not in NOT_STREAMED}


class RequestScheduler(Scheduler):
    """One translate_batch per request, in arrival order: what a server without batching does."""

    policy = "request"

    def run(self) -> None:
        while True:
            jobs = self.take(max_jobs=1)
            if not jobs:
                if self.drained:
                    return
                continue
            self.run_one(jobs[0])


def batch_key(job: Job) -> Optional[Hashable]:
    """Jobs with equal keys may share one translate_batch: their records, PER_TEXT aside. None: the job runs alone
    (a stream, a score; or sampling, whose random draws depend on the batch)."""
    if job.kind != TRANSLATE or job.call is None or job.decoding is None or job.decoding.sampling:
        return None
    cleared: Dict[str, Any] = dict.fromkeys(PER_TEXT)
    key = replace(job.call, **cleared), job.decoding
    try:
        hash(key)
    except TypeError:                   # a value of its own type (a Python caller's): alone
        return None
    return key


class DynamicScheduler(Scheduler):
    """Triton's dynamic batcher: from the first waiting job, collect for up to max_wait_ms or until
    max_batch_rows rows wait, then one translate_batch per group of identical options (in the order of each
    group's first job); streams and scores run on their own."""

    policy = "dynamic"

    def __init__(self, translator: Translator, max_queue: int = 256, max_batch_rows: int = 256, name: str = "model",
                 max_wait_ms: float = 10.0):
        self.max_wait = max_wait_ms / 1000
        super().__init__(translator, max_queue, max_batch_rows, name)

    def run(self) -> None:
        while True:
            jobs = self.take(max_rows=self.max_batch_rows)
            if not jobs:
                if self.drained:
                    return
                continue
            until = time.monotonic() + self.max_wait
            rows = sum(j.rows for j in jobs)
            while rows < self.max_batch_rows and not self.drained:
                left = until - time.monotonic()
                if left <= 0:
                    break
                more = self.take(max_rows=self.max_batch_rows - rows, timeout=left)
                if more and rows + more[0].rows > self.max_batch_rows:        # take() gives the first always
                    jobs += more
                    break
                jobs += more
                rows += sum(j.rows for j in more)
            self.run_jobs(jobs)

    def run_jobs(self, jobs: List[Job]) -> None:
        groups: Dict[Hashable, List[Job]] = {}
        order: List[Tuple[str, Any]] = []
        for job in jobs:
            key = batch_key(job)
            if key is None:
                order.append(("alone", job))
            else:
                if key not in groups:
                    order.append(("group", key))
                groups.setdefault(key, []).append(job)
        for what, item in order:
            if what == "alone":
                self.run_one(item)
            else:
                self.run_translate(groups[item])


POLICIES = {"request": RequestScheduler, "dynamic": DynamicScheduler}
