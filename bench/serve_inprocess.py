"""Where a serve scheduler's time goes under load, without HTTP: closed-loop client threads submit the serve bench's
requests (bench/serve.py: its model, sentences and lengths) straight to a scheduler in this process.

    python bench/serve_inprocess.py [--policy continuous|dynamic|request] [--precision int8|fp32] [--beam 1]
                                    [--clients 64] [--seconds 12] [--instances 1] [--min-length-class 16]
                                    [--lengths buckets|exact|fixed|source]

Prints sentences/s and latency (all, and by output length L: continuous batching's latency grows with L, a static
batch's much less), then the time inside the parts of the loop over the counted seconds (encoder runs, decoder runs,
keep, extend, the searches' advance; wrapped, so their own overhead is in the figures), the rows of each decoder run,
and per keep the rows that left and the rows that moved. A profile, not a comparison: bench/serve.py compares the
systems over HTTP, in turn within the same minutes (this machine is shared: runs minutes apart differ by 1.3x and
more).
"""
from __future__ import annotations

import argparse
import collections
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

if __package__ in (None, ""):          # run as a script: python bench/serve_inprocess.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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
    ap.add_argument("--policy", choices=("continuous", "dynamic", "request"), default="continuous")
    ap.add_argument("--precision", choices=list(PRECISIONS), default="int8")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=12.0, help="counted, after 1 s of warm-up")
    ap.add_argument("--instances", type=int, default=1, help="schedulers over the one model (serve --instances)")
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--min-length-class", type=int, default=16)
    ap.add_argument("--max-wait-ms", type=float, default=5.0, help="dynamic: how long to collect")
    ap.add_argument("--lengths", choices=LENGTHS, default="buckets", help="output lengths (bench/serve.py's doc)")
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="bench/serve.py's model files")
    args = ap.parse_args(argv)

    from seq2onnx.runtime import decoder_state, decoding
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

    def make(**kw):
        if args.policy == "continuous":
            return continuous.ContinuousScheduler(translator, min_length_class=args.min_length_class, **kw)
        if args.policy == "dynamic":
            return scheduler.DynamicScheduler(translator, max_wait_ms=args.max_wait_ms, **kw)
        return scheduler.RequestScheduler(translator, **kw)
    sched = SchedulerPool(make, args.instances, 256).start()

    begin = time.perf_counter() + 1.0
    end = begin + args.seconds
    records = []

    def client(c: int) -> None:
        k = c
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
    timers.on = True
    time.sleep(max(0.0, end - time.perf_counter()))
    timers.on = False
    for t in threads:
        t.join()
    sched.close()

    done = [r for r in records if begin <= r[1] <= end]
    latency = np.array([1000 * (b - a) for a, b, _ in done])
    lengths = np.array([n for _, _, n in done])
    print(f"{args.policy} x{args.instances}, {args.precision}, beam {args.beam}, {args.clients} clients, "
          f"{args.seconds:g} s: {len(done) / args.seconds:.1f} sentences/s, {lengths.sum() / args.seconds:.0f} "
          f"tokens/s, p50 {np.percentile(latency, 50):.0f} ms, p99 {np.percentile(latency, 99):.0f} ms")
    print("\n| L | sentences | p50 ms | p99 ms |\n|---:|---:|---:|---:|")
    for n in sorted(set(lengths.tolist())):
        x = latency[lengths == n]
        print(f"| {n} | {len(x)} | {np.percentile(x, 50):.0f} | {np.percentile(x, 99):.0f} |")
    print("\n| part | s | calls | ms a call | ms a sentence |\n|---|---:|---:|---:|---:|")
    for label, seconds in timers.seconds.items():
        calls = timers.calls[label]
        print(f"| {label} | {seconds:.2f} | {calls} | {1000 * seconds / calls:.2f} | "
              f"{1000 * seconds / max(len(done), 1):.2f} |")
    print("\ndecoder runs by rows (8s):", ", ".join(f"{k}-{k + 7}: {v}" for k, v in sorted(run_rows.items())))
    print("keeps (rows left, rows moved), most frequent:",
          ", ".join(f"({a}, {b}): {n}" for (a, b), n in keeps.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
