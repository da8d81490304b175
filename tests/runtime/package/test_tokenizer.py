"""A package's tokenizer.json holds only the trainer's regular expressions (runtime/package/tokenizer.py
ALLOWED_REGEXES): a backtracking one is refused at load, in one line naming it, before any text is
tokenized. (Oniguruma's retry limit stops one match: `(a+)+b` on ~20 "a"s stays under it and costs ~0.06 s a match,
so a long line of such words takes minutes.) web/test/hostile_package.test.js holds the JS runtime to the same
verdicts. Runs on copies of the shipped package: no training."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from tests import REPO
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.package.tokenizer import ALLOWED_REGEXES, THOUSANDS, foreign_regex
from seq2onnx.training.tokenizer import train_tokenizer

SHIPPED = REPO / "models" / "numbers-en-de"


def package_with(tmp_path: Path, change) -> Path:
    """A copy of the shipped package whose tokenizer.json (a dict) `change` edits, its checksum listed anew."""
    folder = tmp_path / "pkg"
    shutil.copytree(SHIPPED, folder)
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    change(tokenizer)
    data = json.dumps(tokenizer).encode()
    (folder / "tokenizer.json").write_bytes(data)
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"]["tokenizer.json"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


def split(pattern):
    return lambda t: t.update(pre_tokenizer={"type": "Split", "pattern": pattern, "behavior": "Isolated",
                                             "invert": False})


@pytest.mark.parametrize("change, component, regex", [
    (split({"Regex": "(a+)+b"}), "pre_tokenizer", "(a+)+b"),
    (lambda t: t["normalizer"]["normalizers"].append(
        {"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"Regex": "^(a|a)+$"}, "content": ""}]}),
     "normalizer", "^(a|a)+$"),
    (lambda t: t.update(decoder={"type": "Sequence", "decoders": [
        t["decoder"], {"type": "Replace", "pattern": {"Regex": r"(\w+\s?)*$"}, "content": ""}]}),
     "decoder", r"(\w+\s?)*$"),
    (split({"Regex": r"\s+"}), "pre_tokenizer", r"\s+"),            # harmless, but not the trainer's: refused too
])
def test_a_foreign_regex_is_refused_at_load(tmp_path, change, component, regex):
    with pytest.raises(ModelPackageError) as e:
        read_package(package_with(tmp_path, change))
    message = str(e.value)
    assert "\n" not in message
    assert f"tokenizer.json: its {component} uses the regular expression {regex!r}, which seq2onnx's tokenizer " \
           f"never writes" in message


@pytest.mark.parametrize("change", [
    split({"Regex": THOUSANDS}),                     # the trainer's own, wherever it stands
    split({"String": "(a+)+b"}),                     # a String pattern is matched literally: no regex
    lambda t: None,                                  # the shipped file (its normalizer holds THOUSANDS)
])
def test_the_trainers_regex_and_string_patterns_load(tmp_path, change):
    package = read_package(package_with(tmp_path, change))
    assert package.tokenizer.encode("seven 1234").ids


def test_every_regex_the_trainer_writes_is_allowed():
    tokenizer = train_tokenizer(["one 1234567", "two, 5678"], 60, lowercase=True, split_digits=True,
                                split_punctuation=True, group_digits=True)
    written = json.loads(tokenizer.to_str())
    assert [n["pattern"] for n in written["normalizer"]["normalizers"] if "pattern" in n] == [{"Regex": THOUSANDS}]
    assert foreign_regex(written) is None and THOUSANDS in ALLOWED_REGEXES
