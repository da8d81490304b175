"""Peak memory of hostile-sized inputs, each case in a fresh process.

    python bench/hostile_memory.py [--label after] [--cases line30mb fdfa5mb batch20k]

Cases, all with the shipped model `numbers-en-de` on the CPU:
  short      the CLI translating one short line: the floor (imports, model, sessions)
  line30mb   the CLI translating one 30 MB line of number words (`--input FILE`)
  fdfa5mb    the CLI translating one 5 MB line of U+FDFA (NFKC turns each into 18 characters)
  batch20k   Translator.translate_batch on 20,000 numbers written in words, beam 4, default options
  constraints120, constraints256   Translator.translate_batch on 16 numbers in words at beam 256, each with
             120 or 256 terminology constraints of two words (256 x 2 tokens: all that max_positions 512 allows)
Figures: the child's peak RSS (ru_maxrss from wait4) and its wall time (indicative only: the machine
may be shared). Each run is stored under --label in bench/results/hostile_memory.json, so the table
shows the code before and after a change side by side (run the script once on each).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "hostile_memory.json"
MODEL = "numbers-en-de"

BATCH_WORKER = textwrap.dedent("""
    import sys
    from seq2onnx.runtime import Translator
    texts = open(sys.argv[1], encoding="utf-8").read().splitlines()
    results = Translator(sys.argv[2], device="cpu").translate_batch(texts, beam_size=4)
    assert len(results) == len(texts)
""")

CONSTRAINTS_WORKER = textwrap.dedent("""
    import sys
    from seq2onnx.runtime import Translator
    tr = Translator(sys.argv[1], device="cpu")
    words = sorted(t[1:] for t in tr.tokenizer.get_vocab() if t.startswith("\u2581") and len(t) > 1
                   and len(tr.tokenizer.encode(t[1:]).ids) == 1)          # the words that are one token
    phrases = [f"{a} {b}" for a in words for b in words][:int(sys.argv[2])]
    texts = ["three hundred and %s" % w for w in ("one two three four five six seven eight nine ten eleven "
                                                    "twelve thirteen fourteen fifteen sixteen").split()]
    try:
        tr.translate_batch(texts, beam_size=256, constraints=[phrases] * len(texts))
    except ValueError as e:                                   # refused: said in one line, before any work
        print(e, file=sys.stderr)
""")


def number_words(n: int):
    from num2words import num2words
    return [num2words(1 + (i * 7919) % 999_999) for i in range(n)]


def write(folder: str, name: str, text: str, repeat: int = 1, end: str = "") -> str:
    """A file of `text` x `repeat` + `end`, written piece by piece: this process stays small, and a
    child's ru_maxrss counts the peak of the process that started it (exec keeps it)."""
    path = os.path.join(folder, name)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(repeat):
            f.write(text)
        f.write(end)
    return path


def cli(path: str):
    return [sys.executable, "-m", "seq2onnx.runtime.cli", "translate", MODEL, "--device", "cpu", "--input", path]


def case_command(case: str, folder: str):
    if case == "short":
        return cli(write(folder, "short.txt", "three hundred and one\n"))
    if case == "line30mb":                                # one line of 30 MB
        return cli(write(folder, "line30mb.txt", "three hundred and forty-two thousand, " * 100, 7895, "\n"))
    if case == "fdfa5mb":                                 # one line of 5 MB: U+FDFA is 3 bytes in UTF-8
        return cli(write(folder, "fdfa5mb.txt", "\ufdfa" * 1000, 1666, "\n"))
    if case == "batch20k":
        texts = write(folder, "numbers.txt", "\n".join(number_words(20_000)) + "\n")
        return [sys.executable, write(folder, "worker.py", BATCH_WORKER), texts, MODEL]
    if case.startswith("constraints"):
        return [sys.executable, write(folder, "constraints.py", CONSTRAINTS_WORKER), MODEL, case[len("constraints"):]]
    raise ValueError(case)


def measure(command):
    """-> (exit status, peak RSS in MB, wall seconds) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or err:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return proc.returncode, usage.ru_maxrss / 1024, seconds        # ru_maxrss: KiB on Linux


def main() -> None:
    cases = ["short", "line30mb", "fdfa5mb", "batch20k", "constraints120", "constraints256"]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default="after", help="the column these figures go to (e.g. before, after)")
    p.add_argument("--cases", nargs="+", default=cases, choices=cases)
    p.add_argument("--prefix", nargs="+", default=[], help="run each case's command after these (e.g. a wrapper "
                   "that imports another checkout's runtime)")
    args = p.parse_args()
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    with tempfile.TemporaryDirectory() as folder:
        for case in args.cases:
            rc, mb, seconds = measure(args.prefix + case_command(case, folder))
            results.setdefault(case, {})[args.label] = {"exit": rc, "peak_rss_mb": round(mb, 1),
                                                        "wall_s": round(seconds, 1)}
            print(f"{case}: exit {rc}, peak RSS {mb:.0f} MB, {seconds:.1f} s", flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    labels = sorted({label for r in results.values() for label in r}, key=lambda x: (x != "before", x))
    print("\n| case | " + " | ".join(f"{label}: peak RSS, wall" for label in labels) + " |")
    print("|---|" + "---|" * len(labels))
    for case, r in results.items():
        cells = [f"{r[label]['peak_rss_mb']:.0f} MB, {r[label]['wall_s']:.1f} s (exit {r[label]['exit']})"
                 if label in r else "" for label in labels]
        print(f"| {case} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
