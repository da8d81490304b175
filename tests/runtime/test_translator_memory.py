"""The Translator's memory, each figure taken in a fresh process that holds the runtime (no torch), so that it is the
runtime's own: flat over 2,000 consecutive requests of one Translator (RSS measured after request 100 and after
request 2,000, within 5%); bounded for a text of millions of characters (only a prefix of it is tokenized) and for
translate_batch on 3,000 sentences (the memory of one batch). Concurrency: test_translator.py::test_thread_safety."""
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


# Peak RSS of the worker itself: VmHWM (ru_maxrss would count the memory of pytest, which started it)
PEAK_MB = """
def peak_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) // 1024
"""


MEMORY_WORKER = PEAK_MB + textwrap.dedent("""
    import sys, warnings
    from seq2onnx.runtime.translator import Translator
    warnings.simplefilter("ignore")
    tr = Translator(sys.argv[1], device="cpu", intra_threads=1)
    texts = {"fdfa": "\\ufdfa" * 300_000, "words": ("seven one " * 1_000_000)}
    tr.translate_batch(["seven one"] * 32, beam_size=4)
    before = peak_mb()
    for name, text in texts.items():
        tr.translate_batch([text], beam_size=4)
    print(peak_mb() - before)
""")


def test_memory_of_a_huge_text_is_bounded(tiny_package, tmp_path):
    """300,000 x U+FDFA (NFKC: 5.4 million characters) and 10 million characters of words: only a
    prefix of each is tokenized, so the peak grows by less than 100 MB (the whole texts would take gigabytes)."""
    worker = tmp_path / "worker.py"
    worker.write_text(MEMORY_WORKER)
    proc = subprocess.run([sys.executable, str(worker), str(tiny_package)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) < 100, f"peak RSS grew by {proc.stdout.strip()} MB"


BATCH_WORKER = PEAK_MB + textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from tests.fixtures_training import toy_pairs
    from seq2onnx.runtime.translator import Translator
    tr = Translator(sys.argv[1], device="cpu", intra_threads=1)
    texts = [s for s, _ in toy_pairs(3000, seed=3, min_words=8, max_words=10)]
    tr.translate_batch(texts[:64])
    before = peak_mb()
    results = tr.translate_batch(texts)
    assert len(results) == len(texts) and all(r.hypotheses[0] for r in results)
    print(peak_mb() - before)
""")


def test_translate_batch_memory_does_not_grow_with_the_number_of_sentences(tiny_package, tmp_path):
    """3,000 sentences at beam 4 with the default options take the memory of 64 (one batch: +300 MB)."""
    worker = tmp_path / "worker.py"
    worker.write_text(BATCH_WORKER)
    proc = subprocess.run([sys.executable, str(worker), str(tiny_package), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) < 50, f"peak RSS grew by {proc.stdout.strip()} MB"
