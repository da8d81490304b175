"""Benchmark seq2onnx against CTranslate2, HF transformers and HF Optimum on the same weights.

    python bench/run.py                 # the full run (~20 minutes), writes bench/results/latest.{json,md}
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
from typing import Dict, List, Optional

if __package__ in (None, ""):          # run as a script: python bench/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import engines as E  # noqa: E402
from bench import floor, memory, report  # noqa: E402
from bench.base_model import SPECIALS, BenchModel, prepare  # noqa: E402
from bench.build import Artifacts, build_all  # noqa: E402
from bench.measure import CASES, GPU_CASES, Case, make_sources, matching_rows, run_case, run_scaling  # noqa: E402

BENCH = Path(__file__).resolve().parent
SYSTEMS = ["ours", "torch", "ct2", "hf", "optimum"]
BASELINE = "CTranslate2 float32"
OURS_FP32 = "seq2onnx fp32"
REFERENCE = E.Seq2OnnxTorch.name


@dataclass
class Settings:
    preset: str = "base"               # Transformer-base: d_model 512, 6+6 layers, 8 heads, FFN 2048
    # one model per vocabulary size, same preset and seed; the first is the headline model (scaling runs on it
    # alone), the others' cases are rows of their own ("batch 1 greedy, vocab 32000")
    vocab_sizes: List[int] = field(default_factory=lambda: [8000, 32000])
    seed: int = 0                      # weights and sources
    src_len: int = 32                  # source positions, EOS included
    length: int = 64                   # generated tokens, exactly
    rounds: int = 7                    # counted rounds after one warm-up (the first vocabulary's cases)
    other_vocab_rounds: int = 5        # the same for the other vocabularies: keeps the full run near 20 minutes
    threads: int = 2                   # intra-op threads of every system
    scaling_generated: List[int] = field(default_factory=lambda: [32, 128, 256])
    scaling_sources: List[int] = field(default_factory=lambda: [16, 64, 256])
    scaling_rounds: int = 3
    floor_array_mib: int = 512         # floor.bandwidth: two arrays of this size, far larger than the CPU cache
    floor_tries: int = 5
    case_floor_tries: int = 2          # the probe before each counted round of the batch-1 case (floor_summary)


QUICK = Settings(preset="tiny", vocab_sizes=[1000, 3000], length=16, rounds=2, other_vocab_rounds=1,
                 scaling_generated=[8, 16, 32], scaling_sources=[8, 16, 32], scaling_rounds=1,
                 floor_array_mib=128, floor_tries=2, case_floor_tries=1)


def system_variants(systems: List[str], device: str = "cpu"):
    """(system, variant) of every engine, in table order. CPU: fp32 and int8 of each system; CUDA: fp32 and
    fp16 (our int8 is a CPU format), and CTranslate2's int8_float16 (int8 weights, float16 activations: its GPU
    int8)."""
    cuda = device == "cuda"
    variants = {"ours": ["fp32", "fp16" if cuda else "int8"], "torch": ["fp32"],
                "ct2": ["float32", "float16", "int8_float16"] if cuda else ["float32", "int8"],
                "hf": ["fp32", "fp16"] if cuda else ["fp32"],
                "optimum": ["fp32", "int8"]}
    return [(s, v) for s in SYSTEMS if s in systems for v in variants[s]]


def engine_files(art: Artifacts, bm: BenchModel) -> Dict[str, Optional[str]]:
    """What engines.make_engine reads, as plain strings (memory.py's children get them as JSON)."""
    paths = {"package": art.package, "checkpoint": bm.checkpoint, "ct2": art.ct2, "optimum": art.optimum,
             "overlay": art.overlay}
    return {k: None if v is None else str(v) for k, v in paths.items()}


def never_generated(bm: BenchModel) -> List[int]:
    return [bm.config.pad_id, bm.config.bos_id]


def make_engines(art, bm, systems: List[str], threads: int, device: str = "cpu"):
    """Every engine of the asked systems; the fp32 and int8 Optimum engines share one worker process."""
    worker = E.OptimumWorker(art.overlay, art.optimum, threads) if "optimum" in systems else None
    try:
        return [E.make_engine(s, v, engine_files(art, bm), threads, device, bm.tokens, never_generated(bm), worker)
                for s, v in system_variants(systems, device)], worker
    except BaseException:
        if worker is not None:
            worker.close()
        raise


def case_label(case: Case, vocab_size: int, st: Settings) -> str:
    """The case's row: its plain name on the first vocabulary, 'batch 1 greedy, vocab 32000' on the others."""
    return case.name if vocab_size == st.vocab_sizes[0] else f"{case.name}, vocab {vocab_size}"


def cases_for(device: str) -> List[Case]:
    return GPU_CASES if device == "cuda" else CASES


def case_sources(bm: BenchModel, st: Settings, cases: List[Case] = CASES) -> List[list]:
    """The sources of each case, fixed by the seed (the same for every system and for memory.py)."""
    return [make_sources(case.batch, st.src_len, bm.config.vocab_size, len(SPECIALS), bm.config.eos_id,
                         seed=st.seed + 1 + i) for i, case in enumerate(cases)]


def measure_memory(art: Artifacts, bm: BenchModel, systems: List[str], st: Settings) -> Dict[str, float]:
    """Peak RSS (MiB) of each engine, each in a process of its own running every case once (memory.py)."""
    cases = [{"sources": sources, "beam": case.beam} for case, sources in zip(CASES, case_sources(bm, st))]
    out = {}
    for system, variant in system_variants(systems):
        spec = {"system": system, "variant": variant, "files": engine_files(art, bm), "threads": st.threads,
                "tokens": bm.tokens, "never": never_generated(bm), "length": st.length, "cases": cases}
        name, out[name] = memory.peak_rss_mib(spec)
        print(f"  memory, vocab {bm.config.vocab_size}: {name} {out[name]:.0f} MiB", file=sys.stderr, flush=True)
    return out


def floor_summary(bandwidth: Dict, step_bytes: Dict[int, Dict], results, st: Settings,
                  probes: Optional[Dict[int, List[float]]] = None) -> Dict:
    """The floor section of the JSON: bandwidth, and per vocabulary and variant the bytes per step, the floor
    tokens/s and our batch-1 greedy tokens/s of this run as a percentage of it; the top-level fp32_tok_s /
    int8_tok_s are the first vocabulary's.

    Two floors per vocabulary, both measured in this run with the same probe (floor.bandwidth, its best try): at the
    start, before any model is loaded (`floor_tok_s`, `percent_of_floor`), and beside the batch-1 case itself, the
    best of the probes taken before each of its counted rounds (`floor_tok_s_during_case`,
    `percent_of_floor_during_case`). This machine's bandwidth moves with its neighbours' load
    (bench/results/shared-machine.md): the second floor is the one taken under the conditions the case ran in.
    A third, `read_floor_tok_s` (`percent_of_read_floor`): the same start probe's best read on st.threads threads
    alone. The floor takes the best of read and copy, and a copy's bytes read + written can come out above what a
    read reaches (shared-machine.md), while a decoder step's weights are only read."""
    by_vocab = {}
    read_gb_s = max(bandwidth.get("read_gb_s", {}).get(str(st.threads)) or [0.0])
    for vocab, variants in step_bytes.items():
        res = results.get(case_label(CASES[0], vocab, st))
        ours = {t.system: t.tokens_per_s for t in res.timings} if res else {}
        during = max((probes or {}).get(vocab) or [0.0])
        for variant, f in variants.items():
            if read_gb_s:
                f.update(read_gb_s=read_gb_s, read_floor_tok_s=round(read_gb_s * floor.GB / f["bytes_per_step"], 1))
            if during:
                f.update(bandwidth_during_case_gb_s=during, probes_during_case_gb_s=probes[vocab],
                         floor_tok_s_during_case=round(during * floor.GB / f["bytes_per_step"], 1))
            tok_s = ours.get(f"seq2onnx {variant}")
            if tok_s is not None:
                f.update(ours_tok_s=round(tok_s, 1), percent_of_floor=round(100 * tok_s / f["floor_tok_s"], 1))
                if during:
                    f["percent_of_floor_during_case"] = round(100 * tok_s / f["floor_tok_s_during_case"], 1)
                if read_gb_s:
                    f["percent_of_read_floor"] = round(100 * tok_s / f["read_floor_tok_s"], 1)
        by_vocab[str(vocab)] = variants
    head = by_vocab.get(str(st.vocab_sizes[0]), {})
    return {"bandwidth_gb_s": bandwidth["bandwidth_gb_s"], "fp32_tok_s": head.get("fp32", {}).get("floor_tok_s"),
            "int8_tok_s": head.get("int8", {}).get("floor_tok_s"), "vocab_size": st.vocab_sizes[0],
            "by_vocab": by_vocab, "bandwidth": bandwidth, "case": CASES[0].name}


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

    from seq2onnx.runtime.engine.session import cuda_status

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
    ap.add_argument("--rounds", type=int, help="counted rounds per case (default 7 for vocab 8000 and 5 for "
                                               "vocab 32000; quick 2 and 1)")
    ap.add_argument("--vocab-sizes", nargs="+", type=int, help="one model per vocabulary size (default 8000 32000; "
                                                                  "quick 1000 3000)")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=SYSTEMS, help="systems to run (default all)")
    ap.add_argument("--no-scaling", action="store_true", help="skip the scaling measurements")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak memory of each system (memory.py)")
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="model files (default bench/.cache)")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results, quick: CACHE/results)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu (default): every system on 2 CPU threads; cuda: the systems that run on an "
                         "NVIDIA GPU, fp32 and fp16 (ours, our PyTorch reference, HF transformers, CTranslate2 "
                         "when its build has CUDA; not Optimum), no scaling, results in latest-cuda.*")
    args = ap.parse_args(argv)
    cpu = args.device == "cpu"                      # peak memory and the memory floor are CPU figures
    cases = cases_for(args.device)
    if not cpu:
        args.systems, args.no_scaling = cuda_systems(args.systems), True
    st = QUICK if args.quick else Settings()
    if args.rounds:
        st = replace(st, rounds=args.rounds, other_vocab_rounds=args.rounds)
    if args.vocab_sizes:
        st = replace(st, vocab_sizes=args.vocab_sizes)
    first = "quick" if args.quick else "base"       # the first vocabulary's folder; the others' get a suffix
    caches = {v: args.cache / (first if k == 0 else f"{first}-vocab{v}") for k, v in enumerate(st.vocab_sizes)}
    out_dir = args.out or (args.cache / "results" if args.quick else BENCH / "results")
    stem = ("quick" if args.quick else "latest") + ("-cuda" if args.device == "cuda" else "")

    started, load_before = time.time(), os.getloadavg()
    bandwidth = None
    if cpu:                                         # first, while this process holds no model
        bandwidth = floor.bandwidth(st.floor_array_mib, st.floor_tries, st.threads)
        print(f"  memory bandwidth: {bandwidth['bandwidth_gb_s']:.1f} GB/s ({bandwidth['best']})", file=sys.stderr)
    import torch
    torch.set_num_threads(st.threads)
    results, scaling, peak_rss, step_bytes, overlay = {}, [], {}, {}, None
    probes: Dict[int, List[float]] = {}             # vocab -> GB/s probed before each round of its batch-1 case
    for vocab in st.vocab_sizes:
        headline = vocab == st.vocab_sizes[0]
        bm = prepare(caches[vocab], st.preset, vocab, st.seed)
        art = build_all(caches[vocab], bm, args.cache / "optimum-site", ours="ours" in args.systems,
                        ct2="ct2" in args.systems, hf="hf" in args.systems, optimum="optimum" in args.systems,
                        fp16=not cpu)
        overlay = art.overlay
        engines, worker = make_engines(art, bm, args.systems, st.threads, args.device)
        names = [e.name for e in engines]
        baseline = BASELINE if BASELINE in names else "HF transformers (torch)"
        try:
            for case, sources in zip(cases, case_sources(bm, st, cases)):
                label = case_label(case, vocab, st)
                probe = None
                if cpu and case is CASES[0]:           # the floor's case: the bandwidth probed beside its rounds
                    probe = lambda: probes.setdefault(vocab, []).append(     # noqa: E731
                        floor.bandwidth(st.floor_array_mib, st.case_floor_tries, st.threads)["bandwidth_gb_s"])
                results[label] = run_case(engines, case, sources, st.length,
                                          st.rounds if headline else st.other_vocab_rounds, baseline, vocab, label,
                                          probe)
            if headline and not args.no_scaling:
                scaled = [e for e in engines if e.name in (OURS_FP32, "seq2onnx int8", BASELINE)]
                scaling = run_scaling(scaled, lambda n: make_sources(1, n, bm.config.vocab_size, len(SPECIALS),
                                                                    bm.config.eos_id, seed=st.seed + 100 + n),
                                      st.scaling_generated, st.scaling_sources, st.src_len, st.length,
                                      st.scaling_rounds)
        finally:
            for e in engines:
                e.close()
            if worker is not None:
                worker.close()
        if cpu and not args.no_memory:              # after the timed runs: nothing else runs beside each child
            peak_rss[str(vocab)] = measure_memory(art, bm, args.systems, st)
        if bandwidth is not None and art.package is not None:
            step_bytes[vocab] = floor.package_floor(art.package, bandwidth["bandwidth_gb_s"])
            for variant, tok_s in floor.weight_products_ceiling(art.package, st.threads).items():
                step_bytes[vocab][variant]["weight_products_tok_s"] = tok_s

    checks = fidelity(results, names)
    floor_data = floor_summary(bandwidth, step_bytes, results, st, probes) if bandwidth is not None else None
    elapsed = time.time() - started
    where = (f"on {torch.cuda.get_device_name(0)} (CUDA)" if args.device == "cuda"
             else f"{st.threads} intra-op threads everywhere")
    others = st.vocab_sizes[1:]
    vocabs = f"vocab {st.vocab_sizes[0]}" + "".join(f"; the same with vocab {v} in the rows marked so" for v in others)
    other_rounds = (f" ({st.other_vocab_rounds} for vocab {', '.join(map(str, others))})"
                    if others and st.other_vocab_rounds != st.rounds else "")
    md = [f"# seq2onnx benchmark ({stem})", "",
          f"Model: preset {st.preset}, {vocabs}, random weights (seed {st.seed}); "
          f"source {st.src_len} ids (EOS included), exactly {st.length} generated tokens, "
          f"{where}; median of {st.rounds} interleaved rounds{other_rounds} after a warm-up.", "",
          f"## Target tokens/s (ratio to {baseline}, same rounds)", "",
          report.speed_table(results, names, baseline), "",
          "## Fidelity: output rows equal, row by row", "", report.fidelity_table(checks, list(results)), ""]
    if scaling:
        md += [f"## Scaling: ms per generated token, batch 1 greedy (source {st.src_len} when varying the generated "
               f"length, {st.length} generated when varying the source); median of {st.scaling_rounds} rounds",
               "", report.scaling_table(scaling, st.scaling_generated, st.scaling_sources), ""]
    if peak_rss:
        md += ["## Peak resident memory (MiB): each system alone in a process that loads it and runs each case once",
               "", report.memory_table(peak_rss, names), ""]
    if floor_data:
        md += ["## Memory floor: batch-1 tokens/s if each decoder step only read its weights, at full bandwidth",
               "", report.floor_text(floor_data), ""]
    mach = report.machine(overlay)
    if args.device == "cuda":
        mach["gpu"] = torch.cuda.get_device_name(0)
    during = (f"load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after; "
              f"run took {elapsed / 60:.1f} min")
    md += ["## Machine", "", ("GPU " + mach["gpu"] + "; " if "gpu" in mach else "") + report.machine_text(mach, during)]
    markdown = "\n".join(md)
    print(markdown)
    data = {"settings": asdict(st), "device": args.device, "machine": mach, "baseline": baseline, "systems": names,
            "timings": [t for res in results.values() for t in res.timings], "fidelity": checks,
            "scaling": scaling, "peak_rss_mib": peak_rss, "floor": floor_data, "load_average_before": load_before[0],
            "load_average_after": os.getloadavg()[0], "elapsed_s": elapsed}
    report.write(out_dir, stem, data, markdown)
    print(f"\nwrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
