"""The machine description, the markdown tables and the JSON file of a benchmark run."""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Dict, List, Optional

from bench.base_model import atomic_write
from bench.measure import CaseResult, Scaling

OVERLAY_PACKAGES = {"optimum", "optimum_onnx", "transformers", "tokenizers", "huggingface_hub"}
PACKAGES = ["seq2onnx", "numpy", "onnxruntime-gpu", "onnxruntime", "tokenizers", "torch", "ctranslate2",
            "transformers"]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=Path(__file__).parent,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(overlay: Optional[Path]) -> Dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            pass
    if overlay is not None:        # Optimum's own transformers, in its subprocess
        for dist in sorted(overlay.glob("*.dist-info")):
            name, _, ver = dist.name[:-len(".dist-info")].rpartition("-")
            if name in OVERLAY_PACKAGES:
                versions[f"{name} (Optimum process)"] = ver
    mem = ""
    if Path("/proc/meminfo").exists():
        mem = Path("/proc/meminfo").read_text().splitlines()[0].split(":", 1)[1].strip()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(), "cpus_usable": usable, "memory": mem,
        "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
        "packages": versions, "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def machine_text(m: Dict, during: str = "") -> str:
    """A results file's machine paragraph from machine(): CPU, memory, OS, Python (then `during`: the run's load and
    time), git commit, date; then the packages."""
    return (f"{m['cpu']}, {m['cpus_usable']} usable CPUs, {m['memory']}, {m['os']}, Python {m['python']}"
            + (f"; {during}" if during else "")
            + f"; git {m['git_commit']}{' (dirty)' if m['git_dirty'] else ''}; {m['date']}.\n\n"
            + "Packages: " + ", ".join(f"{k} {v}" for k, v in m["packages"].items()) + ".")


def speed_table(results: Dict[str, CaseResult], systems: List[str], baseline: str) -> str:
    """Rows: cases; columns: systems; cells: median target tokens/s (ratio to the baseline)."""
    head = "| case | " + " | ".join(systems) + " |"
    lines = [head, "|---|" + "---:|" * len(systems)]
    for case, res in results.items():
        by = {t.system: t for t in res.timings}
        cells = []
        for s in systems:
            t = by.get(s)
            if t is None:
                cells.append("-")
            elif t.ratio_to_baseline is None or s == baseline:
                cells.append(f"{t.tokens_per_s:.0f}")
            else:
                cells.append(f"{t.tokens_per_s:.0f} ({t.ratio_to_baseline:.2f}x)")
        lines.append(f"| {case} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fidelity_table(fidelity: Dict[str, Dict[str, str]], cases: List[str]) -> str:
    """fidelity[check][case] = 'matching rows / rows'."""
    lines = ["| rows equal | " + " | ".join(cases) + " |", "|---|" + "---:|" * len(cases)]
    for check, per_case in fidelity.items():
        lines.append(f"| {check} | " + " | ".join(per_case.get(c, "-") for c in cases) + " |")
    return "\n".join(lines)


def scaling_table(points: List[Scaling], generated: List[int], sources: List[int]) -> str:
    cols = [f"gen {n}" for n in generated] + [f"gen {generated[-1]} / gen {generated[0]}"] + \
           [f"src {n}" for n in sources]
    lines = ["| ms per token (batch 1 greedy) | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for system in dict.fromkeys(p.system for p in points):
        by = {(p.kind, p.size): p.ms_per_token for p in points if p.system == system}
        cells = [f"{by[('generated', n)]:.2f}" for n in generated]
        cells.append(f"{by[('generated', generated[-1])] / by[('generated', generated[0])]:.2f}x")
        cells += [f"{by[('source', n)]:.2f}" for n in sources]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(peak_rss: Dict[str, Dict[str, float]], systems: List[str]) -> str:
    """peak_rss[vocab][system] = MiB; rows: vocabularies, columns: systems (as the speed table)."""
    lines = ["| peak RSS (MiB) | " + " | ".join(systems) + " |", "|---|" + "---:|" * len(systems)]
    for vocab, by in peak_rss.items():
        lines.append(f"| vocab {vocab} | " + " | ".join(f"{by[s]:.0f}" if s in by else "-" for s in systems) + " |")
    return "\n".join(lines)


def floor_text(floor: Dict) -> str:
    """The bandwidth with its tries, then per vocabulary and precision: bytes per step, floor, ours, % of it."""
    bw = floor["bandwidth"]
    per = {op: " / ".join(f"{max(bw[f'{op}_gb_s'][n]):.1f}" for n in sorted(bw[f"{op}_gb_s"]))
           for op in ("read", "copy")}
    threads = " / ".join(sorted(bw["read_gb_s"]))
    lines = [f"Memory bandwidth {floor['bandwidth_gb_s']:.1f} GB/s: the best of {bw['tries']} tries ({bw['best']}) "
             f"at reading and copying 2 x {bw['array_mib']} MiB; best read {per['read']} GB/s, copy (bytes read "
             f"+ written) {per['copy']} GB/s on {threads} threads"
             + ("." if bw["threads_beat_one"] else "; 2 threads did not beat 1 at both.") +
             " Floor = bandwidth / bytes of weights read per batch-1 decoder step; % of floor: our "
             f"{floor['case']} tokens/s in this run."]
    if floor["by_vocab"]:                            # none without our package (--systems without ours)
        lines += ["", "Two floors, both of this run: at its start (before any model was loaded) and beside the batch-1 "
                  "case (the best of the probes taken before each of its counted rounds: the machine's bandwidth "
                  "moves with its neighbours' load). Weight products alone: a graph of nothing but the step's weight "
                  "MatMuls (the same weights, int8 quantised as the export does), timed at batch 1 on onnxruntime "
                  "(bench/floor.py): the ceiling of any engine on onnxruntime's kernels. Read-only floor: the start "
                  "probe's best read on the same threads alone (a step's weights are only read; a copy's bytes read + "
                  "written count more).",
                  "", f"| model | weights read per step (MB) | floor tokens/s at start | floor beside the case "
                  f"(GB/s) | read-only floor at start (GB/s) | weight products alone, steps/s | seq2onnx tokens/s, "
                  f"{floor['case']} | % of floor at start | % of floor beside the case | % of read-only floor | "
                  "% of weight products |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for vocab, variants in floor["by_vocab"].items():
        for variant, f in variants.items():
            ours = f.get("ours_tok_s")
            products = f.get("weight_products_tok_s")
            during = f.get("floor_tok_s_during_case")
            cells = [f"{variant}, vocab {vocab}", f"{f['bytes_per_step'] / 1e6:.1f}", f"{f['floor_tok_s']:.0f}",
                     f"{during:.0f} ({f['bandwidth_during_case_gb_s']:.1f})" if during else "-",
                     f"{f['read_floor_tok_s']:.0f} ({f['read_gb_s']:.1f})" if "read_floor_tok_s" in f else "-",
                     f"{products:.0f}" if products else "-", f"{ours:.0f}" if ours else "-",
                     f"{f['percent_of_floor']:.0f}%" if "percent_of_floor" in f else "-",
                     f"{f['percent_of_floor_during_case']:.0f}%" if "percent_of_floor_during_case" in f else "-",
                     f"{f['percent_of_read_floor']:.0f}%" if "percent_of_read_floor" in f else "-",
                     f"{100 * ours / products:.0f}%" if ours and products else "-"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(out_dir: Path, stem: str, data: Dict, markdown: str) -> None:
    """out_dir/stem.json and out_dir/stem.md, each written atomically."""
    def plain(o):
        return dataclasses.asdict(o) if dataclasses.is_dataclass(o) else str(o)

    text = json.dumps(data, indent=1, default=plain)
    atomic_write(out_dir / f"{stem}.json", lambda tmp: Path(tmp).write_text(text + "\n"))
    atomic_write(out_dir / f"{stem}.md", lambda tmp: Path(tmp).write_text(markdown + "\n"))
