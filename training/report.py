"""The end of a run: whether the model is undertrained and why, and DIR/summary.json.

A run is called undertrained, each for a reason the user can act on, when
- it stopped inside the warm-up (step < --warmup-steps): the learning rate was still rising to its peak;
- its greedy decodes of validation sentences are those of a model that has learned (almost) nothing
  (`decode_reasons`): chrF below CHRF_UNTRAINED; or, while chrF stays below CHRF_TRANSLATES, the run's own
  --best-metric at its floor (BLEU below BLEU_UNTRAINED, not one exact match);
- the validation loss is less than LOSS_MOVED below log(vocabulary size), the loss of a uniform guess over the
  pieces, which is where every model starts (the label-smoothed loss of a uniform prediction is exactly that).
The fix names the flag that ended the run (--max-minutes, --max-steps or --patience) and --warmup-steps.
`checkpoint_verdict` applies the same rule to a checkpoint's train_meta (what `seq2onnx export` says).
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

# The decodes. chrF (character n-grams) scores any target, one word or a sentence; BLEU counts word 4-grams, so
# a perfect one-word translation scores 0 (the numbers task: BLEU 0, chrF 100, exact match 1.0), and exact match
# is rare on long sentences however good. So chrF judges every run, and the run's --best-metric only where chrF
# leaves it open. Measured on the validation sets of `seq2onnx data`: outputs that ignore the source score chrF 0-7
# on real text (gettext en-de: empty 0, one sentence for all 3.9, its five commonest words 6.4), as do untrained
# models (the tests' toy task, tiny preset: 0.4-1.1), while models that translate it reach 45-63 (docs/TRAINING.md);
# where the targets are few and alike, outputs that ignore the source reach 32-40 (numbers: one number for all 32,
# its five commonest words 40), and only BLEU or exact match tell them apart. None of them reached 50, nor did
# copying the English source (31 on gettext, 20 on numbers).
CHRF_UNTRAINED = 20.0      # below this, the translations share almost nothing with the references
CHRF_TRANSLATES = 50.0     # from this on, the model translates, whatever BLEU or exact match say
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

    def lines(self, subject: str = "the model") -> List[str]:
        """What the run (and `export`, of its checkpoint) prints: nothing, or the reasons and the fix."""
        if not self.reasons:
            return []
        return ([f"warning: {subject} is undertrained, its translations will be poor:"]
                + [f"  - {r}" for r in self.reasons] + [f"  fix: {self.fix}"])


def decode_reasons(metrics: Dict[str, float], best_metric: str) -> List[str]:
    """Why the greedy decodes in `metrics` (chrf, bleu, exact_match, n_decoded) show an undertrained model: [] if
    they do not, or if nothing was decoded. `best_metric` is the run's --best-metric."""
    n, chrf = int(metrics.get("n_decoded") or 0), metrics.get("chrf")
    if not n or chrf is None:
        return []
    bleu, exact = metrics.get("bleu"), metrics.get("exact_match")
    shown = {"bleu": None if bleu is None else f"BLEU {bleu:.1f}",
             "exact_match": None if exact is None else f"exact match {exact:.0%}"}.get(best_metric)
    scores = f"chrF {chrf:.1f}" + (f", {shown} (--best-metric {best_metric})" if shown else "")
    on = f"{scores} on the {n} validation sentences decoded"
    if chrf < CHRF_UNTRAINED:
        return [f"{on}: the translations share almost nothing with the references"]
    if chrf >= CHRF_TRANSLATES:
        return []
    if best_metric == "bleu" and bleu is not None and bleu < BLEU_UNTRAINED:
        return [f"{on}: (almost) no 4-gram of the references"]
    if best_metric == "exact_match" and exact is not None and exact <= 0:
        return [f"{on}: not one exactly right"]
    return []


def undertrained(step: int, warmup_steps: int, stopped_by: str, stop_value: Any, vocab_size: int,
                 metrics: Dict[str, float], best_metric: str) -> Verdict:
    """Judge a run that ended at `step` with the last validation's `metrics` (loss; chrf, bleu, exact_match and
    n_decoded when it decoded) and the run's --best-metric. `stopped_by` is the flag that ended it
    ("--max-minutes", "--max-steps" or "--patience"), with `stop_value` its value."""
    v = Verdict()
    if step < warmup_steps:
        v.reasons.append(f"still in warm-up: it stopped at step {step}, and the learning rate rises until step "
                         f"{warmup_steps} (--warmup-steps {warmup_steps}): it had reached {step}/{warmup_steps} "
                         "of its peak")
    v.reasons += decode_reasons(metrics, best_metric)
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


def checkpoint_verdict(train_meta: Dict[str, Any], vocab_size: int) -> Optional[Verdict]:
    """The rule of `undertrained` applied to a checkpoint of `seq2onnx train` (its train_meta: step, the
    validation's metrics, the run's args): None when train_meta does not say enough to judge (no validation)."""
    args, metrics, step = train_meta.get("args") or {}, train_meta.get("metrics") or {}, train_meta.get("step")
    if not isinstance(step, int) or not metrics or "warmup_steps" not in args or "max_steps" not in args:
        return None
    patience = args.get("patience") or 0
    hit = patience if patience and int(train_meta.get("bad_validations") or 0) >= patience else None
    flag, value = stopped_by(step, args["max_steps"], hit, args.get("max_minutes"))
    return undertrained(step, args["warmup_steps"], flag, value, vocab_size, metrics,
                        args.get("best_metric", "bleu"))


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
