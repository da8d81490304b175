"""Peak resident memory of one benchmarked system, in a process of its own.

    python bench/memory.py < SPEC.json     # run.py starts one per system; prints {"system": name, "peak_rss_mib": m}

The child builds one engine (engines.make_engine), runs each case once, and reports its own peak
resident set size: what a user's process would need to translate these batches with that system,
with nothing of the other systems loaded. SPEC: {"system", "variant", "files", "threads", "tokens",
"never", "length", "cases": [{"sources", "beam"}]}. Optimum decodes in its own worker process, whose
own figure is reported (the child that talks to it is a pipe).

The figure is VmHWM of /proc/self/status, the peak of the process's memory since its exec, rather
than getrusage's ru_maxrss: Linux carries the parent's peak into a child's ru_maxrss at exec, so a
small child would report the peak of the benchmark process that started it.
ru_maxrss is the fallback where there is no /proc.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

if __package__ in (None, ""):          # run as a script: python bench/memory.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MIB = 2 ** 20


def peak_rss_mib_of(pid) -> float:
    """A process's peak resident memory since its exec, MiB: VmHWM of /proc/PID/status (pid: a number or "self")."""
    status = Path(f"/proc/{pid}/status").read_text()
    return round(int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) / 1024, 1)


def own_peak_rss_mib() -> float:
    """This process's peak resident memory since it started, MiB (module doc: why not ru_maxrss)."""
    try:
        return peak_rss_mib_of("self")
    except (OSError, AttributeError):
        import resource
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss       # KiB on Linux, bytes on macOS
        return round(peak / (MIB if sys.platform == "darwin" else 1024), 1)


def peak_rss_mib(spec: Dict) -> Tuple[str, float]:
    """Start a child for spec (module doc), wait for it: -> (the engine's name, its peak MiB)."""
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve())], input=json.dumps(spec),
                          stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the memory child of {spec['system']} {spec['variant']} failed ({proc.returncode}); "
                           "its error is printed above")
    answer = json.loads(proc.stdout.splitlines()[-1])
    return answer["system"], answer["peak_rss_mib"]


def child(spec: Dict) -> Dict:
    """Build the engine, run every case once (the same checks as the timed runs), -> its name and peak MiB."""
    from bench import engines as E
    from bench.measure import run_checked

    worker = None
    if spec["system"] == "optimum":
        files = spec["files"]
        worker = E.OptimumWorker(Path(files["overlay"]), Path(files["optimum"]), spec["threads"], [spec["variant"]])
    engine = E.make_engine(spec["system"], spec["variant"], spec["files"], spec["threads"],
                           tokens=spec["tokens"], never=spec["never"], worker=worker)
    try:
        for case in spec["cases"]:
            run_checked(engine, case["sources"], case["beam"], spec["length"])
        peak = worker.peak_rss_mib() if worker else own_peak_rss_mib()
        return {"system": engine.name, "peak_rss_mib": peak}
    finally:
        engine.close()
        if worker is not None:
            worker.close()


def main() -> int:
    spec = json.loads(sys.stdin.read())
    answers, sys.stdout = sys.stdout, sys.stderr      # library prints must not corrupt the answer
    print(json.dumps(child(spec)), file=answers, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
