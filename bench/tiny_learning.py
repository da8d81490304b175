"""How fast the tiny model learns the test suite's tasks: a measured figure, not a test assertion.

The test suite's `tiny_run` fixture trains until the toy task reaches its target (tests/fixtures_training.py);
this benchmark says how many steps that takes, and how many a copy task takes to reach 100%, over seeds.

    python bench/tiny_learning.py [--seeds 1 2 3 4] [--inits normal-unit xavier ...]
        -> a table, and bench/results/tiny_learning.json
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))   # the suite's toy task
from fixtures_training import (TINY_LR_FACTOR, TINY_STEPS, TINY_TARGET, TINY_VOCAB, TINY_WARMUP,  # noqa: E402
                               toy_pairs, write_tsv)

from seq2onnx.training.model import INIT_CHOICES  # noqa: E402
from seq2onnx.training.train import TrainArgs, train  # noqa: E402

TASKS = {
    # name: (train pairs, valid pairs, TrainArgs overrides) -- the toy task as the fixture trains it
    "toy (fixture)": (lambda: toy_pairs(4000, seed=1), lambda: toy_pairs(100, seed=2),
                      dict(max_tokens=1024, lr_factor=TINY_LR_FACTOR, warmup_steps=TINY_WARMUP,
                           max_steps=2 * TINY_STEPS)),
    "copy 1-5 words": (lambda: [(s, s) for s, _ in toy_pairs(3000, seed=11, min_words=1, max_words=5)],
                       lambda: [(s, s) for s, _ in toy_pairs(100, seed=12, min_words=1)],
                       dict(max_tokens=1024, lr_factor=0.3, warmup_steps=50, max_steps=600)),
}
INTERVAL = 50


def run(task: str, seed: int, init: str, work: Path) -> dict:
    make_train, make_valid, overrides = TASKS[task]
    d = work / f"{task.split()[0]}-{seed}-{init}"
    d.mkdir()
    args = TrainArgs(out=str(d / "run"), train=str(write_tsv(d / "train.tsv", make_train())),
                     valid=str(write_tsv(d / "valid.tsv", make_valid())), preset="tiny", vocab_size=TINY_VOCAB,
                     valid_interval=INTERVAL, keep_last=0, best_metric="exact_match", seed=seed, threads=1,
                     quiet=True, init=init, **overrides)
    t = time.perf_counter()
    train(args)
    seconds = time.perf_counter() - t
    valid = [r for r in map(json.loads, (d / "run" / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "valid"]
    first = lambda level: next((r["step"] for r in valid if r["exact_match"] >= level), None)  # noqa: E731
    return {"task": task, "init": init, "seed": seed, "steps": args.max_steps, "seconds": round(seconds, 1),
            "final_exact_match": valid[-1]["exact_match"], "best_exact_match": max(r["exact_match"] for r in valid),
            f"first_step_at_{TINY_TARGET}": first(TINY_TARGET), "first_step_at_1.0": first(1.0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--inits", nargs="+", default=[TrainArgs.init], choices=list(INIT_CHOICES),
                    help="weight initialisations to compare (training/model.py INIT_CHOICES)")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "tiny_learning.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        rows = [run(task, seed, init, Path(work)) for task in TASKS for init in args.inits for seed in args.seeds]
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join("-" if r[c] is None else str(r[c]) for c in cols) + " |")
    Path(args.out).write_text(json.dumps({"validation_interval": INTERVAL, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
