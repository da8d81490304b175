"""The shipped model package models/numbers-en-de: it loads by name, its manifest and checksums verify,
and it translates fixed examples correctly with fp32 and int8, greedy and beam 4, from the API and the CLI."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from seq2onnx.runtime import Translator
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.package.shipped_models import available_models, resolve_model_dir
from tests import REPO

NAME = "numbers-en-de"
FOLDER = REPO / "models" / NAME

# English -> German as num2words writes them; the first four are in the training split (every number
# below 1,000 is), the last two are not: 1,003 is in the test split, 495,517 in no split at all
EXAMPLES = [
    ("seven", "sieben"),
    ("seventeen", "siebzehn"),
    ("forty-two", "zweiundvierzig"),
    ("three hundred and one", "dreihunderteins"),
    ("one thousand and three", "eintausenddrei"),
    ("four hundred and ninety-five thousand, five hundred and seventeen",
     "vierhundertfünfundneunzigtausendfünfhundertsiebzehn"),
]


def test_numbers_model_is_shipped_and_found_by_name():
    assert (FOLDER / "manifest.json").is_file(), "models/numbers-en-de is missing: run `make numbers-model`"
    assert NAME in available_models()
    found = resolve_model_dir(NAME)         # models/ in an editable install, site-packages otherwise
    assert (found / "manifest.json").read_bytes() == (FOLDER / "manifest.json").read_bytes()
    assert (FOLDER / "MODEL_CARD.md").is_file()


def test_manifest_and_every_checksum_verify():
    pkg = read_package(NAME, verify=True)
    assert set(pkg.variants) == {"fp32", "int8"}
    for name in pkg.variants:
        pkg.verify_variant(name)                  # raises on a SHA-256 mismatch
    for name in pkg.manifest["files"]:
        pkg.verify_file(name)
    total = sum(entry["bytes"] for entry in pkg.manifest["files"].values())
    assert total <= 15_000_000, f"the package is {total / 1e6:.1f} MB, over the 15 MB budget"


def test_unknown_name_is_refused_naming_the_shipped_models(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelPackageError, match=r"numbers-en-dx does not exist: .*shipped model \(numbers-en-de\)"):
        read_package("numbers-en-dx")


@pytest.mark.parametrize("compute_type", ["float32", "int8"])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_fixed_examples_translate_correctly(compute_type, beam_size):
    tr = Translator(NAME, device="cpu", compute_type=compute_type, intra_threads=1)
    got = [r.hypotheses[0] for r in tr.translate_batch([src for src, _ in EXAMPLES], beam_size=beam_size)]
    assert got == [ref for _, ref in EXAMPLES]


def test_cli_translates_with_the_shipped_model_by_name(tmp_path):
    exe = Path(sys.executable).parent / "seq2onnx"
    proc = subprocess.run([str(exe), "translate", NAME, "--compute-type", "int8", "--beam-size", "4"],
                          input="".join(src + "\n" for src, _ in EXAMPLES), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [ref for _, ref in EXAMPLES]


# what people type first, every row of the card's table, and what lies outside the domain (0..999,999):
# the model card's table "outside the domain" shows what the model answers there, pinned here
SIXTIES = ["einundsechzig", "zweiundsechzig", "dreiundsechzig", "vierundsechzig", "fünfundsechzig",
           "sechsundsechzig", "siebenundsechzig", "achtundsechzig", "neunundsechzig"]
FIRST_TYPED = [("one", "eins"), ("zero", "null"), ("Forty-Two", "zweiundvierzig"), ("twenty one", "einundzwanzig"),
               ("a hundred", "einhundert"), ("42", "zweiundvierzig"), ("1,234", "eintausendzweihundertvierunddreißig"),
               ("1234", "eintausendzweihundertvierunddreißig"), ("FORTY-TWO", "zweiundvierzig"),
               ("two", "zwei"), ("four", "vier"), ("forty", "vierzig"), ("0", "null"), ("7", "sieben")] + \
              [(f"sixty-{u}", de) for u, de in zip("one two three four five six seven eight nine".split(), SIXTIES)]
CASES = {("float32", 1): "float32 greedy", ("float32", 4): "float32 beam 4", ("int8", 1): "int8 greedy",
         ("int8", 4): "int8 beam 4"}


def card_outside_the_domain():
    """{typed: {case name: the answer}} from the model card's table "outside the domain"."""
    card = (FOLDER / "MODEL_CARD.md").read_text(encoding="utf-8")
    table = card.split("Outside the domain", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| `")]
    header = [c.strip() for c in table.split("| typed |", 1)[1].splitlines()[0].strip("|").split("|")]
    return {cells[0].strip().strip("`"): {h: c.strip().strip("`") for h, c in zip(header, cells[1:])}
            for cells in rows}


@pytest.mark.parametrize("compute_type", ["float32", "int8"])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_what_people_type_first(compute_type, beam_size):
    tr = Translator(NAME, device="cpu", compute_type=compute_type, intra_threads=1)
    results = tr.translate_batch([src for src, _ in FIRST_TYPED], beam_size=beam_size)
    assert [r.hypotheses[0] for r in results] == [ref for _, ref in FIRST_TYPED]
    assert all(r.finished == [True] for r in results)


@pytest.mark.parametrize("compute_type", ["float32", "int8"])
@pytest.mark.parametrize("beam_size", [1, 4])
def test_outside_the_domain_the_model_does_what_its_card_says(compute_type, beam_size):
    # as the card measured them: one call of their own (int8 quantizes activations per call), 2 threads
    expected = card_outside_the_domain()
    assert "one million" in expected and len(expected) == 6
    tr = Translator(NAME, device="cpu", compute_type=compute_type, intra_threads=2)
    results = tr.translate_batch(list(expected), beam_size=beam_size)
    case = CASES[(compute_type, beam_size)]
    assert {typed: r.hypotheses[0] for typed, r in zip(expected, results)} == \
        {typed: answers[case] for typed, answers in expected.items()}
