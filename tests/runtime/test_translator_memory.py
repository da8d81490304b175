"""Load: memory stays flat over 2,000 consecutive requests of one Translator (RSS measured after
request 100 and after request 2,000, within 5%), in a fresh process that holds only the runtime (no torch,
no pytest), so the figure is the runtime's own. Concurrency: test_translator.py::test_thread_safety."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests import REPO

WORKER = textwrap.dedent("""
    import gc, json, sys
    sys.path.insert(0, sys.argv[2])                      # the repository root: the request mix of test_translator.py
    from tests.runtime.test_translator import load_requests, run_request
    from seq2onnx.runtime.translator import Translator

    def rss_kib():
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    tr = Translator(sys.argv[1], device="cpu", intra_threads=1)
    requests = load_requests(100, seed=33)               # 100 kinds, each asked 20 times
    first, rss, changed = [], {}, 0
    for i in range(2000):
        out = run_request(tr, requests[i % 100])
        if i < 100:
            first.append(out)
        elif out != first[i % 100]:
            changed += 1
        if i + 1 in (100, 2000):
            gc.collect()
            rss[i + 1] = rss_kib()
    print(json.dumps({"rss": rss, "changed": changed, "torch": "torch" in sys.modules}))
""")


def test_memory_is_flat_over_2000_requests(tiny_package, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(WORKER, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(worker), str(tiny_package), str(REPO)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    at_100, at_2000 = report["rss"]["100"], report["rss"]["2000"]
    assert report["changed"] == 0                          # the same request gives the same result every time
    assert not report["torch"]
    assert abs(at_2000 - at_100) <= 0.05 * at_100, f"RSS {at_100} KiB after 100 requests, {at_2000} KiB after 2,000"
