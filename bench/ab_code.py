"""Two versions of the runtime's code on one package, alternating in separate processes.

    python bench/ab_code.py OLD_REV PACKAGE [--variant int8|float32] [--batch 16] [--beam 4] [--rounds 7]

For changes to the runtime (runtime/, not the graphs: for those, ab_packages.py). A is the code at git revision
OLD_REV (checked out with `git worktree` into a temporary folder), B the working tree. Each round runs one process
per side (A, then B): it loads the package, warms up with one call, then times 3 calls of bench/run.py's setup
(sources of 32 ids, the seeds of run.py's cases, exactly 64 generated tokens, 2 intra-op threads) and reports their
median. Printed: the median seconds of each side, the median of the per-round time ratios A/B (B's speed-up), and
whether the best hypotheses' tokens are equal.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LENGTH, SRC_LEN, THREADS, CALLS = 64, 32, 2, 3
PACKAGES = ("runtime", "training", "export", "models")          # pyproject.toml's package-dir: seq2onnx.<name>


def seeds(batch: int, beam: int) -> int:
    return 3 if beam > 1 else (1 if batch == 1 else 2)          # bench/run.py's cases


def worker(args) -> None:
    """One side's process: the seq2onnx on sys.path first is the side's code."""
    sys.path.append(str(ROOT))
    from bench.measure import make_sources
    from seq2onnx.runtime.translator import Translator
    tr = Translator(str(args.package), device="cpu", compute_type=args.variant, intra_threads=THREADS, inter_threads=1)
    cfg = tr.config
    sources = make_sources(args.batch, SRC_LEN, cfg.vocab_size, 1 + max(cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id),
                           cfg.eos_id, seed=seeds(args.batch, args.beam))

    def call():
        return tr.translate_ids(sources, beam_size=args.beam, min_decoding_length=LENGTH, max_decoding_length=LENGTH)
    call()
    times = []
    for _ in range(CALLS):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    print(json.dumps({"seconds": statistics.median(times), "tokens": [hyps[0].tokens for hyps in result]}))


def side_path(folder: Path, tree: Path) -> Path:
    """A folder holding seq2onnx/<package> links to `tree`'s source folders (seq2onnx is a namespace package)."""
    pkg = folder / "seq2onnx"
    pkg.mkdir(parents=True)
    for name in PACKAGES:
        (pkg / name).symlink_to(tree / name)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old_rev")
    ap.add_argument("package", type=Path)
    ap.add_argument("--variant", default="int8", choices=["int8", "float32"])
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.package = args.package.resolve()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old_tree), args.old_rev], check=True)
        try:
            paths = {"A": side_path(Path(tmp) / "a", old_tree), "B": side_path(Path(tmp) / "b", ROOT)}
            seconds = {"A": [], "B": []}
            tokens = {}
            cmd = [sys.executable, str(Path(__file__).resolve()), args.old_rev, str(args.package), "--worker",
                   "--variant", args.variant, "--batch", str(args.batch), "--beam", str(args.beam)]
            for _ in range(args.rounds):
                for side, path in paths.items():
                    out = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=str(path)), capture_output=True, text=True,
                                         check=True)
                    got = json.loads(out.stdout.strip().splitlines()[-1])
                    seconds[side].append(got["seconds"])
                    tokens[side] = got["tokens"]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], check=False)
    ratio = statistics.median(a / b for a, b in zip(seconds["A"], seconds["B"]))
    print(f"{args.package.parent.name} {args.variant} batch {args.batch} beam {args.beam}, {args.rounds} rounds: "
          f"A ({args.old_rev}) {statistics.median(seconds['A']):.3f} s, B (working tree) "
          f"{statistics.median(seconds['B']):.3f} s, B's speed-up {ratio:.3f}x, tokens equal {tokens['A'] == tokens['B']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
