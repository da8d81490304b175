"""A model package's memory at load and first translation, in Python and in Node, against the size of its weights.

    python bench/load_peak.py models/numbers-en-de                        # fp32: bench/results/load-peak.{json,md}
    python bench/load_peak.py PKG [PKG ...] --compute-type int8 --name load-peak-int8
    python bench/load_peak.py PKG --against REV        # the code at git revision REV too, side by side

Each runtime runs in a process of its own (the Python runtime, and web/'s in Node) that reads its resident memory
(VmRSS) after its imports, after the package is loaded, and after one sentence is translated (greedy, the package's
other defaults), then its peak (VmHWM: bench/memory.py). W, the variant's weights, is the bytes of its two graph files
and their data files (the manifest's `external_data`). The goal (issue: load and first translation of an fp32 package
peak under 1.3 W) is read from the peak less the imports' own memory, which no package size changes: the table shows
both. --against REV also runs the code at git revision REV (a temporary `git worktree`, as bench/ab_code.py does) on
each package, one process after the other, and checks that both sides translate the sentence the same.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
TEXT = "The file could not be opened."
MIB = 2 ** 20

PYTHON_CHILD = r"""
import json, re, sys
def rss(field):
    return int(re.search(rf"^{field}:\s+(\d+) kB", open("/proc/self/status").read(), re.M).group(1)) / 1024
marks = {}
from seq2onnx.runtime import Translator
marks["imports"] = rss("VmRSS")
tr = Translator(sys.argv[1], compute_type=sys.argv[2])
marks["loaded"] = rss("VmRSS")
out = tr.translate_batch([sys.argv[3]], beam_size=1)
marks["translated"] = rss("VmRSS")
marks["output"] = out[0].hypotheses[0]
marks["peak"] = rss("VmHWM")
print(json.dumps(marks))
"""

NODE_CHILD = r"""
import { readFileSync } from "node:fs";
const [pkg, computeType, text, entry] = process.argv.slice(1);
const rss = (field) => Number(readFileSync("/proc/self/status", "utf8").match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"))[1]) / 1024;
const marks = {};
const { Translator } = await import(entry);
marks.imports = rss("VmRSS");
const t = await Translator.load(pkg, { computeType });
marks.loaded = rss("VmRSS");
const out = await t.translateBatch([text], { beamSize: 1 });
marks.translated = rss("VmRSS");
marks.output = out[0].hypotheses[0];
marks.peak = rss("VmHWM");
console.log(JSON.stringify(marks));
"""


def weights_bytes(package: Path, compute_type: str) -> int:
    """The variant's graph files and their data files, in bytes (each file once)."""
    manifest = json.loads((package / "manifest.json").read_text(encoding="utf-8"))
    variant = manifest["variants"]["fp32" if compute_type in ("float32", "default") else compute_type]
    files = {variant["encoder"], variant["decoder_step"], *variant.get("external_data", {}).values()}
    return sum((package / f).stat().st_size for f in files)


def run(cmd: List[str], env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                          env=None if env is None else dict(os.environ, **env))
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(package: Path, compute_type: str, tree: Path = ROOT, path: Optional[Path] = None) -> Dict[str, Any]:
    """Both runtimes of the code in `tree` (`path`: a PYTHONPATH whose seq2onnx is that tree's) on `package`."""
    w = weights_bytes(package, compute_type) / MIB
    env = None if path is None else {"PYTHONPATH": str(path)}
    sides = {"python": run([sys.executable, "-c", PYTHON_CHILD, str(package), compute_type, TEXT], env),
             "node": run(["node", "--input-type=module", "-e", NODE_CHILD, str(package), compute_type, TEXT,
                          (tree / "web" / "src" / "index.js").as_uri()])}
    for marks in sides.values():
        marks["peak_over_weights"] = marks["peak"] / w
        marks["above_imports_over_weights"] = (marks["peak"] - marks["imports"]) / w
    return {"package": str(package), "compute_type": compute_type, "weights_mib": w, "runtimes": sides}


def measure_against(packages: List[Path], compute_type: str, rev: str) -> List[Dict[str, Any]]:
    """measure() of each package at git revision `rev` and in the working tree, one after the other."""
    from bench.ab_code import side_path

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = Path(tmp) / "old"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old_tree), rev], check=True)
        try:
            (old_tree / "web" / "node_modules").symlink_to(ROOT / "web" / "node_modules")
            path = side_path(Path(tmp) / "a", old_tree)
            for pkg in packages:
                results.append(dict(measure(pkg, compute_type, old_tree, path), code=rev))
                results.append(dict(measure(pkg, compute_type), code="working tree"))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], check=False)
    for old, new in zip(results[::2], results[1::2]):
        for name in old["runtimes"]:
            if old["runtimes"][name]["output"] != new["runtimes"][name]["output"]:
                raise RuntimeError(f"{name} translates {TEXT!r} differently at {rev} and in the working tree: "
                                   f"{old['runtimes'][name]['output']!r} vs {new['runtimes'][name]['output']!r}")
    return results


def markdown(data: Dict[str, Any]) -> str:
    from bench.report import machine_text

    lines = ["# A package's memory at load and first translation (MiB)", "",
             f"`python bench/load_peak.py {' '.join(data['argv'])}`. Resident memory (VmRSS) after the imports, after "
             "the load, after one greedy translation; the peak (VmHWM); W: the variant's graph and data files.", "",
             "| package | code | W | runtime | imports | loaded | translated | peak | peak / W | (peak - imports) / W |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in data["results"]:
        for name, m in r["runtimes"].items():
            lines.append(f"| {Path(r['package']).name} ({r['compute_type']}) | {r.get('code', 'working tree')} | "
                         f"{r['weights_mib']:.0f} | {name} | "
                         f"{m['imports']:.0f} | {m['loaded']:.0f} | {m['translated']:.0f} | {m['peak']:.0f} | "
                         f"{m['peak_over_weights']:.2f} | {m['above_imports_over_weights']:.2f} |")
    during = f"load average {data['load_avg_before'][0]:.2f} before"
    return "\n".join(lines + ["", "Machine: " + machine_text(data["machine"], during), ""])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("packages", nargs="+", type=Path)
    p.add_argument("--compute-type", default="float32", choices=["float32", "int8"])
    p.add_argument("--name", default="load-peak", help="bench/results/NAME.{json,md}")
    p.add_argument("--against", metavar="REV", help="also measure the code at git revision REV, side by side")
    a = p.parse_args()
    from bench.report import machine

    data = {"argv": sys.argv[1:], "machine": machine(None), "load_avg_before": list(os.getloadavg()),
            "results": (measure_against([pkg.resolve() for pkg in a.packages], a.compute_type, a.against) if a.against
                        else [measure(pkg.resolve(), a.compute_type) for pkg in a.packages])}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{a.name}.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    text = markdown(data)
    (RESULTS / f"{a.name}.md").write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
