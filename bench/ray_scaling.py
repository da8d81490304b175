"""Ray's overhead and scaling: the same corpus through the plain CLI and through `seq2onnx
translate-dataset` with 1 and 2 actors on a Ray cluster of this machine.

    python bench/ray_scaling.py                   # the full run: writes bench/results/ray_scaling.{json,md}
    python bench/ray_scaling.py --quick           # a smoke run: CACHE/results/ray_scaling-quick.*
    python bench/ray_scaling.py --lines 50000 --beam-size 1 --repeats 5

Corpus: --lines (default 50,000) English numbers (num2words of numbers below 1,000,000, fixed by the seed), one a
line, through the shipped model numbers-en-de: real translations that end on their own (--corpus FILE and --model
MODEL take any text file and package instead). Systems, each run --repeats times in turn (median and min of the
wall time):
  cli 1 thread      seq2onnx translate --intra-threads 1: one core's worth, what an actor has
  cli               seq2onnx translate (onnxruntime's default threads: every core)
  ray N actor(s)    seq2onnx translate-dataset --actors N --cpus-per-actor 1 (so 1 onnxruntime thread an actor) on
                    a single-node cluster of --cpus CPUs (default: this machine's), started once for the run: a
                    job's time counts its driver (imports, ray.init, its model check), its actors' start and model
                    load, and the rows' way back to the driver, which writes OUTPUT.
Every system's output must equal `cli 1 thread`'s, byte for byte (else the run stops). The overhead at 1 actor is
`ray 1 actor` against `cli 1 thread` (the target: within 10%); the scaling is `ray 2 actors` against
`ray 1 actor`. Times on a shared machine are noise: run it on a quiet one.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))

CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]
# a cluster of this run only: token authentication off (it binds this machine's addresses), no usage stats
RAY_ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """A Ray cluster on this machine, started with `ray start` (a head of `cpus` CPUs, and a worker node of `cpus`
    CPUs and the given resources for each entry of `workers`), under a temporary folder of its own; stop() kills
    every process it started (no `ray stop`, which stops every Ray cluster of the machine). tests/runtime/ray/test_ray.py's
    cluster too."""

    def __init__(self, cpus: int = 1, workers: Sequence[Dict[str, float]] = (), object_store_mib: int = 150):
        import json
        # a short folder: Ray's socket paths under it must stay below the 107 bytes of a Unix socket's
        self.temp = tempfile.mkdtemp(prefix="s2o-ray-", dir="/tmp")
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        common = ["--num-cpus", str(cpus), "--object-store-memory", str(object_store_mib << 20),
                  "--disable-usage-stats", "--node-ip-address", "127.0.0.1", "--dashboard-agent-listen-port", "0",
                  "--metrics-export-port", "0"]
        try:
            self._ray("start", "--head", "--port", str(self.port), "--temp-dir", self.temp, "--include-dashboard",
                      "false", "--dashboard-port", str(free_port()), "--ray-client-server-port", str(free_port()),
                      *common)
            for resources in workers:
                self._ray("start", "--address", self.address, "--resources", json.dumps(resources), *common)
        except BaseException:
            self.stop()
            raise

    def _ray(self, *args: str) -> None:
        done = subprocess.run([str(Path(sys.executable).parent / "ray"), *args], env=RAY_ENV, capture_output=True,
                              text=True, timeout=180)
        if done.returncode != 0:
            raise RuntimeError(f"ray {args[0]} failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")

    def processes(self) -> Dict[int, Tuple[int, str]]:
        """pid -> (parent pid, command line) of this cluster's processes: those whose command line names its
        folder or its port (Ray's client server), and everything they started."""
        table: Dict[int, Tuple[int, str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            table[int(entry)] = (parent, command)
        mine = {os.getpid(), os.getppid()}
        found = {pid for pid, (_, command) in table.items() if pid not in mine and
                 (self.temp in command or f":{self.port} " in command + " ")}
        while True:
            children = {pid for pid, (parent, _) in table.items() if parent in found} - found
            if not children:
                return {pid: table[pid] for pid in found}
            found |= children

    def named(self, title: str) -> Dict[int, int]:
        """pid -> parent pid (its node's raylet) of this cluster's processes titled `title` (a Ray worker's title is
        its actor's class, and while it runs a method, ".method" after it)."""
        return {pid: parent for pid, (parent, command) in self.processes().items()
                if command.strip() == title or command.startswith(title + ".")}

    def stop(self) -> None:
        """Every process of the cluster killed (SIGTERM, then SIGKILL), its folder removed."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            pids = self.processes()
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and any(_alive(p) for p in pids):
                time.sleep(0.1)
        shutil.rmtree(self.temp, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- the run ---------------------------------------------------------------------------------------------------
def numbers_corpus(path: Path, lines: int, seed: int) -> Path:
    from num2words import num2words
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(num2words(rng.randrange(1_000_000)) + "\n" for _ in range(lines)))
    return path


def systems(actors: Sequence[int]) -> List[str]:
    return ["cli 1 thread", "cli"] + [f"ray {n} actor{'s' if n > 1 else ''}" for n in actors]


def command(system: str, model: str, corpus: Path, out: Path, flags: List[str], address: Optional[str]) -> List[str]:
    if system.startswith("cli"):
        threads = ["--intra-threads", "1"] if system == "cli 1 thread" else []
        return [*CLI, "translate", model, "-i", str(corpus), "-o", str(out), *flags, *threads]
    n = system.split()[1]
    return [*CLI, "translate-dataset", model, str(corpus), str(out), *flags, "--actors", n, "--cpus-per-actor",
            "1", "--ray-address", str(address)]


def run_once(cmd: List[str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(cmd, env=RAY_ENV, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: see {log}")
    return seconds


def table(results: Dict[str, List[float]], lines: int) -> str:
    base = statistics.median(results["cli 1 thread"])
    one = next((statistics.median(v) for k, v in results.items() if k == "ray 1 actor"), None)
    rows = ["| system | wall s (median) | min | lines/s | vs cli 1 thread | vs ray 1 actor |",
            "|---|---:|---:|---:|---:|---:|"]
    for system, times in results.items():
        median = statistics.median(times)
        vs_one = f"{one / median:.2f}x" if one and system.startswith("ray") else "-"
        rows.append(f"| {system} | {median:.2f} | {min(times):.2f} | {lines / median:.0f} | "
                    f"{median / base - 1:+.1%} | {vs_one} |")
    return "\n".join(rows)


def main(argv: Optional[List[str]] = None) -> int:
    from bench import report

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2,000 lines, 1 repeat: a smoke run")
    ap.add_argument("--lines", type=int, help="numbers to translate (default 50,000; quick 2,000)")
    ap.add_argument("--corpus", type=Path, help="a text file to translate instead of the numbers")
    ap.add_argument("--model", default="numbers-en-de")
    ap.add_argument("--beam-size", type=int, default=4, help="the CLI's default, 4")
    ap.add_argument("--actors", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--cpus", type=int, default=len(os.sched_getaffinity(0)), help="the cluster's CPUs")
    ap.add_argument("--repeats", type=int, help="runs of each system (default 3; quick 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results; quick: CACHE/results)")
    args = ap.parse_args(argv)
    lines = args.lines or (2_000 if args.quick else 50_000)
    repeats = args.repeats or (1 if args.quick else 3)
    work = args.cache / "ray_scaling"
    corpus = args.corpus or numbers_corpus(work / f"numbers-{lines}-{args.seed}.txt", lines, args.seed)
    lines = sum(1 for _ in open(corpus, "rb"))
    flags = ["--beam-size", str(args.beam_size)]
    names = systems(args.actors)
    results: Dict[str, List[float]] = {name: [] for name in names}
    print(f"ray_scaling: {lines} lines, beam {args.beam_size}, {repeats} repeat(s); starting a cluster of "
          f"{args.cpus} CPUs", file=sys.stderr)
    cluster = LocalCluster(cpus=args.cpus)
    try:
        for r in range(repeats):
            for name in names:
                out = work / f"out-{name.replace(' ', '-')}.txt"
                seconds = run_once(command(name, args.model, corpus, out, flags, cluster.address),
                                   work / f"log-{name.replace(' ', '-')}.txt")
                results[name].append(seconds)
                if name != names[0] and out.read_bytes() != (work / "out-cli-1-thread.txt").read_bytes():
                    raise SystemExit(f"{name}'s output differs from cli 1 thread's ({out})")
                print(f"  run {r + 1}/{repeats} {name}: {seconds:.2f} s", file=sys.stderr)
    finally:
        cluster.stop()
    md = (f"# Ray: overhead and scaling (bench/ray_scaling.py)\n\n{lines} lines of {corpus.name} through "
          f"{args.model}, beam {args.beam_size}, {repeats} run(s) of each system; a single-node Ray cluster of "
          f"{args.cpus} CPUs; every output identical to `cli 1 thread`'s.\n\n{table(results, lines)}\n")
    data = {"machine": report.machine(None), "lines": lines, "corpus": str(corpus), "model": args.model,
            "beam_size": args.beam_size, "cpus": args.cpus, "repeats": repeats, "seconds": results}
    out_dir = args.out or (args.cache / "results" if args.quick else BENCH / "results")
    report.write(out_dir, "ray_scaling-quick" if args.quick else "ray_scaling", data, md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
