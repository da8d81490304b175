"""Where our runtime's memory goes: resident memory by phase, the weights of each graph, onnxruntime's options.

    python bench/memory_profile.py                      # vocab 8000 and 32000, fp32 and int8, every option set
    python bench/memory_profile.py --vocab-sizes 8000 --variants int8 --options default no_prepacking
    python bench/memory_profile.py --quick              # the tiny model of run.py --quick: a smoke run

Writes bench/results/memory_profile.{json,md} (--quick: bench/.cache/results/; --out: elsewhere). The packages are bench/run.py's
(bench/build.py exports them once into bench/.cache).

Each (vocabulary, variant, option set) runs in a process of its own (a child: this file with --child), which
reports its resident memory (VmRSS of /proc/self/status) and its peak (VmHWM) at each phase:
  import      after `from seq2onnx.runtime.translator import Translator`
  load        after Translator(...) (its peak: while the graphs were read and the sessions built)
  first call  after the first call, bench/run.py's batch-1 greedy case
  cases       run.py's cases once each, the largest (batch 16 beam 4) last: the peak is bench/run.py's memory
              figure (bench/memory.py), `after` is what stays resident once the calls ended
The peak is reset (/proc/self/clear_refs, "5") before each phase, so each phase's peak is its own.
Our own buffers are read after the largest case: the cache pool's sets that SpareMemory keeps for the next call, by
set (one for the packages of format 2 and later, whose beam reorders rewrite the cache in place; format 1: two).

The option sets (OPTION_SETS) change the onnxruntime session options of every session the Translator opens, in the
child only (it wraps SessionConfig.session_options): what prepacking, the CPU arena and memory patterns cost.

The weights: every initializer of each graph file of the package, by what reads it (the embedding table: a Gather
of input_ids; the projections: MatMul, Gemm and their quantised forms; the rest: norms, biases, positions, scales)
and by data type, from the graph files alone (onnx, not onnxruntime).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict, replace
from pathlib import Path
from typing import Callable, Dict, List

if __package__ in (None, ""):          # run as a script: python bench/memory_profile.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2 ** 20
BENCH = Path(__file__).resolve().parent
VARIANTS = {"fp32": "float32", "int8": "int8"}          # package variant -> compute_type


def _no_prepacking(so) -> None:
    so.add_session_config_entry("session.disable_prepacking", "1")


def _no_arena(so) -> None:
    so.enable_cpu_mem_arena = False


def _no_mem_pattern(so) -> None:
    so.enable_mem_pattern = False


def _arena(so) -> None:
    so.enable_cpu_mem_arena = True              # onnxruntime's default; the runtime turns it off on CPU


_ENV_ARENA: List[int] = []             # the extend strategy of the process's registered CPU arena, once registered


def _shared_arena(strategy: int) -> Callable:
    """Every session allocates from one CPU arena of the process (onnxruntime's environment allocator: one arena
    for the encoder, the step and the few-rows step, not one each), growing by `strategy` (0: kNextPowerOfTwo,
    onnxruntime's default; 1: kSameAsRequested)."""
    def change(so) -> None:
        import onnxruntime as ort
        if not _ENV_ARENA:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, strategy, -1, -1))
            _ENV_ARENA.append(strategy)
        so.add_session_config_entry("session.use_env_allocators", "1")
    return change


# name -> what it does to each session's options (onnxruntime's docs: "Memory consumption")
OPTION_SETS: Dict[str, List[Callable]] = {
    "default": [],
    "no_prepacking": [_no_prepacking],          # kernels read the weights as the graph has them, no packed copy
    "no_arena": [_no_arena],                    # activations from malloc/free, not a growing arena per session
    "no_mem_pattern": [_no_mem_pattern],        # no preplanned block per input shape
    "no_arena_no_prepacking": [_no_arena, _no_prepacking],
    "arena": [_arena],                          # the CPU arena back on: what the runtime saves without it
    "arena_no_trim": [_arena],                  # and the heap not trimmed: the runtime without its memory levers
    "shared_arena": [_shared_arena(0)],
    "shared_arena_same_as_requested": [_shared_arena(1)],
}


def status_mib(field: str) -> float:
    """VmRSS (resident now) or VmHWM (peak since the last reset) of this process, MiB."""
    text = Path("/proc/self/status").read_text()
    return round(int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1)) / 1024, 1)


def reset_peak() -> None:
    """VmHWM back to the resident memory of now (Linux: clear_refs 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def phase(name: str, out: Dict, run: Callable[[], object] = lambda: None):
    """Run `run` with the peak reset before it; record the resident memory after it and its peak."""
    reset_peak()
    value = run()
    out[name] = {"rss_mib": status_mib("VmRSS"), "peak_mib": status_mib("VmHWM")}
    return value


def child(spec: Dict) -> Dict:
    """One process: import, load, first call, every case (module doc) -> the phases and our buffers."""
    phases: Dict[str, Dict] = {"start": {"rss_mib": status_mib("VmRSS"), "peak_mib": status_mib("VmHWM")}}
    translator = phase("import", phases, lambda: __import__("seq2onnx.runtime.translator", fromlist=["x"]))
    from seq2onnx.runtime.engine import loader, session

    plain = session.SessionConfig.session_options

    def session_options(self, *args, **kwargs):
        so = plain(self, *args, **kwargs)
        for name in spec["options"]:
            for change in OPTION_SETS.get(name, []):
                change(so)
        return so
    session.SessionConfig.session_options = session_options
    if any(o.endswith("no_trim") for o in spec["options"]):    # the heap's free pages kept after each session
        loader.return_free_heap = lambda: None                 # open_engine's
    tr = phase("load", phases, lambda: translator.Translator(spec["package"], device="cpu",
                                                             compute_type=VARIANTS[spec["variant"]],
                                                             intra_threads=spec["threads"], inter_threads=1))

    def run(case: Dict) -> None:            # exactly `length` tokens, as bench/engines.py's Seq2OnnxRuntime
        n = spec["length"]
        results = tr.translate_ids(case["sources"], beam_size=case["beam"], min_decoding_length=n,
                                   max_decoding_length=n, max_length_a=0.0, max_length_b=None)
        if any(len(hyps[0].tokens) != n for hyps in results):
            raise RuntimeError(f"a hypothesis of other than {n} tokens")
    cases = spec["cases"]
    phase("first call", phases, lambda: run(cases[0]))
    phase("cases", phases, lambda: [run(c) for c in cases])
    return {"phases": phases, "cache_sets_mib": [round(b / MIB, 1) for b in tr.engine.spare.set_bytes()]}


def run_child(spec: Dict) -> Dict:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child"], input=json.dumps(spec),
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the memory profile child {spec['variant']} {spec['options']} failed "
                           f"({proc.returncode}); its error is printed above")
    return json.loads(proc.stdout.splitlines()[-1])


# --- the weights of each graph ---------------------------------------------------------------------------------
PROJECTION_OPS = {"MatMul", "Gemm", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits"}


def tensor_bytes(t) -> int:
    """An initializer's bytes: its raw data, its typed fields, or (external data) its length entry."""
    import numpy as np
    from onnx import helper
    if t.data_location == 1:                                 # EXTERNAL
        return int(dict((e.key, e.value) for e in t.external_data).get("length", 0))
    if t.raw_data:
        return len(t.raw_data)
    count = int(np.prod(t.dims)) if len(t.dims) else 1
    return count * np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize


def weight_kinds(graph: Path) -> Dict[str, int]:
    """{"kind dtype": bytes} of a graph file's initializers (module doc)."""
    import onnx

    from seq2onnx.export.quantize import EMBEDDING_ROWS, EMBEDDING_SCALES
    model = onnx.load(str(graph), load_external_data=False)
    readers = defaultdict(set)
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            readers[name].add((node.op_type, position, node.input[1] if len(node.input) > 1 else ""))
    out: Dict[str, int] = defaultdict(int)
    for t in model.graph.initializer:
        ops = readers[t.name]
        if any(op == "Gather" and pos == 0 and ids == "input_ids" for op, pos, ids in ops) or \
                t.name.endswith((EMBEDDING_ROWS, EMBEDDING_SCALES)):
            kind = "embedding table"
        elif any(op in PROJECTION_OPS and pos == 1 for op, pos, _ in ops) and len(t.dims) >= 2:
            kind = "projections"
        else:
            kind = "other (norms, biases, positions, scales)"
        out[f"{kind}, {onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name}"] += tensor_bytes(t)
    return dict(out)


def package_weights(package: Path) -> Dict[str, Dict]:
    """Per variant: each graph's file bytes (with its own data file), its shared data file's, and the weights by
    kind each graph reads (a shared weight counts in every graph that reads it)."""
    from seq2onnx.export.graph_files import variant_graphs
    manifest = json.loads((package / "manifest.json").read_text())
    out = {}
    for name, v in manifest["variants"].items():
        graphs = variant_graphs(v)
        files = {g: (package / g).stat().st_size + sum(f.stat().st_size for f in package.glob(g + ".data"))
                 for g in graphs}
        for data in sorted(set(v.get("external_data", {}).values()) - {g + ".data" for g in graphs}):
            files[data] = (package / data).stat().st_size     # a shared data file, once
        out[name] = {"file_bytes": files, "total_bytes": sum(files.values()),
                     "weights": {g: weight_kinds(package / g) for g in graphs}}
    return out


# --- the run ---------------------------------------------------------------------------------------------------
def profile(vocabs: List[int], variants: List[str], options: List[str], quick: bool, cache: Path,
            packages: List[Path] = ()) -> Dict:
    """packages: these package folders (of run.py's model at each of `vocabs`, in order) instead of run.py's."""
    from bench.base_model import prepare
    from bench.build import build_all
    from bench.measure import CASES
    from bench.run import QUICK, Settings, case_sources
    st = QUICK if quick else Settings()
    if vocabs:
        st = replace(st, vocab_sizes=vocabs)
    first = "quick" if quick else "base"                      # run.py's cache folders
    out = {"settings": {"preset": st.preset, "length": st.length, "threads": st.threads,
                        "cases": [asdict(c) for c in CASES]}, "vocab": {}}
    for k, vocab in enumerate(st.vocab_sizes):
        folder = cache / (first if k == 0 else f"{first}-vocab{vocab}")
        bm = prepare(folder, st.preset, vocab, st.seed)
        package = packages[k] if packages else build_all(folder, bm, cache / "optimum-site", ct2=False, hf=False,
                                                          optimum=False).package
        cases = [{"sources": s, "beam": c.beam} for c, s in zip(CASES, case_sources(bm, st))]
        runs = {}
        for variant in variants:
            for option in options:
                spec = {"package": str(package), "variant": variant, "threads": st.threads, "length": st.length,
                        "cases": cases, "options": [option]}
                got = runs.setdefault(variant, {})[option] = run_child(spec)
                print(f"  vocab {vocab} {variant} {option}: peak {got['phases']['cases']['peak_mib']:.0f} MiB, "
                      f"load {got['phases']['load']['rss_mib']:.0f} MiB", file=sys.stderr, flush=True)
        out["vocab"][str(vocab)] = {"package": str(package), "weights": package_weights(package), "runs": runs}
    return out


def markdown(data: Dict) -> str:
    md = ["# Memory profile of our runtime (bench/memory_profile.py)", "",
          f"Model: preset {data['settings']['preset']}, {data['settings']['threads']} intra-op threads, "
          f"bench/run.py's cases (batch 16 beam 4 last), exactly {data['settings']['length']} generated tokens. "
          "MiB; `peak` is the phase's own peak resident memory (reset before it), `rss` what is resident after it.",
          ""]
    for vocab, v in data["vocab"].items():
        md += [f"## vocab {vocab}", "", "| variant | options | import rss | load rss | load peak | first call rss "
               "| cases peak | after cases rss | cache sets (kept for the next call) |", "|---|---|" + "---:|" * 7]
        for variant, runs in v["runs"].items():
            for option, r in runs.items():
                p = r["phases"]
                md.append(f"| {variant} | {option} | {p['import']['rss_mib']:.0f} | {p['load']['rss_mib']:.0f} | "
                          f"{p['load']['peak_mib']:.0f} | {p['first call']['rss_mib']:.0f} | "
                          f"{p['cases']['peak_mib']:.0f} | {p['cases']['rss_mib']:.0f} | "
                          f"{' + '.join(f'{s:.0f}' for s in r['cache_sets_mib'])} |")
        md += ["", "| variant | graph | file MiB | weights by kind (MiB) |", "|---|---|---:|---|"]
        for variant, w in v["weights"].items():
            for graph, size in w["file_bytes"].items():
                kinds = ", ".join(f"{k} {b / MIB:.1f}" for k, b in sorted(w["weights"].get(graph, {}).items(),
                                                                       key=lambda kv: -kv[1]) if b >= MIB / 10)
                md.append(f"| {variant} | {graph} | {size / MIB:.1f} | {kinds} |")
            md.append(f"| {variant} | all | {w['total_bytes'] / MIB:.1f} | |")
        md.append("")
    return "\n".join(md)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="run.py's tiny model: a smoke run")
    ap.add_argument("--vocab-sizes", nargs="+", type=int, help="default: run.py's (8000 32000; quick 1000 3000)")
    ap.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    ap.add_argument("--options", nargs="+", choices=list(OPTION_SETS) + ["no_trim"], default=list(OPTION_SETS))
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="model files (default bench/.cache)")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results, quick: CACHE/results)")
    ap.add_argument("--packages", nargs="+", type=Path, help="profile these packages of run.py's model, one per "
                    "--vocab-sizes entry (e.g. bench/int8_embeddings_package.py's copy), not run.py's own")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(sys.stdin.read())
        answer, sys.stdout = sys.stdout, sys.stderr          # library prints must not corrupt the answer
        print(json.dumps(child(spec)), file=answer, flush=True)
        return 0
    if args.packages and len(args.packages) != len(args.vocab_sizes or []):
        ap.error("--packages needs one --vocab-sizes entry per package")
    data = profile(args.vocab_sizes or [], args.variants, args.options, args.quick, args.cache, args.packages or [])
    out = args.out or (args.cache / "results" if args.quick else BENCH / "results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_profile.json").write_text(json.dumps(data, indent=1))
    text = markdown(data)
    (out / "memory_profile.md").write_text(text + "\n")
    print(text)
    print(f"\nwrote {out / 'memory_profile.json'} and {out / 'memory_profile.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
