"""The server's peak memory under the costliest requests its default flags admit.

    python bench/serve_memory.py [--cases unbounded attention tokens together] [--out bench/results]

Each case starts `seq2onnx serve numbers-en-de` afresh on 127.0.0.1 (default flags, but --timeout 600 so that a
slow machine finishes the requests), sends one request to warm it up, reads its peak RSS (VmHWM), sends the case's
requests, and reads VmHWM again:
  unbounded  a hostile request (4,900 characters, beam 64, 64 hypotheses, 256 steps, return_attention) with the
             cost flags lifted (--max-request-tokens, --max-attention-values, --max-answer-bytes,
             --max-pending-bytes 2**40): what it costs without them. Under the defaults it is refused (400).
  attention  the largest answer the defaults admit: 4 hypotheses x 415 steps x 416 source tokens of attention,
             reckoned 16,680,704 bytes of --max-answer-bytes' 16,777,216
  tokens     the largest cache: 64 texts of 511 source tokens, beam 2, 512 steps: 65,536 tokens of
             --max-request-tokens' 65,536
  together   3 x attention and 2 x tokens at once: what --max-pending-bytes admits together (64 MiB: three
             attention requests), the rest 429; the tokens requests share the 256 rows of --max-batch-rows
Writes OUT/serve-memory.json and .md.
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

if __package__ in (None, ""):          # run as a script: python bench/serve_memory.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench import report  # noqa: E402
from bench.memory import peak_rss_mib_of  # noqa: E402

MODEL = "numbers-en-de"
UNBOUNDED = ["--max-request-tokens", str(2 ** 40), "--max-attention-values", str(2 ** 40),
             "--max-answer-bytes", str(2 ** 40), "--max-pending-bytes", str(2 ** 40)]
FIXED = {"max_length_a": 0, "max_length_b": None}
ISSUE = {"texts": [" ".join(["seven"] * 816)], "beam_size": 64, "num_hypotheses": 64, "min_decoding_length": 256,
         "max_decoding_length": 256, "return_attention": True}
ATTENTION = {"texts": [" ".join(["seven"] * 415)], "beam_size": 4, "num_hypotheses": 4, "return_attention": True,
             "min_decoding_length": 415, "max_decoding_length": 415, **FIXED}
TOKENS = {"texts": [" ".join(["seven"] * 510)] * 64, "beam_size": 2, "min_decoding_length": 512,
          "max_decoding_length": 512, **FIXED}
CASES = {"unbounded": (UNBOUNDED, [ISSUE]), "attention": ([], [ATTENTION]), "tokens": ([], [TOKENS]),
         "together": ([], [ATTENTION] * 3 + [TOKENS] * 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_case(name: str, flags: List[str], bodies: List[Dict]) -> Dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "seq2onnx.runtime.cli", "serve", MODEL, "--port", str(port),
                             "--timeout", "600", "--log-level", "warning", *flags],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(f"{name}: the server did not get ready")
            time.sleep(0.2)
        httpx.post(url + "/v1/translate", json={"texts": ["twenty three"]}, timeout=60).raise_for_status()
        idle = peak_rss_mib_of(proc.pid)
        answers: List[Dict] = [{} for _ in bodies]

        def send(i: int) -> None:
            start = time.monotonic()
            r = httpx.post(url + "/v1/translate", json=bodies[i], timeout=700)
            answers[i] = {"status": r.status_code, "answer_bytes": len(r.content),
                          "seconds": round(time.monotonic() - start, 1),
                          **({"error": r.json()["error"]} if r.status_code != 200 else {})}

        threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return {"flags": flags, "idle_peak_rss_mib": idle, "peak_rss_mib": peak_rss_mib_of(proc.pid),
                "requests": answers}
    finally:
        proc.kill()
        proc.wait(30)


def markdown(results: Dict[str, Dict], machine: Dict) -> str:
    lines = ["# `seq2onnx serve`: peak RSS under the costliest requests (bench/serve_memory.py)", "",
             report.machine_text(machine, "the machine was shared with other jobs: times are indicative only"), "",
             "| case | flags | idle peak RSS, MiB | peak RSS, MiB | answers (status, bytes) |", "|---|---|---:|---:|---|"]
    for name, r in results.items():
        answers = ", ".join(f"{a['status']} {a['answer_bytes']:,} B" for a in r["requests"])
        flags = "cost flags lifted" if r["flags"] else "defaults"
        lines.append(f"| {name} | {flags} | {r['idle_peak_rss_mib']:.0f} | {r['peak_rss_mib']:.0f} | {answers} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    results = {}
    for name in args.cases:
        results[name] = run_case(name, *CASES[name])
        print(name, json.dumps(results[name]), flush=True)
    machine = report.machine(None)
    report.write(args.out, "serve-memory", {"machine": machine, "cases": results}, markdown(results, machine))


if __name__ == "__main__":
    main()
