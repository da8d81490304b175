"""Several schedulers for one model: `seq2onnx serve --instances N` (Triton's instance count; CTranslate2's
inter_threads, its batches decoded in parallel).

Each instance is a scheduler of its own (its worker thread, queue and running batches) over the one Translator
of the model: onnxruntime runs calls of one session from several threads at once, so the weights are loaded once
and only the batches' caches are per instance. A request goes to the instance with the least work waiting and
running. On a few cores, N instances of 1 onnxruntime thread each keep the cores busier than one instance of N
threads, whose small per-step kernels leave its threads waiting on each other (bench/results/serve.md).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional, Sequence

from .scheduler import OUTCOMES, Job, Scheduler


def _total(name: str) -> property:
    """A property of the pool: the sum of its members' `name`."""
    return property(lambda self: sum(getattr(m, name) for m in self.members))


class SchedulerPool:
    """`instances` schedulers made by make(max_queue=...), each holding at most ceil(max_queue / instances) waiting
    jobs; the pool answers what the app and the metrics ask of a Scheduler (submit, rows_of, close, the counts)."""

    def __init__(self, make: Callable[..., Scheduler], instances: int, max_queue: int):
        each = max(1, math.ceil(max_queue / instances))
        self.members: List[Scheduler] = [make(max_queue=each) for _ in range(instances)]
        first = self.members[0]
        self.translator, self.policy, self.name = first.translator, first.policy, first.name

    def start(self) -> "SchedulerPool":
        for m in self.members:
            m.start()
        return self

    def submit(self, *args: Any, **kwargs: Any) -> Job:
        """To the instance with the fewest jobs waiting, then the fewest rows running (QueueFull once it is full)."""
        return min(self.members, key=lambda m: (m.queue_depth, m.running_rows)).submit(*args, **kwargs)

    def rows_of(self, texts: Sequence[str], options: Dict[str, Any]) -> int:
        return self.members[0].rows_of(texts, options)

    def close(self, drain: bool = True, timeout: Optional[float] = None) -> None:
        for m in self.members:                  # each stops admitting at once; then each drains
            m.close(drain, timeout=0)
        for m in self.members:
            m.close(drain, timeout)

    @property
    def alive(self) -> bool:
        return all(m.alive for m in self.members)

    # the metrics: the sums over the instances (joined_running and decoder_steps: the continuous policy's alone)
    queue_depth = _total("queue_depth")
    running_rows = _total("running_rows")
    tokens_generated = _total("tokens_generated")
    joined_running = _total("joined_running")
    decoder_steps = _total("decoder_steps")

    @property
    def outcomes(self) -> Dict[str, int]:
        return {k: sum(m.outcomes[k] for m in self.members) for k in OUTCOMES}
