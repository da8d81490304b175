"""How long `import seq2onnx.runtime` and the first Translator-side imports take, in fresh interpreters
(the median of N runs each). A figure, not a test: tests/runtime/test_runtime_import.py checks what is imported.

    python bench/import_time.py [--runs 15]     -> a table, and bench/results/import_time.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

STEPS = {
    "import seq2onnx.runtime": "import seq2onnx.runtime",
    "from seq2onnx.runtime import Translator (+ numpy, onnxruntime, tokenizers)":
        "import seq2onnx.runtime.translator",
    "import torch (for scale)": "import torch",
}
PROBE = "import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "import_time.json"))
    args = ap.parse_args()
    rows = []
    for what, stmt in STEPS.items():
        times = [float(subprocess.run([sys.executable, "-c", PROBE.format(stmt=stmt)], capture_output=True,
                                      text=True, check=True).stdout) for _ in range(args.runs)]
        rows.append({"what": what, "median_ms": 1000 * statistics.median(times), "runs": args.runs})
    print("| import | median ms |\n|---|---:|")
    for r in rows:
        print(f"| {r['what']} | {r['median_ms']:.1f} |")
    Path(args.out).write_text(json.dumps({"python": sys.version.split()[0], "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
