"""What a run reports: `metrics.jsonl` (one JSON object per line), the progress bar, the curves PNG."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from tqdm import tqdm

from seq2onnx.runtime.errors import Seq2OnnxError

from .atomic import atomic_path, write_text_atomic


class MetricsLog:
    """`DIR/metrics.jsonl`: {"kind": "train"|"valid", "step": N, ...} appended one line at a time."""

    def __init__(self, path: os.PathLike):
        self.path = Path(path)

    def append(self, record: Dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record, sort_keys=True) + "\n")

    def _read(self) -> "tuple[List[Dict[str, Any]], bool]":
        """-> (records, torn): a last line without its newline (a kill in the middle of `append`) is
        dropped and reported as torn; any other line that is not JSON is an error naming it."""
        if not self.path.exists():
            return [], False
        with open(self.path, encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        torn = lines[-1] != ""                 # the file should end with a newline
        records = []
        for number, line in enumerate(lines[:-1], 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as e:
                    raise Seq2OnnxError(f"{self.path} line {number} is not JSON ({e}): delete that line "
                                        "and run again") from e
        return records, torn

    def read(self) -> List[Dict[str, Any]]:
        return self._read()[0]

    def truncate_after(self, step: int) -> None:
        """Drop records logged after `step` (a resumed run logs them again) and a torn last line."""
        records, torn = self._read()
        kept = [r for r in records if r.get("step", 0) <= step]
        if torn or len(kept) != len(records):
            write_text_atomic(self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))


def plot_curves(metrics_path: os.PathLike, png_path: os.PathLike) -> bool:
    """Loss and validation curves as a PNG when matplotlib is importable; False (and nothing) otherwise."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    records = MetricsLog(metrics_path).read()
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    fig, (ax_loss, ax_score) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    ax_loss.plot([r["step"] for r in valid], [r["loss"] for r in valid], "o-", label="valid loss")
    ax_loss.set_xlabel("step")
    ax_loss.legend()
    scored = [r for r in valid if "bleu" in r]           # --valid-decode-max 0: losses only
    for key in ("bleu", "chrf"):
        ax_score.plot([r["step"] for r in scored], [r[key] for r in scored], "o-", label=key)
    ax_score.plot([r["step"] for r in scored], [100 * r["exact_match"] for r in scored], "o-", label="exact match %")
    ax_score.set_xlabel("step")
    ax_score.legend()
    fig.tight_layout()
    try:
        with atomic_path(png_path) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return True


class Progress:
    """A tqdm bar on a terminal; plain log lines every `log_interval` steps otherwise; nothing if quiet.

    With a deadline (--max-minutes) the bar's total is the step the run will reach by then at its speed so far,
    re-estimated at each log line (never more than max_steps), so that its "left" is the time left.
    """

    def __init__(self, total: int, initial: int, quiet: bool, enabled: bool = True,
                 deadline: Optional[float] = None):
        self.quiet = quiet or not enabled
        self.bar: Optional[tqdm] = None
        self.max_steps, self.deadline = total, deadline
        self.start, self.initial = time.monotonic(), initial
        if not self.quiet and sys.stderr.isatty():
            self.bar = tqdm(total=None if deadline else total, initial=initial, unit="step", dynamic_ncols=True)

    def step(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def expected_last_step(self, step: int) -> int:
        """Where the run stops: max_steps, or sooner when the deadline comes first at the pace so far."""
        if self.deadline is None or step <= self.initial:
            return self.max_steps
        now = time.monotonic()
        per_step = (now - self.start) / (step - self.initial)
        return min(self.max_steps, step + int(max(self.deadline - now, 0.0) / per_step))

    def show(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        if self.bar is not None:
            if self.deadline is not None:
                self.bar.total = self.expected_last_step(step)
            self.bar.set_postfix(loss=f"{loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tokens_per_s:.0f}", refresh=False)
        elif not self.quiet:
            print(f"step {step}: loss {loss:.3f}  lr {lr:.2e}  {tokens_per_s:.0f} tokens/s", file=sys.stderr)

    def message(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
