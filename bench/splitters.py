"""Sentence splitter candidates for documents (runtime/documents/text.py) on bench/data/sentence_boundaries.jsonl.

The test set: 130 multi-sentence UI strings from the system's gettext catalogs (/usr/share/locale/{de,fr,es}:
English msgids and German / French msgstrs, 30-400 characters, no line breaks, no %-formats), each split where
[.!?...] is followed by white space and then corrected by hand (abbreviations such as "e.g.", "z.B.", "bzw.",
"par ex.", "ca.", "Maj.", ellipses inside commands such as "ALTER TABLE ... DROP", "(y/N)" prompts kept with their
question), and 40 hand-written paragraphs (English, German, French) with "Dr.", "p.m.", "U.S.", "3.5", "$4.99",
URLs, e-mail addresses, quotes, "!?", number words. Labels are the sentences as spans of the text.

    .venv/bin/python bench/splitters.py            # one subprocess per candidate; prints a Markdown table

Each candidate runs in its own process: memory is its peak RSS (ru_maxrss) after importing and splitting, less a
bare Python's; speed is paragraphs per second over 20 passes of the set (one core, on a shared machine: compare
the ratios, not the numbers).
"""
from __future__ import annotations

import json
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List

DATA = Path(__file__).with_name("data") / "sentence_boundaries.jsonl"
PASSES = 20
NAIVE = re.compile(r"(?<=[.!?\u2026])\s+")


def load_candidate(name: str) -> Callable[[str, str], List[str]]:
    """name -> split(text, lang) -> sentences (any white space around them is ignored)."""
    if name == "regex":
        return lambda text, lang: NAIVE.split(text)
    if name == "pysbd":
        import pysbd
        segmenters: Dict[str, object] = {}

        def split(text: str, lang: str) -> List[str]:
            seg = segmenters.setdefault(lang, pysbd.Segmenter(language=lang, clean=False))
            return seg.segment(text)                                    # type: ignore[attr-defined]
        return split
    if name == "sentencex":
        import sentencex
        return lambda text, lang: list(sentencex.segment(lang, text))
    if name == "blingfire":
        import blingfire
        return lambda text, lang: [text[a:b] for a, b in blingfire.text_to_sentences_and_offsets(text)[1]]
    if name == "syntok":
        from syntok import segmenter
        return lambda text, lang: ["".join(str(t) for t in s) for p in segmenter.analyze(text) for s in p]
    raise SystemExit(f"unknown candidate {name}")


def boundaries(text: str, sentences: List[str]) -> set:
    """The offsets where a sentence (stripped) ends, the last one excepted."""
    ends, pos = [], 0
    for s in sentences:
        s = s.strip()
        if not s:
            continue
        pos = text.index(s, pos) + len(s)
        ends.append(pos)
    return set(ends[:-1])


def measure(name: str) -> Dict[str, float]:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    split = load_candidate(name)
    exact = tp = fp = fn = 0
    for row in rows:
        got = boundaries(row["text"], split(row["text"], row["lang"]))
        want = boundaries(row["text"], row["sentences"])
        exact += got == want
        tp, fp, fn = tp + len(got & want), fp + len(got - want), fn + len(want - got)
    start = time.perf_counter()
    for _ in range(PASSES):
        for row in rows:
            split(row["text"], row["lang"])
    seconds = time.perf_counter() - start
    return {"paragraphs": len(rows), "exact": exact / len(rows), "precision": tp / max(1, tp + fp),
            "recall": tp / max(1, tp + fn), "per_second": PASSES * len(rows) / seconds,
            "rss_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(sys.argv[2])))
        return
    bare = json.loads(subprocess.run([sys.executable, "-c", "import resource, json; print(json.dumps("
                                      "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))"],
                                     capture_output=True, text=True, check=True).stdout)
    print("| splitter | paragraphs exact | boundary precision | boundary recall | paragraphs/s | memory (MiB over "
          f"a bare Python's {bare:.0f}) |")
    print("|---|---|---|---|---|---|")
    for name in sys.argv[1:] or ["regex", "pysbd", "sentencex", "blingfire", "syntok"]:
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True)
        if out.returncode:
            print(f"| {name} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        m = json.loads(out.stdout)
        print(f"| {name} | {m['exact']:.1%} | {m['precision']:.1%} | {m['recall']:.1%} | {m['per_second']:,.0f} | "
              f"{m['rss_mib']:.1f} |")


if __name__ == "__main__":
    main()
