"""runtime/package/manifest.py: a damaged or foreign package folder is refused with a one-line error
naming the file and the fix (missing, truncated, corrupted files, format_version, swapped tokenizer and
interrupted exports, with their exact messages: test_reliability_packages.py)."""
from __future__ import annotations

import json
import shutil

import pytest

from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.translator import Translator


@pytest.fixture
def pkg(tiny_package, tmp_path):
    copy = tmp_path / "pkg"
    shutil.copytree(tiny_package, copy)
    return copy


def edit_manifest(pkg, change):
    manifest = json.loads((pkg / "manifest.json").read_text())
    change(manifest)
    (pkg / "manifest.json").write_text(json.dumps(manifest))


def refused(path, match, **kw):
    with pytest.raises(ModelPackageError, match=match) as e:
        Translator(path, device="cpu", **kw)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_reads_the_package(tiny_package):
    p = read_package(tiny_package)
    assert "fp32" in p.variants and p.config.vocab_size == p.tokenizer.get_vocab_size()


def test_not_a_package(pkg, tmp_path):
    edit_manifest(pkg, lambda m: m.update(format="something-else"))
    refused(pkg, "not a seq2onnx model package")
    refused(tmp_path / "nowhere", "does not exist")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "manifest.json is missing")
    (pkg / "manifest.json").write_text("{not json")
    refused(pkg, "not valid JSON")


def test_vocab_size_mismatch(pkg):
    edit_manifest(pkg, lambda m: m["config"].update(vocab_size=m["config"]["vocab_size"] + 1))
    refused(pkg, "does not belong to this model")


def test_bad_config_and_variant(pkg):
    edit_manifest(pkg, lambda m: m["variants"]["fp32"].update(encoder="elsewhere.onnx"))
    refused(pkg, r"variants\['fp32'\]\['encoder'\]")
    edit_manifest(pkg, lambda m: m["config"].update(n_heads=3))
    refused(pkg, "bad model config")


def test_verify_false_skips_hashing_only(pkg):
    import onnx
    from onnx import numpy_helper
    path = pkg / "encoder.onnx"
    size = path.stat().st_size
    model = onnx.load(str(path), load_external_data=False)          # the shared data file's weights stay there
    weight = max(model.graph.initializer, key=lambda t: len(t.raw_data))
    values = numpy_helper.to_array(weight).copy()
    values.flat[0] += 1.0                          # another weight value, same file size
    weight.raw_data = values.tobytes()
    onnx.save(model, str(path))
    assert path.stat().st_size == size
    refused(pkg, "encoder.onnx: its SHA-256 does not match")
    Translator(pkg, device="cpu", verify=False).translate("one two")
