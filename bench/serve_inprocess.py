"""Where a serve scheduler's time goes under load, without HTTP: closed-loop client threads submit the serve bench's
requests (bench/serve.py: its model, sentences and lengths) straight to a scheduler in this process.

    python bench/serve_inprocess.py [--policy continuous|dynamic|request ...] [--precision int8|fp32] [--beam 1]
                                    [--clients 64] [--seconds 12] [--rounds 1] [--instances 1] [--min-length-class 16]
                                    [--max-batch-rows 256] [--lengths buckets|exact|fixed|source] [--out bench/results]

Prints sentences/s and latency (all, and by output length L: continuous batching's latency grows with L, as under
processor sharing, a static batch's much less). With one policy, then the time inside the parts of the loop over the
counted seconds (encoder runs, decoder runs, keep, extend, the searches' advance; wrapped, so their own overhead is in
the figures), the rows of each decoder run, and per keep the rows that left and the rows that moved. With several,
they run in turn within each round (this machine is shared: runs minutes apart differ by 1.3x and more), side by
side in the tables; --out writes them as serve-inprocess-<lengths>.{json,md}. bench/serve.py compares the systems
over HTTP.
"""
from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

if __package__ in (None, ""):          # run as a script: python bench/serve_inprocess.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench.base_model import prepare  # noqa: E402
from bench.serve import LENGTHS, PRECISIONS, Settings, decoding_options, sentences  # noqa: E402

BENCH = Path(__file__).resolve().parent


class Timers:
    """Seconds and calls of wrapped methods, by label, counted once `on`."""

    def __init__(self):
        self.seconds, self.calls, self.on = collections.Counter(), collections.Counter(), False

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                if self.on:
                    self.seconds[label] += time.perf_counter() - t0
                    self.calls[label] += 1
        setattr(owner, name, timed)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--policy", nargs="+", choices=("continuous", "dynamic", "request"), default=["continuous"],
                    help="one: its latency and the loop's parts; more: side by side, in turn within each round")
    ap.add_argument("--rounds", type=int, default=1, help="the counted seconds split into rounds (several policies)")
    ap.add_argument("--out", type=Path, help="a results folder: writes serve-inprocess-<lengths>.{json,md} there")
    ap.add_argument("--precision", choices=list(PRECISIONS), default="int8")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=12.0, help="counted, after 1 s of warm-up")
    ap.add_argument("--instances", type=int, default=1, help="schedulers over the one model (serve --instances)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--min-length-class", type=int, default=16)
    ap.add_argument("--max-batch-rows", type=int, default=256, help="decoder rows a batch holds (serve's flag)")
    ap.add_argument("--max-wait-ms", type=float, default=5.0, help="dynamic: how long to collect")
    ap.add_argument("--lengths", choices=LENGTHS, default="buckets", help="output lengths (bench/serve.py's doc)")
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="bench/serve.py's model files")
    args = ap.parse_args(argv)

    from seq2onnx.runtime.decode import decoder_state, decoding
    from seq2onnx.runtime.serve import continuous, scheduler
    from seq2onnx.runtime.serve.pool import SchedulerPool
    from seq2onnx.runtime.translator import Translator

    st = Settings(lengths=args.lengths)
    folder = args.cache / "base"
    package = folder / "package"
    if not package.exists():
        raise SystemExit(f"no {package}: run python bench/serve.py first (it builds the model files)")
    items, _ = sentences(prepare(folder, st.preset, st.vocab_size, st.seed).tokens, st)
    with warnings.catch_warnings():             # the int8 variant's "--skip-int8-validation" (bench/build.py)
        warnings.simplefilter("ignore", UserWarning)
        translator = Translator(str(package), device="cpu", compute_type=PRECISIONS[args.precision],
                                intra_threads=args.threads, inter_threads=1)

    timers = Timers()
    engine = type(translator.engine)
    for owner, name, label in [(engine, "encode", "encoder runs"), (decoder_state.DecoderState, "step", "decoder runs"),
                               (decoder_state.DecoderState, "keep", "keep"),
                               (decoder_state.DecoderState, "extend", "extend"),
                               (decoding.Decoding, "advance", "advance (searches)")]:
        timers.wrap(owner, name, label)
    run_rows, keeps = collections.Counter(), collections.Counter()
    step, keep = decoder_state.DecoderState.step, decoder_state.DecoderState.keep

    def counted_step(self, last, *rest, **kw):
        if timers.on:
            run_rows[min(len(last) // 8 * 8, 128)] += 1
        return step(self, last, *rest, **kw)

    def counted_keep(self, parents):
        parents = np.asarray(parents)
        if timers.on and len(parents) < self.rows:
            keeps[(self.rows - len(parents), int((parents != np.arange(len(parents))).sum()))] += 1
        return keep(self, parents)
    decoder_state.DecoderState.step, decoder_state.DecoderState.keep = counted_step, counted_keep

    def make(policy: str):
        def made(**kw):
            kw["max_batch_rows"] = args.max_batch_rows
            if policy == "continuous":
                return continuous.ContinuousScheduler(translator, min_length_class=args.min_length_class, **kw)
            if policy == "dynamic":
                return scheduler.DynamicScheduler(translator, max_wait_ms=args.max_wait_ms, **kw)
            return scheduler.RequestScheduler(translator, **kw)
        return made

    def measure(policy: str, seconds: float, offset: int) -> List[Tuple[float, float, int]]:
        """Closed-loop clients against a fresh scheduler pool of `policy`: (start, end, L) of the requests that ended
        within the counted `seconds` (after 1 s of warm-up); each client's k-th request is sentence
        offset + c + k x clients, so that the rounds go on through the sentences."""
        sched = SchedulerPool(make(policy), args.instances, 256).start()
        begin = time.perf_counter() + 1.0
        end = begin + seconds
        records: List[Tuple[float, float, int]] = []

        def client(c: int) -> None:
            k = offset + c
            while time.perf_counter() < end:
                text, length = items[k % len(items)]
                k += args.clients
                options = decoding_options(length, args.beam, args.lengths)
                t0 = time.perf_counter()
                sched.submit("translate", [text], options).future.result()
                records.append((t0, time.perf_counter(), length))
        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(max(0.0, begin - time.perf_counter()))
        timers.on = len(args.policy) == 1
        time.sleep(max(0.0, end - time.perf_counter()))
        timers.on = False
        for t in threads:
            t.join()
        sched.close()
        return [r for r in records if begin <= r[1] <= end]

    done: Dict[str, list] = {p: [] for p in args.policy}
    for r in range(args.rounds):                  # the policies in turn within each round: side by side
        for policy in args.policy:
            done[policy] += measure(policy, args.seconds / args.rounds, r * 1000)

    lines, results = [], {}
    for policy in args.policy:
        latency = np.array([1000 * (b - a) for a, b, _ in done[policy]])
        lengths = np.array([n for _, _, n in done[policy]])
        by_length = {}
        for n in sorted(set(lengths.tolist())):
            x = latency[lengths == n]
            by_length[n] = {"sentences": len(x), "p50_ms": float(np.percentile(x, 50)),
                            "p99_ms": float(np.percentile(x, 99))}
        results[policy] = {"sentences_per_s": len(latency) / args.seconds, "tokens_per_s": lengths.sum() / args.seconds,
                           "p50_ms": float(np.percentile(latency, 50)), "p99_ms": float(np.percentile(latency, 99)),
                           "by_length": by_length}
        lines.append(f"{policy} x{args.instances}, {args.precision}, beam {args.beam}, {args.clients} clients, "
                     f"{args.seconds:g} s: {results[policy]['sentences_per_s']:.1f} sentences/s, "
                     f"{results[policy]['tokens_per_s']:.0f} tokens/s, p50 {results[policy]['p50_ms']:.0f} ms, "
                     f"p99 {results[policy]['p99_ms']:.0f} ms")
    lines.append("\nLatency by output length L (ms):\n")
    lines.append("| L | " + " | ".join(f"{p} sentences | {p} p50 | {p} p99" for p in args.policy) + " |")
    lines.append("|---:|" + "---:|---:|---:|" * len(args.policy))
    for n in sorted({n for r in results.values() for n in r["by_length"]}):
        cells = []
        for policy in args.policy:
            x = results[policy]["by_length"].get(n)
            cells += [str(x["sentences"]), f"{x['p50_ms']:.0f}", f"{x['p99_ms']:.0f}"] if x else ["0", "-", "-"]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    if len(args.policy) == 1:                     # the loop's parts: one policy's alone
        sentences_done = max(len(done[args.policy[0]]), 1)
        lines.append("\n| part | s | calls | ms a call | ms a sentence |\n|---|---:|---:|---:|---:|")
        for label, seconds in timers.seconds.items():
            calls = timers.calls[label]
            lines.append(f"| {label} | {seconds:.2f} | {calls} | {1000 * seconds / calls:.2f} | "
                         f"{1000 * seconds / sentences_done:.2f} |")
        lines.append("\ndecoder runs by rows (8s): " +
                     ", ".join(f"{k}-{k + 7}: {v}" for k, v in sorted(run_rows.items())))
        lines.append("keeps (rows left, rows moved), most frequent: " +
                     ", ".join(f"({a}, {b}): {n}" for (a, b), n in keeps.most_common(12)))
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        stem = f"serve-inprocess-{args.lengths}"
        title = (f"# Latency by output length, in process ({' vs '.join(args.policy)})\n\n"
                 f"`python bench/serve_inprocess.py {' '.join(sys.argv[1:] if argv is None else argv)}`: closed-loop "
                 f"client threads submit bench/serve.py's requests (its base model, sentences and lengths) straight "
                 f"to a scheduler in this process, the policies in turn within each of {args.rounds} rounds.\n\n")
        m = report.machine(None)
        text += "\n\n## Machine\n\n" + report.machine_text(m)
        report.write(args.out, stem, {"settings": vars(args) | {"out": str(args.out), "cache": str(args.cache)},
                                      "results": results, "machine": m}, title + text)
        print(f"\nwrote {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
