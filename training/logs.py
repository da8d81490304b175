"""What a run reports: `metrics.jsonl` (one JSON object per line), the progress bar, the curves PNG."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import IO, Any, Dict, List, Optional

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


CURVES_MARKERS_UP_TO = 60     # draw each logged point as a marker up to this many (a line of few points shows)


def curves_figure(records: List[Dict[str, Any]]):
    """The figure of curves.png from metrics.jsonl's records: the losses; and when validation decoded
    (not --valid-decode-max 0), BLEU and chrF on a 0-100 scale, and the exact-match rate on its own axes, so that
    neither hides the other. A matplotlib Figure (no pyplot state), laid out by constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    scored = [r for r in valid if "bleu" in r]
    fig = Figure(figsize=(13.5, 4.2) if scored else (6, 4.2), layout="constrained")
    FigureCanvasAgg(fig)                                # drawn by Agg, without pyplot's global state
    axes = fig.subplots(1, 3 if scored else 1, squeeze=False)[0]

    def style(ax, title: str, ylabel: str) -> None:
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        xs = [x for drawn in ax.get_lines() for x in drawn.get_xdata()]
        if xs and min(xs) == max(xs):                   # one validation: whole steps around it, not 0.945 ... 1.05
            ax.set_xlim(xs[0] - 1, xs[0] + 1)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()

    def line(ax, rows, key, label, scale=1.0, marker="o"):
        if rows:
            ax.plot([r["step"] for r in rows], [scale * r[key] for r in rows], label=label,
                    marker=marker if len(rows) <= CURVES_MARKERS_UP_TO else None, markersize=4)

    ax = axes[0]
    line(ax, train, "loss", "training (mean since the point before)")
    line(ax, valid, "loss", "validation", marker="s")
    losses = [r["loss"] for r in train + valid]
    if losses and max(losses) - min(losses) < 0.2:     # nearly flat (a run of a few steps): no 4-decimal ticks
        ax.set_ylim(min(losses) - 0.1, max(losses) + 0.1)
    style(ax, "Loss (label-smoothed, per target token)", "loss")
    if scored:
        n = int(scored[-1].get("n_decoded", 0))
        ax = axes[1]
        line(ax, scored, "bleu", "BLEU")
        line(ax, scored, "chrf", "chrF", marker="s")
        top = max(10.0, 1.1 * max(max(r["bleu"], r["chrf"]) for r in scored))
        ax.set_ylim(-0.03 * top, top)                  # a score of 0 shows above the axis, not on it
        style(ax, f"BLEU and chrF, {n} validation sentences", "score (0-100)")
        ax = axes[2]
        line(ax, scored, "exact_match", "exact match", scale=100.0)
        top = max(10.0, 110.0 * max(r["exact_match"] for r in scored))
        ax.set_ylim(-0.03 * top, top)
        style(ax, f"Exact match, {n} validation sentences", "% of sentences exactly right")
    return fig


def plot_curves(metrics_path: os.PathLike, png_path: os.PathLike) -> bool:
    """curves.png (curves_figure) when matplotlib is importable; False (and nothing) otherwise."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    fig = curves_figure(MetricsLog(metrics_path).read())
    with atomic_path(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return True


class _SecondsBar(tqdm):
    """A bar that counts seconds: its rate is one per second by construction, so its ETA is the time left from
    the start (tqdm would show '?' until it had measured a rate)."""

    @property
    def format_dict(self):
        return {**super().format_dict, "rate": 1.0}


class Progress:
    """A tqdm bar on a terminal (or on `file`); plain lines every log_interval steps otherwise; nothing if quiet.

    Under --max-minutes (`end`) the bar counts seconds from `start`: its total is the budget, or less when
    --max-steps comes first at the pace so far, so its ETA is the time left from step 0 on. Otherwise it counts
    steps up to --max-steps. From the first step its postfix holds the step, the training loss (the mean since
    the last log line) and the learning rate; while validating, its description says so and how far it is.
    """

    def __init__(self, max_steps: int, initial: int, quiet: bool, enabled: bool = True,
                 start: Optional[float] = None, end: Optional[float] = None, file: Optional[IO[str]] = None):
        self.quiet = quiet or not enabled
        self.max_steps, self.initial, self.end = max_steps, initial, end
        self.start = time.monotonic() if start is None else start
        self.bar: Optional[tqdm] = None
        self.postfix: Dict[str, str] = {}
        if not self.quiet and (file is not None or sys.stderr.isatty()):
            out = file or sys.stderr
            if end is not None:
                self.bar = _SecondsBar(total=round(end - self.start, 1), unit="s", file=out, dynamic_ncols=True,
                                bar_format="{desc}{percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}")
            else:
                self.bar = tqdm(total=max_steps, initial=initial, unit="step", file=out, dynamic_ncols=True)

    def expected_seconds(self, step: int, now: float) -> float:
        """Seconds from start to the end of the run: the deadline's, or sooner when --max-steps comes first at
        the pace so far."""
        budget = self.end - self.start
        if step <= self.initial:
            return budget
        per_step = (now - self.start) / (step - self.initial)
        return min(budget, (now - self.start) + (self.max_steps - step) * per_step)

    def _tick(self, now: float) -> None:
        """Move a time bar to `now` (tqdm's ETA then is the time left)."""
        if self.bar is not None and self.end is not None:
            self.bar.update(max(0.0, round(now - self.start, 1) - self.bar.n))

    def step(self, step: int, loss: float, lr: float) -> None:
        """After each optimizer step: the bar moves, its postfix shows `loss` (the mean since the last log line)."""
        if self.bar is None:
            return
        now = time.monotonic()
        if self.end is not None:
            self.bar.total = max(round(self.expected_seconds(step, now), 1), round(now - self.start, 1))
            self._tick(now)
            self.postfix["step"] = str(step)
        else:
            self.bar.update(1)
        self.postfix.update(loss=f"{loss:.3f}", lr=f"{lr:.2e}")
        self.bar.set_postfix(self.postfix, refresh=False)

    def show(self, step: int, loss: float, lr: float, tokens_per_s: float) -> None:
        """Every log_interval steps: a plain line without a bar; the speed in the bar's postfix."""
        if self.bar is not None:
            self.postfix["tok/s"] = f"{tokens_per_s:.0f}"
            self.bar.set_postfix(self.postfix, refresh=False)
        elif not self.quiet:
            print(f"step {step}: loss {loss:.3f}  lr {lr:.2e}  {tokens_per_s:.0f} tokens/s", file=sys.stderr)

    def validating(self, step: int, what: str, start: bool = False) -> None:
        """Say what the validation at `step` is doing: on the bar each time; as a plain line at its `start`."""
        if self.bar is not None:
            self._tick(time.monotonic())
            self.bar.set_description_str(f"step {step}: {what} ")
            self.bar.refresh()
        elif start and not self.quiet:
            print(f"step {step}: {what}", file=sys.stderr)

    def validated(self) -> None:
        if self.bar is not None:
            self.bar.set_description_str("")
            self.bar.refresh()

    def message(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(text, file=self.bar.fp)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self._tick(time.monotonic())
            self.bar.close()
