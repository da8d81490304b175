"""Benchmark seq2onnx against CTranslate2, HF transformers and HF Optimum on the same weights.

    python bench/run.py                 # the full run (several minutes), writes bench/results/latest.{json,md}
    python bench/run.py --quick         # a smoke run on a tiny model, writes bench/.cache/results/quick.*
    python bench/run.py --device cuda   # on an NVIDIA GPU, writes bench/results/latest-cuda.{json,md}

See bench/README.md for what each system is and how the numbers are taken.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import List

if __package__ in (None, ""):          # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import engines as E  # noqa: E402
from bench import report  # noqa: E402
from bench.base_model import SPECIALS, prepare  # noqa: E402
from bench.build import build_all  # noqa: E402
from bench.measure import CASES, make_sources, matching_rows, run_case, run_scaling  # noqa: E402

BENCH = Path(__file__).resolve().parent
SYSTEMS = ["ours", "torch", "ct2", "hf", "optimum"]
BASELINE = "CTranslate2 float32"
OURS_FP32 = "seq2onnx fp32"
REFERENCE = E.Seq2OnnxTorch.name


@dataclass
class Settings:
    preset: str = "base"               # Transformer-base: d_model 512, 6+6 layers, 8 heads, FFN 2048
    vocab_size: int = 8000
    seed: int = 0                      # weights and sources
    src_len: int = 32                  # source positions, EOS included
    length: int = 64                   # generated tokens, exactly
    rounds: int = 7                    # counted rounds after one warm-up
    threads: int = 2                   # intra-op threads of every system
    scaling_generated: List[int] = field(default_factory=lambda: [32, 128, 256])
    scaling_sources: List[int] = field(default_factory=lambda: [16, 64, 256])
    scaling_rounds: int = 3


QUICK = Settings(preset="tiny", vocab_size=1000, length=16, rounds=2, scaling_generated=[8, 16, 32],
                 scaling_sources=[8, 16, 32], scaling_rounds=1)


def make_engines(art, bm, systems: List[str], threads: int, device: str = "cpu"):
    """CPU: fp32 and int8 of each system. CUDA: fp32 and fp16 (int8 is a CPU format here)."""
    never = (bm.config.pad_id, bm.config.bos_id)                 # ids no system may generate
    reduced = "fp16" if device == "cuda" else "int8"
    out, worker = [], None
    if "ours" in systems:
        out += [E.Seq2OnnxRuntime(art.package, v, threads, device) for v in ("fp32", reduced)]
    if "torch" in systems:
        out.append(E.Seq2OnnxTorch(bm.checkpoint, threads, device))
    if "ct2" in systems:
        out += [E.CTranslate2(art.ct2, ct, bm.tokens, never, threads, device)
                for ct in ("float32", "float16" if device == "cuda" else "int8")]
    if "hf" in systems:
        out += [E.HFTorch(bm.checkpoint, threads, device, p) for p in (["fp32", "fp16"] if device == "cuda" else ["fp32"])]
    if "optimum" in systems:
        worker = E.OptimumWorker(art.overlay, art.optimum, threads)
        out += [E.OptimumORT(worker, "fp32"), E.OptimumORT(worker, "int8")]
    return out, worker


def fidelity(results, names: List[str]):
    """Rows equal, per case: our fp32 against CTranslate2 float32, and every system against the reference."""
    checks = {}
    pairs = [(OURS_FP32, BASELINE)] + [(n, REFERENCE) for n in names if n != REFERENCE]
    for a, b in pairs:
        if a in names and b in names:
            checks[f"{a} = {b}"] = {case: f"{matching_rows(res.outputs[a], res.outputs[b])}/{len(res.outputs[a])}"
                                    for case, res in results.items()}
    return checks


def cuda_systems(asked: List[str]) -> List[str]:
    """The asked systems that can run on CUDA here; says on stderr why any other is left out."""
    import torch

    from seq2onnx.runtime.session import cuda_status

    ok, reason = cuda_status()
    if not (ok and torch.cuda.is_available()):
        raise SystemExit(f"--device cuda: no usable GPU (onnxruntime: {reason}; torch.cuda.is_available() = "
                         f"{torch.cuda.is_available()}); run without --device cuda")
    keep = [s for s in asked if s != "optimum"]
    if "optimum" in asked:
        print("[cuda] Optimum left out: its worker runs on the CPU provider only", file=sys.stderr)
    if "ct2" in keep:
        try:
            import ctranslate2
            n = ctranslate2.get_cuda_device_count()
        except Exception as e:  # noqa: BLE001 - not installed, or a build without CUDA libraries
            n, why = 0, f"{type(e).__name__}: {e}"
        else:
            why = "its build sees no CUDA device"
        if n == 0:
            keep.remove("ct2")
            print(f"[cuda] CTranslate2 left out: {why}", file=sys.stderr)
    return keep


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 rounds, short outputs: a smoke run")
    ap.add_argument("--rounds", type=int, help="counted rounds per case (default 7, quick 2)")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS, help="systems to run (default all)")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling measurements")
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="model files (default bench/.cache)")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results, quick: CACHE/results)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu (default): every system on 2 CPU threads; cuda: the systems that run on an "
                         "NVIDIA GPU, fp32 and fp16 (ours, our PyTorch reference, HF transformers, CTranslate2 "
                         "when its build has CUDA; not Optimum), no scaling, results in latest-cuda.*")
    args = ap.parse_args(argv)
    if args.device == "cuda":
        args.systems, args.no_scaling = cuda_systems(args.systems), True
    st = QUICK if args.quick else Settings()
    if args.rounds:
        st = replace(st, rounds=args.rounds)
    cache = args.cache / ("quick" if args.quick else "base")
    out_dir = args.out or (args.cache / "results" if args.quick else BENCH / "results")
    stem = ("quick" if args.quick else "latest") + ("-cuda" if args.device == "cuda" else "")

    started, load_before = time.time(), os.getloadavg()
    import torch
    torch.set_num_threads(st.threads)
    bm = prepare(cache, st.preset, st.vocab_size, st.seed)
    art = build_all(cache, bm, args.cache / "optimum-site", ours="ours" in args.systems, ct2="ct2" in args.systems,
                    hf="hf" in args.systems, optimum="optimum" in args.systems, fp16=args.device == "cuda")
    engines, worker = make_engines(art, bm, args.systems, st.threads, args.device)
    names = [e.name for e in engines]
    baseline = BASELINE if BASELINE in names else "HF transformers (torch)"
    first_id = len(SPECIALS)
    try:
        results = {}
        for i, case in enumerate(CASES):
            sources = make_sources(case.batch, st.src_len, bm.config.vocab_size, first_id, bm.config.eos_id,
                                   seed=st.seed + 1 + i)
            results[case.name] = run_case(engines, case, sources, st.length, st.rounds, baseline)
        scaling = []
        if not args.no_scaling:
            scaled = [e for e in engines if e.name in (OURS_FP32, "seq2onnx int8", BASELINE)]
            scaling = run_scaling(scaled, lambda n: make_sources(1, n, bm.config.vocab_size, first_id,
                                                                bm.config.eos_id, seed=st.seed + 100 + n),
                                  st.scaling_generated, st.scaling_sources, st.src_len, st.length, st.scaling_rounds)
    finally:
        for e in engines:
            e.close()
        if worker is not None:
            worker.close()

    checks = fidelity(results, names)
    elapsed = time.time() - started
    where = (f"on {torch.cuda.get_device_name(0)} (CUDA)" if args.device == "cuda"
             else f"{st.threads} intra-op threads everywhere")
    md = [f"# seq2onnx benchmark ({stem})", "",
          f"Model: preset {st.preset}, vocab {st.vocab_size}, random weights (seed {st.seed}); "
          f"source {st.src_len} ids (EOS included), exactly {st.length} generated tokens, "
          f"{where}; median of {st.rounds} interleaved rounds after a warm-up.", "",
          f"## Target tokens/s (ratio to {baseline}, same rounds)", "",
          report.speed_table(results, names, baseline), "",
          "## Fidelity: output rows equal, row by row", "", report.fidelity_table(checks, list(results)), ""]
    if scaling:
        md += [f"## Scaling: ms per generated token, batch 1 greedy (source {st.src_len} when varying the generated "
               f"length, {st.length} generated when varying the source); median of {st.scaling_rounds} rounds",
               "", report.scaling_table(scaling, st.scaling_generated, st.scaling_sources), ""]
    mach = report.machine(art.overlay)
    if args.device == "cuda":
        mach["gpu"] = torch.cuda.get_device_name(0)
    md += ["## Machine", "", ("GPU " + mach["gpu"] + "; " if "gpu" in mach else "") +
           f"{mach['cpu']}, {mach['cpus_usable']} usable CPUs, {mach['memory']}, {mach['os']}, "
           f"Python {mach['python']}; load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; "
           f"run took {elapsed / 60:.1f} min; git {mach['git_commit']}{' (dirty)' if mach['git_dirty'] else ''}; "
           f"{mach['date']}.", "",
           "Packages: " + ", ".join(f"{k} {v}" for k, v in mach["packages"].items()) + "."]
    markdown = "\n".join(md)
    print(markdown)
    data = {"settings": asdict(st), "device": args.device, "machine": mach, "baseline": baseline, "systems": names,
            "timings": [t for res in results.values() for t in res.timings], "fidelity": checks,
            "scaling": scaling, "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
            "elapsed_s": elapsed}
    report.write(out_dir, stem, data, markdown)
    print(f"\nwrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
