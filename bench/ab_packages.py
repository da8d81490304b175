"""Two model packages of the same weights, A and B, timed in one process through our runtime.

    python bench/ab_packages.py A_PACKAGE B_PACKAGE [--rounds 7] [--cases b16k4 b1g b16g] [--variants int8 fp32]

For changes to the exported graphs, where only a same-process comparison is trustworthy on a shared
machine. bench/run.py's setup: sources of 32 ids (31 random non-special ids, then EOS; the seeds of
bench/run.py's cases), exactly 64 generated tokens (min = max decoding length), 2 intra-op threads.
Per case and variant (int8, fp32): one warm-up run of each side, then rounds A B A B ...; reported:
median target tokens/s of each side, the median of the per-round time ratios A/B, and whether the
best hypotheses' tokens are equal (on random weights int8 tokens are not expected to be: a one-ulp
change of any float32 input moves the int8 graph's log-probs by ~0.1-0.5, as its activations are
quantised at run time).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):          # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import make_sources  # noqa: E402
from seq2onnx.runtime.translator import Translator  # noqa: E402

LENGTH, SRC_LEN, THREADS = 64, 32, 2
CASES = {"b1g": (1, 1, 1), "b16g": (16, 1, 2), "b16k4": (16, 4, 3)}   # batch, beam, source seed (bench/run.py)
CASES.update({f"b{n}g": (n, 1, 2) for n in (2, 3, 4, 5, 6, 8)})         # steps of few rows (the int8 few-rows step)
CASES.update({"b1k2": (1, 2, 3), "b1k4": (1, 4, 3), "b64g": (64, 1, 2), "b64k4": (64, 4, 3)})
VARIANTS = {"int8": "int8", "fp32": "float32"}


def run(tr: Translator, sources, beam: int):
    start = time.perf_counter()
    res = tr.translate_ids(sources, beam_size=beam, min_decoding_length=LENGTH, max_decoding_length=LENGTH)
    return [hyps[0].tokens for hyps in res], time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=["b16k4", "b1g", "b16g"])
    ap.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    args = ap.parse_args(argv)
    variants = {v: VARIANTS[v] for v in args.variants}
    trs = {(v, side): Translator(str(pkg), device="cpu", compute_type=ct, intra_threads=THREADS, inter_threads=1)
           for v, ct in variants.items() for side, pkg in (("A", args.a), ("B", args.b))}
    for (v, side), tr in trs.items():
        print(f"{side} {v}: {tr.package.root}, cross_per_sentence={tr.engine.cross_per_sentence}", file=sys.stderr)
    rows = []
    for case in args.cases:
        batch, beam, seed = CASES[case]
        cfg = trs[(args.variants[0], "A")].config
        sources = make_sources(batch, SRC_LEN, cfg.vocab_size, 1 + max(cfg.pad_id, cfg.bos_id, cfg.eos_id,
                                                                        cfg.unk_id), cfg.eos_id, seed=seed)
        for v in variants:
            a, b = trs[(v, "A")], trs[(v, "B")]
            run(a, sources, beam)
            run(b, sources, beam)
            ta, tb, equal = [], [], 0
            for _ in range(args.rounds):
                time.sleep(0.1)
                out_a, da = run(a, sources, beam)
                time.sleep(0.1)
                out_b, db = run(b, sources, beam)
                ta.append(da)
                tb.append(db)
                equal = sum(x == y for x, y in zip(out_a, out_b))
            row = {"case": case, "variant": v, "rounds": args.rounds,
                   "a_tok_s": batch * LENGTH / statistics.median(ta), "b_tok_s": batch * LENGTH / statistics.median(tb),
                   "a_over_b_time": statistics.median(x / y for x, y in zip(ta, tb)),
                   "rows_equal": f"{equal}/{batch}", "a_s": ta, "b_s": tb}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    print(f"| case | variant | A tok/s | B tok/s | speed-up of B (median of per-round A/B times, {args.rounds} rounds) "
          "| best rows equal |")
    print("|---|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['case']} | {r['variant']} | {r['a_tok_s']:.0f} | {r['b_tok_s']:.0f} | {r['a_over_b_time']:.3f}x "
              f"| {r['rows_equal']} |")
    print(f"\nload average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
