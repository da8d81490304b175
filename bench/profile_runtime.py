"""Where our runtime's decoding spends its time (default: batch 1 greedy).

    python bench/profile_runtime.py [PACKAGE] [--variant fp32|int8|fp16] [--batch 1] [--beam 1] [--length 64]
                                    [--device cpu|cuda]

Three views of the same work (source 32, exactly --length generated tokens):
  1. the runtime end to end (Translator), with cProfile: the Python functions that take the time
     and the share spent inside onnxruntime's InferenceSession.run;
  2. a bare greedy loop over the package's graphs on batch x beam rows (encoder once, then
     decoder_step feeding present -> past, argmax in numpy): the floor for any runtime built on
     these graphs as they are (for beam, the same graph work without the beam bookkeeping); for a package whose
     step writes its cache in place (contract 3) no floor: the loop feeds past and takes present as new arrays,
     so onnxruntime copies the cache every step, where the runtime binds one buffer for both;
  3. onnxruntime's own profiler on that loop: decoder time per operator type, per step.
PACKAGE defaults to the benchmark's package (bench/.cache/base/package, built by bench/run.py).
--device cuda runs view 1 alone (views 2 and 3 time the CPU provider).
"""
from __future__ import annotations

import argparse
import cProfile
import glob
import json
import os
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnxruntime as ort

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.engines import Seq2OnnxRuntime  # noqa: E402
from bench.measure import make_sources  # noqa: E402
from seq2onnx.runtime.package.config import ModelConfig  # noqa: E402
from seq2onnx.runtime.package.graph_io import PAST_LENGTH, cache_names  # noqa: E402

BENCH = Path(__file__).resolve().parent


def _session(path: Path, threads: int, profile_prefix: str = "") -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def bare_loop(encoder: ort.InferenceSession, decoder: ort.InferenceSession, cfg: ModelConfig,
              sources, length: int):
    """Greedy decoding straight on the graphs (CONTRACTS.md I/O), equal-length sources.
    -> (tokens per row, seconds per step list)"""
    ids = np.array(sources, dtype=np.int64)                                 # [R, S]
    mask = np.ones_like(ids)
    rows = len(sources)
    cross = dict(zip([o.name for o in encoder.get_outputs()],
                     encoder.run(None, {"input_ids": ids, "attention_mask": mask})))
    past_length = next((i for i in decoder.get_inputs() if i.name == PAST_LENGTH), None)
    fixed = past_length is not None                                     # format 2/3: a cache of capacity `length`
    shape = (rows, cfg.n_heads, length if fixed else 0, cfg.head_dim)
    past = {name: np.zeros(shape, np.float32) for name in cache_names("past", cfg.decoder_layers)}
    out_names = [o.name for o in decoder.get_outputs()]
    last = np.full((rows, 1), cfg.bos_id, dtype=np.int64)
    tokens, step_times = [], []
    for step in range(length):
        t0 = time.perf_counter()
        feed = {"input_ids": last, "encoder_attention_mask": mask, **past, **cross}
        if fixed:     # contract 2: one 0-d past_length for all rows; contract 3: each row's, [R]
            feed[PAST_LENGTH] = np.full((rows,) * len(past_length.shape), step, dtype=np.int64)
        outs = dict(zip(out_names, decoder.run(None, feed)))
        logp = outs["log_probs"]                                            # [R, V]
        logp[:, [cfg.pad_id, cfg.bos_id, cfg.eos_id]] = -np.inf             # EOS forbidden: min length = length
        last = np.argmax(logp, axis=1)[:, None]                             # [R, 1]
        past = {k.replace("present", "past"): v for k, v in outs.items() if k.startswith("present")}
        tokens.append(last[:, 0])
        step_times.append(time.perf_counter() - t0)
    return np.stack(tokens, axis=1).tolist(), step_times


def op_profile(trace_file: str, steps: int):
    """onnxruntime's trace -> ([(op type, ms per step, share)], kernel ms per step, run ms per step),
    counting only the last `steps` session runs (the earlier ones are warm-up)."""
    with open(trace_file) as f:
        events = json.load(f)
    runs = sorted((ev["ts"], ev["ts"] + ev["dur"]) for ev in events if ev.get("name") == "model_run")[-steps:]
    start = runs[0][0]
    per_op = defaultdict(float)
    for ev in events:
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time") and ev["ts"] >= start:
            per_op[ev.get("args", {}).get("op_name", "?")] += ev["dur"] / 1000.0    # us -> ms
    total = sum(per_op.values())
    rows = sorted(per_op.items(), key=lambda kv: -kv[1])
    run_ms = sum(end - begin for begin, end in runs) / 1000.0
    return [(op, ms / steps, ms / total) for op, ms in rows], total / steps, run_ms / steps


def phase_times(engine: Seq2OnnxRuntime, sources, beam: int, length: int, calls: int = 5) -> dict:
    """ms per generated step of the engine's encode, step (the decoder run, the log-probs back in numpy) and take
    (beam reorders), and of the rest (the search in numpy, Python), from timers around the engine's methods."""
    eng = engine.translator.engine
    spent = defaultdict(float)

    def timed(name, method):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t0
        return wrapper

    for name in ("encode", "step", "take"):
        setattr(eng, name, timed(name, getattr(eng, name)))
    per_call = []
    try:
        for _ in range(calls):
            spent.clear()
            total = engine.run(sources, beam, length)[1]
            per_call.append({**spent, "rest": total - sum(spent.values()), "total": total})
    finally:
        for name in ("encode", "step", "take"):
            delattr(eng, name)                  # the class's methods again
    keys = ["encode", "step", "take", "rest", "total"]
    return {k: 1000 * float(np.median([c.get(k, 0.0) for c in per_call])) / length for k in keys}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("package", nargs="?", type=Path, default=BENCH / ".cache" / "base" / "package")
    ap.add_argument("--variant", default="fp32", choices=["fp32", "int8", "fp16"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--length", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--beam", type=int, default=1, help="part 1 only; parts 2-3 run greedy on batch*beam rows")
    args = ap.parse_args(argv)
    manifest = json.loads((args.package / "manifest.json").read_text())
    cfg = ModelConfig.from_dict(manifest["config"])
    files = manifest["variants"][args.variant]
    sources = make_sources(args.batch, 32, cfg.vocab_size, 4, cfg.eos_id, seed=7)
    case = f"batch {args.batch} " + ("greedy" if args.beam == 1 else f"beam {args.beam}")
    target_tokens = args.batch * args.length

    # 1. the runtime, end to end
    engine = Seq2OnnxRuntime(args.package, args.variant, args.threads, args.device)
    engine.run(sources, args.beam, args.length)                             # warm-up
    runtime_s = float(np.median([engine.run(sources, args.beam, args.length)[1] for _ in range(5)]))
    prof = cProfile.Profile()
    prof.enable()
    runtime_tokens, _ = engine.run(sources, args.beam, args.length)
    prof.disable()
    stats = pstats.Stats(prof)
    in_ort = sum(v[3] for k, v in stats.stats.items() if k[2] == "run" and "onnxruntime" in k[0])
    total = sum(v[2] for v in stats.stats.values())
    print(f"## 1. runtime ({args.variant}), {case}, {args.length} tokens: {1000 * runtime_s / args.length:.2f} "
          f"ms/step ({target_tokens / runtime_s:.0f} target tok/s, median of 5, encoder included)\n"
          f"under cProfile, {100 * in_ort / total:.0f}% of the time is inside InferenceSession.run "
          f"(encoder and decoder), {100 * (1 - in_ort / total):.0f}% in Python/numpy\n")
    stats.sort_stats("tottime").print_stats(12)
    phases = phase_times(engine, sources, args.beam, args.length)
    print("where a step's time goes (engine methods timed, median of 5 calls): "
          + ", ".join(f"{name} {ms:.2f}" for name, ms in phases.items()) + " ms/step\n")
    if args.device != "cpu":
        return 0

    # 2. + 3. the bare loop on batch * beam rows, with onnxruntime's profiler on the decoder
    rows = [s for s in sources for _ in range(args.beam)]
    few = files.get("few_rows")             # the graph the runtime steps these rows with (ArrayEngine.decoder_for)
    decoder_file = few["decoder_step"] if few and len(rows) <= few["max_rows"] else files["decoder_step"]
    with tempfile.TemporaryDirectory() as tmp:
        encoder = _session(args.package / files["encoder"], args.threads)
        plain = _session(args.package / decoder_file, args.threads)
        bare_loop(encoder, plain, cfg, rows, args.length)                  # warm-up
        bare_tokens, step_times = bare_loop(encoder, plain, cfg, rows, args.length)
        profiled = _session(args.package / decoder_file, args.threads, os.path.join(tmp, "decoder"))
        for _ in range(2):                                                 # warm-up, then counted
            bare_loop(encoder, profiled, cfg, rows, args.length)
        profiled.end_profiling()
        (trace,) = glob.glob(os.path.join(tmp, "decoder*.json"))
        ops, kernel_ms, run_ms = op_profile(trace, args.length)
    step_ms = 1000 * float(np.median(step_times))
    same = f"; same tokens as the runtime: {bare_tokens == runtime_tokens}" if args.beam == 1 else ""
    print(f"## 2. bare greedy loop over the graphs ({decoder_file}), {len(rows)} rows: {step_ms:.2f} ms/step "
          f"median{same}\n")
    print(f"## 3. decoder under onnxruntime's profiler ({len(rows)} rows): {run_ms:.2f} ms/step per session run, "
          f"of which {kernel_ms:.2f} in kernels (with intra-op threads a kernel's time is its wall time)\n")
    print("| op type | ms/step | share |\n|---|---:|---:|")
    for op, ms, share in ops[:15]:
        print(f"| {op} | {ms:.3f} | {100 * share:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
