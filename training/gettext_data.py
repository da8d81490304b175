"""Real parallel text from the gettext catalogs a Debian system installs: `seq2onnx data gettext`.

Every package with translated messages installs `<locale dir>/<lang>/LC_MESSAGES/*.mo`: English msgids with
the translators' msgstrs. vim keeps its catalog in its own tree (`/usr/share/vim/vim*/lang/<lang>/...`).

What is kept: one (msgid, msgstr) pair per distinct pair, the msgctxt dropped. What is left out, and counted:
plural entries, the catalog header, untranslated entries, and messages with a newline or a tab on either side
(multi-line help texts; a TSV holds one pair a line). A catalog Python's `gettext` cannot read is skipped and
named in the report.

The split is a hash of the source text (sha256): a source and all its translations land in the same split,
so no test source is ever seen in training, and the split does not depend on which catalogs are installed.
"""
from __future__ import annotations

import gettext
import glob
import hashlib
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from seq2onnx.runtime.errors import Seq2OnnxError

from .atomic import write_text_atomic

LOCALE_DIR = "/usr/share/locale"
EXTRA_GLOBS = ("/usr/share/vim/vim*/lang/{lang}/LC_MESSAGES/*.mo",)
SPLITS = ("train", "valid", "test")
# hash buckets of 1000: [0, 30) test, [30, 60) valid, the rest train (3% / 3% / 94%)
TEST_BUCKETS, VALID_BUCKETS = 30, 30


@dataclass
class CatalogReport:
    files: List[str] = field(default_factory=list)
    unreadable: List[str] = field(default_factory=list)
    entries: int = 0
    left_out: Counter = field(default_factory=Counter)


def catalog_files(lang: str, locale_dir: str = LOCALE_DIR) -> List[str]:
    files = sorted(glob.glob(os.path.join(locale_dir, lang, "LC_MESSAGES", "*.mo")))
    for pattern in EXTRA_GLOBS:
        files += sorted(glob.glob(pattern.format(lang=lang)))
    return files


def read_catalogs(files: Sequence[str]) -> Tuple[List[Tuple[str, str]], CatalogReport]:
    """Distinct (msgid, msgstr) pairs of the catalogs, in a fixed order, and what was left out."""
    report = CatalogReport()
    pairs = set()
    for path in files:
        try:
            with open(path, "rb") as f:
                catalog = gettext.GNUTranslations(f)._catalog
        except (OSError, UnicodeDecodeError, ValueError) as e:
            report.unreadable.append(f"{os.path.basename(path)} ({type(e).__name__})")
            continue
        report.files.append(path)
        for key, value in catalog.items():
            report.entries += 1
            if isinstance(key, tuple):
                report.left_out["plural"] += 1
                continue
            source = key.split("\x04", 1)[-1]                  # drop the msgctxt
            if not source:
                report.left_out["header"] += 1
            elif not value.strip():
                report.left_out["untranslated"] += 1
            elif any(c in s for s in (source, value) for c in "\n\t\r"):
                report.left_out["newline or tab"] += 1
            elif not source.strip():
                report.left_out["blank source"] += 1
            else:
                pairs.add((source.strip(), value.strip()))
    return sorted(pairs), report


def split_of(source: str) -> str:
    bucket = int.from_bytes(hashlib.sha256(source.encode("utf-8")).digest()[:8], "big") % 1000
    return "test" if bucket < TEST_BUCKETS else "valid" if bucket < TEST_BUCKETS + VALID_BUCKETS else "train"


def write_gettext_data(out: Path, lang: str, locale_dir: str = LOCALE_DIR,
                       overwrite: bool = False) -> Tuple[Dict[str, int], CatalogReport]:
    """Write out/{train,valid,test}.tsv (msgid<TAB>msgstr), creating `out` -> (pairs per split, report)."""
    files = catalog_files(lang, locale_dir)
    if not files:
        raise Seq2OnnxError(f"no gettext catalogs for language {lang!r} under {locale_dir}/{lang}/LC_MESSAGES: "
                            "install packages translated into it, or pass --locale-dir")
    if out.exists() and not out.is_dir():
        raise Seq2OnnxError(f"--out {out} is a file: pass a folder")
    existing = [s for s in SPLITS if (out / f"{s}.tsv").exists()]
    if existing and not overwrite:
        raise Seq2OnnxError(f"{out} already holds {', '.join(s + '.tsv' for s in existing)}: pass --force to overwrite")
    pairs, report = read_catalogs(files)
    lines: Dict[str, List[str]] = {s: [] for s in SPLITS}
    for source, target in pairs:
        lines[split_of(source)].append(f"{source}\t{target}\n")
    out.mkdir(parents=True, exist_ok=True)             # only now: a refused run leaves no folder behind
    for s in SPLITS:
        write_text_atomic(out / f"{s}.tsv", "".join(lines[s]))
    return {s: len(lines[s]) for s in SPLITS}, report
