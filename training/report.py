"""The end of a run: whether the model is undertrained and why, and DIR/summary.json.

A run is called undertrained, each for a reason the user can act on, when
- it stopped inside the warm-up (step < --warmup-steps): the learning rate was still rising to its peak;
- BLEU on the decoded validation sentences is below BLEU_UNTRAINED (BLEU 0: not one 4-gram of the references);
- the validation loss is less than LOSS_MOVED below log(vocabulary size), the loss of a uniform guess over the
  pieces, which is where every model starts (the label-smoothed loss of a uniform prediction is exactly that).
The fix names the flag that ended the run (--max-minutes, --max-steps or --patience) and --warmup-steps.
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .atomic import write_text_atomic
from .budget import ValidationClock

BLEU_UNTRAINED = 1.0       # below this, the translations share (almost) no 4-gram with the references
LOSS_MOVED = 0.2           # a validation loss less than 20% below log(vocab) has barely moved from the start
SUMMARY_FILE = "summary.json"


@dataclass
class Verdict:
    reasons: List[str] = field(default_factory=list)
    fix: str = ""

    @property
    def undertrained(self) -> bool:
        return bool(self.reasons)

    def lines(self) -> List[str]:
        """What the run prints: nothing, or the reasons and the fix."""
        if not self.reasons:
            return []
        return (["warning: the model is undertrained, its translations will be poor:"]
                + [f"  - {r}" for r in self.reasons] + [f"  fix: {self.fix}"])


def undertrained(step: int, warmup_steps: int, stopped_by: str, stop_value: Any, vocab_size: int,
                 metrics: Dict[str, float]) -> Verdict:
    """Judge a run that ended at `step` with the last validation's `metrics` (loss; bleu and n_decoded when it
    decoded). `stopped_by` is the flag that ended it ("--max-minutes", "--max-steps" or "--patience"), with
    `stop_value` its value."""
    v = Verdict()
    if step < warmup_steps:
        v.reasons.append(f"still in warm-up: it stopped at step {step}, and the learning rate rises until step "
                         f"{warmup_steps} (--warmup-steps {warmup_steps}): it had reached {step}/{warmup_steps} "
                         "of its peak")
    bleu = metrics.get("bleu")
    if bleu is not None and bleu < BLEU_UNTRAINED:
        v.reasons.append(f"BLEU {bleu:.1f} on the {int(metrics.get('n_decoded', 0))} validation sentences decoded")
    uniform = math.log(vocab_size)
    loss = metrics.get("loss")
    if loss is not None and loss > (1 - LOSS_MOVED) * uniform:
        v.reasons.append(f"the validation loss {loss:.2f} is {max(0.0, 1 - loss / uniform):.0%} below {uniform:.2f}, "
                         f"the loss of a uniform guess over the {vocab_size} pieces, where training starts")
    if not v.reasons:
        return v
    fixes = [f"train longer: raise {stopped_by} {stop_value}" if stopped_by != "--patience"
             else f"raise --patience {stop_value} (or drop it) and train longer"]
    if step < warmup_steps:
        fixes.append(f"and lower --warmup-steps to a small share of the steps the run can make (this one made {step})")
    v.fix = " ".join(fixes)
    return v


def report_run(run_dir: os.PathLike, summary: Dict[str, Any], metrics: Dict[str, float], seconds: float,
               clock: Optional[ValidationClock], verdict: Verdict, quiet: bool) -> None:
    """Write DIR/summary.json (`summary`, the last validation's `metrics`, the time, the validations, the verdict;
    atomically, again by a resumed run), and print the validations' cost and the verdict unless `quiet`."""
    validations = None
    if clock is not None:
        validations = {"count": clock.count, "planned": clock.planned, "seconds": round(clock.spent, 1),
                       "share": round(clock.spent / max(seconds, 1e-9), 3), "spaced_out": clock.spaced}
    record = dict(summary, seconds=round(seconds, 1), validations=validations,
                  valid_decoded=int(metrics.get("n_decoded", 0)),
                  last={k: v for k, v in metrics.items() if k in ("loss", "bleu", "chrf", "exact_match")},
                  undertrained=verdict.reasons, fix=verdict.fix or None)
    write_text_atomic(os.path.join(run_dir, SUMMARY_FILE), json.dumps(record, indent=2, sort_keys=True) + "\n")
    if quiet:
        return
    if clock is not None:
        short = summary.get("stopped_by") == "--max-minutes" and clock.planned and clock.count < clock.planned
        planned = f" of the {clock.planned} planned" if short else ""
        why = (f" (spaced out: each took about {clock.last:.1f} s, and validations may take at most "
               f"{clock.share:.0%} of the time; a smaller --valid set, a lower --valid-decode-max or a longer "
               "--max-minutes validates more often)" if clock.spaced else "")
        times = "once" if clock.count == 1 else f"{clock.count} times"
        print(f"validated {times}{planned} in {clock.spent:.0f} s of {seconds:.0f} s "
              f"({clock.spent / max(seconds, 1e-9):.0%}){why}", file=sys.stderr)
    for line in verdict.lines():
        print(line, file=sys.stderr)


def stopped_by(step: int, max_steps: int, patience: Optional[int], max_minutes: Optional[float]) -> "tuple[str, Any]":
    """The flag that ended a run at `step` and its value; `patience` is --patience when it ended the run."""
    if patience:
        return "--patience", patience
    if step >= max_steps or max_minutes is None:
        return "--max-steps", max_steps
    return "--max-minutes", max_minutes
