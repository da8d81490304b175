"""What validation may cost under a clock: when to validate and how many sentences to greedy-decode.

The rule (docs/TRAINING.md "Validation under a time budget"): when validations follow the clock (`--max-minutes`
alone: a tenth of the budget apart; or `--valid-minutes M`), they stand on a fixed grid, start + k * interval,
so that validations do not push the later ones back, and all of them together take at most VALID_SHARE of
the time:
- The validation loss over the whole validation set is cheap (one forward pass per batch); the greedy decode
  for BLEU / chrF / exact match is the cost. The first validation decodes the validation sentences in file order,
  FIRST_CHUNK, then DECODE_CHUNK at a time while the next chunk fits in DECODE_TARGET of VALID_SHARE of the
  interval (at the pace measured so far, the loss's time deducted); at least FIRST_CHUNK, at most
  --valid-decode-max. The count it reaches is kept for the
  rest of the run (and in the checkpoint), so every validation scores the same sentences and scores compare.
- A validation never starts before the moment when, its own cost (the last one's) included, validations would
  still take at most VALID_SHARE of the time since the start: when they cost more (a slow validation loss, a
  large checkpoint) they are spaced out, and the run says so.
- Under --max-minutes, training stops early enough for the last validation (as long as the one before) to end
  by the deadline, so the whole run, last checkpoint included, fits the budget.
With --valid-interval N the cadence is the user's, in steps, and each validation decodes --valid-decode-max.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

VALID_SHARE = 0.2          # validations take at most this share of the time
DECODE_TARGET = 0.75       # the first decode aims at this part of the share (after the loss); the rest is headroom
                           # for the checkpoint writes and for decodes that vary from one validation to the next
PLANNED_VALIDATIONS = 10   # under --max-minutes alone: one every tenth of the budget, the last at its end
FIRST_CHUNK = 8            # the first validation decodes this many sentences before it knows their cost ...
DECODE_CHUNK = 32          # ... then this many at a time, while the next chunk fits


def next_chunk_fits(decoded: int, chunk: int, seconds: float, allowance: float) -> bool:
    """After `decoded` sentences took `seconds`, does a chunk of `chunk` more fit in `allowance` seconds?"""
    if decoded == 0:
        return True                                   # nothing measured yet: at least one chunk
    return (decoded + chunk) * seconds / decoded <= allowance


@dataclass
class ValidationClock:
    """When the next validation is due, for validations on the clock (all times in seconds, one clock).

    `start` is when training began, `interval` the time between validations, `end` the --max-minutes deadline
    (None without one). `record(began, ended)` is called after each validation."""

    start: float
    interval: float
    end: Optional[float] = None
    share: float = VALID_SHARE
    spent: float = 0.0                     # seconds of validation so far
    last: Optional[float] = None           # seconds of the last validation
    count: int = 0                         # validations recorded
    spaced: int = 0                        # how many were put off beyond the grid by the share rule
    next_at: float = field(init=False)

    def __post_init__(self) -> None:
        self.next_at = self.start + self.interval

    @property
    def planned(self) -> Optional[int]:
        """How many validations the grid holds within the budget (the last at its end); None without one."""
        if self.end is None:
            return None
        return max(1, int(round((self.end - self.start) / self.interval)))

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def decode_allowance(self, loss_seconds: float) -> float:
        """Seconds the greedy decode of one validation may take, after its loss took `loss_seconds`."""
        return DECODE_TARGET * self.share * self.interval - loss_seconds

    def record(self, began: float, ended: float) -> None:
        """A validation ran from `began` to `ended`: the next one is the first grid point after it, or later if
        validations would take more than `share` of the time, the next one (as long as this one) included."""
        took = ended - began
        self.spent, self.last, self.count = self.spent + took, took, self.count + 1
        grid = self.start + self.interval * (math.floor((ended - self.start) / self.interval) + 1)
        by_share = self.start + (self.spent + took) / self.share
        self.next_at = max(grid, by_share)
        if by_share > grid:
            self.spaced += 1

    def train_until(self) -> Optional[float]:
        """When training must stop for the last validation (as long as the last one) to end by the deadline."""
        if self.end is None:
            return None
        return self.end - (self.last or 0.0)
