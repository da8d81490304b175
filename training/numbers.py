"""The built-in numbers task: an integer written out in English -> the same integer in German.

    495517: "four hundred and ninety-five thousand, five hundred and seventeen"
         -> "vierhundertfünfundneunzigtausendfünfhundertsiebzehn"

Splits are by number (no number is in two splits):
  * train holds every number below 1,000 (the atoms larger numbers are built from), each
    `repeat_small` times (they are short and few: without repeats a model sees "five" once per
    epoch among hundreds of thousand-sized numbers, and fails on the inputs users try first), those
    below 20 `repeat_below_20` times (each is a word of its own that no larger number teaches: "null"
    is spelled from four pieces that occur nowhere else in the targets), then
    numbers from 1,000..999,999 sampled evenly over the 4-, 5- and 6-digit bands (small, medium, large);
  * valid and test hold numbers from 1,000..999,999, evenly over the same three bands.
Everything is deterministic by seed.

Forms (`forms="mixed"`): people type numbers in many ways, so each training and validation number is
written in a form drawn at random (`random_form`): as words (lower, Title or UPPER case; a hyphen or a
space between tens and units; with or without "and"; with or without the comma after the thousands;
"a hundred" / "a thousand" for one hundred / one thousand) or as digits (with or without thousands
separators). The test split stays canonical (num2words' English): the model card renders its numbers
in every form (`FORMS`). The target is always num2words' German.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List

import numpy as np
from num2words import num2words

from seq2onnx.runtime.errors import Seq2OnnxError

from .atomic import write_text_atomic

ATOMS = 1000                                             # 0..999: always in train
WORDS = 20                                               # 0..19: each a word of its own ("null", "zwölf")
BANDS = [(1_000, 9_999), (10_000, 99_999), (100_000, 999_999)]   # 4, 5, 6 digits (inclusive)
SPLIT_FILES = {"train": "train.tsv", "valid": "valid.tsv", "test": "test.tsv"}
TEST_NUMBERS_FILE = "test_numbers.txt"    # the test split's integers, one a line: the model card renders every form


FORM_CHOICES = ("words", "mixed")


@dataclass
class NumbersSpec:
    size: int = 60_000          # training pairs, the 1,000 atoms included
    valid_size: int = 1_000
    test_size: int = 1_000
    seed: int = 1
    repeat_small: int = 1       # times each number below 1,000 appears in train
    forms: str = "words"        # words: num2words' English only; mixed: a random form each (see above)
    repeat_below_20: int = 0    # times each number below 20 appears (at least repeat_small; 0: repeat_small)


def words(n: int, case: str = "lower", hyphen: str = "-", with_and: bool = True, comma: bool = True,
          a_for_one: bool = False) -> str:
    """n in English words, num2words' canonical form by default ("one thousand, two hundred and thirty-four")."""
    text = num2words(n, lang="en")
    if not with_and:
        text = text.replace(" and ", " ")
    if not comma:
        text = text.replace(",", "")
    text = text.replace("-", hyphen)
    if a_for_one and text.startswith(("one hundred", "one thousand")):
        text = "a" + text[len("one"):]
    return {"lower": text, "title": text.title(), "upper": text.upper()}[case]


def digits(n: int, separators: bool = False) -> str:
    """n in digits: "1234", or "1,234" with thousands separators."""
    return f"{n:,}" if separators else str(n)


# the forms the model card measures one by one: name -> n -> text
FORMS: Dict[str, Callable[[int], str]] = {
    "canonical": words,
    "Title Case": lambda n: words(n, case="title"),
    "UPPER CASE": lambda n: words(n, case="upper"),
    "space for hyphen": lambda n: words(n, hyphen=" "),
    "without and": lambda n: words(n, with_and=False),
    "without comma": lambda n: words(n, comma=False),
    "a hundred / a thousand": lambda n: words(n, a_for_one=True),
    "digits": digits,
    "digits, separators": lambda n: digits(n, separators=True),
}


def random_form(n: int, rng: np.random.Generator) -> str:
    """n written as people might type it: digits 30% of the time, else words with each option drawn."""
    if rng.random() < 0.3:
        return digits(n, separators=bool(rng.random() < 0.5))
    return words(n, case=str(rng.choice(["lower", "lower", "title", "upper"])), hyphen=str(rng.choice(["-", " "])),
                 with_and=bool(rng.random() < 0.5), comma=bool(rng.random() < 0.5), a_for_one=bool(rng.random() < 0.5))


def _even_shares(total: int, parts: int) -> List[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def split_numbers(spec: NumbersSpec) -> Dict[str, List[int]]:
    """{"train", "valid", "test"} -> the numbers of each split (train shuffled, valid/test sorted)."""
    if spec.repeat_small < 1:
        raise Seq2OnnxError(f"--repeat-small must be >= 1, got {spec.repeat_small}")
    word_repeats = max(spec.repeat_below_20, spec.repeat_small)
    if spec.repeat_below_20 and spec.repeat_below_20 < spec.repeat_small:
        raise Seq2OnnxError(f"--repeat-below-20 {spec.repeat_below_20} is below --repeat-small "
                            f"{spec.repeat_small}: numbers below 20 are numbers below 1000 too; pass at least "
                            f"{spec.repeat_small}")
    small = ATOMS * spec.repeat_small + WORDS * (word_repeats - spec.repeat_small)
    if spec.size < small:
        raise Seq2OnnxError(f"--size {spec.size} is below {small}: the training split holds every number "
                            f"below {ATOMS} ({spec.repeat_small} times, those below {WORDS} {word_repeats} times); "
                            f"pass --size {small} or more")
    if spec.valid_size < 0 or spec.test_size < 0:
        raise Seq2OnnxError("--valid-size and --test-size must be >= 0")
    capacity = sum(hi - lo + 1 for lo, hi in BANDS)
    if spec.size - small + spec.valid_size + spec.test_size > capacity:
        raise Seq2OnnxError(f"--size {spec.size} with {spec.valid_size} valid and {spec.test_size} test numbers "
                            f"needs more than the {capacity} numbers in 1,000..999,999: lower --size")
    rng = np.random.default_rng(spec.seed)
    atoms = list(range(ATOMS)) * spec.repeat_small + list(range(WORDS)) * (word_repeats - spec.repeat_small)
    splits: Dict[str, List[int]] = {"train": atoms, "valid": [], "test": []}
    valid_shares = _even_shares(spec.valid_size, len(BANDS))
    test_shares = _even_shares(spec.test_size, len(BANDS))
    # train: even over the bands, a small band's shortfall passed on to the larger ones
    wanted_train = spec.size - small
    for b, (lo, hi) in enumerate(BANDS):
        room = hi - lo + 1 - valid_shares[b] - test_shares[b]
        n_train = min(room, -(-wanted_train // (len(BANDS) - b)))   # ceil of the rest over the bands left
        wanted_train -= n_train
        drawn = (lo + rng.choice(hi - lo + 1, valid_shares[b] + test_shares[b] + n_train, replace=False)).tolist()
        splits["valid"] += drawn[:valid_shares[b]]
        splits["test"] += drawn[valid_shares[b]:valid_shares[b] + test_shares[b]]
        splits["train"] += drawn[valid_shares[b] + test_shares[b]:]
    splits["train"] = [splits["train"][i] for i in rng.permutation(len(splits["train"])).tolist()]
    splits["valid"].sort()
    splits["test"].sort()
    return splits


def number_pair(n: int, source: str = "") -> str:
    """One TSV line (without newline): English (num2words' words unless `source` is given)<TAB>German words."""
    return f"{source or words(n)}\t{num2words(n, lang='de')}"


def write_numbers_data(out: Path, spec: NumbersSpec, overwrite: bool = False) -> Dict[str, int]:
    """Write train.tsv, valid.tsv, test.tsv into `out` (each file atomically) -> lines per split."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise Seq2OnnxError(f"--out {out} is a file: pass a folder")
    existing = [name for name in SPLIT_FILES.values() if (out / name).exists()]
    if existing and not overwrite:
        raise Seq2OnnxError(f"{out} already holds {', '.join(existing)}: pass --force to overwrite, "
                            "or choose another --out")
    if spec.forms not in FORM_CHOICES:
        raise Seq2OnnxError(f"--forms must be one of {', '.join(FORM_CHOICES)}, got {spec.forms!r}")
    splits = split_numbers(spec)
    rng = np.random.default_rng([spec.seed, 1])                # forms: a stream of their own
    out.mkdir(parents=True, exist_ok=True)
    for split, name in SPLIT_FILES.items():
        mixed = spec.forms == "mixed" and split != "test"
        write_text_atomic(out / name, "".join(number_pair(n, random_form(n, rng) if mixed else "") + "\n"
                                              for n in splits[split]))
    write_text_atomic(out / TEST_NUMBERS_FILE, "".join(f"{n}\n" for n in splits["test"]))
    return {split: len(numbers) for split, numbers in splits.items()}
