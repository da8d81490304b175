"""runtime/package/manifest.py: a damaged or foreign package folder is refused with a one-line error
naming the file and the fix (missing, truncated, corrupted files, format_version, swapped tokenizer and
interrupted exports, with their exact messages: test_reliability_packages.py); the manifest's records write back what
they read, and its JSON Schema is what they emit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package import schema
from seq2onnx.runtime.package.graph_io import DECODER_FORMAT
from seq2onnx.runtime.package.manifest import FORMAT_VERSION, read_package
from seq2onnx.runtime.translator import Translator
from tests import DATA, REPO


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


# --- the manifest's records and its JSON Schema (runtime/package/manifest_records.py, schema.py) ----------------------
SHIPPED = REPO / "models" / "numbers-en-de"
EARLIER = DATA / "numbers-en-de-earlier-contract"


def test_committed_schema_files_are_what_the_records_emit():
    """docs/manifest.schema.json and web/src/manifest_schema.js are generated from the records: a record changed
    without `make schema` fails here."""
    repo = REPO
    assert (repo / schema.SCHEMA_FILE).read_text(encoding="utf-8") == schema.schema_text(), "run `make schema`"
    assert (repo / schema.JS_FILE).read_text(encoding="utf-8") == schema.js_text(), "run `make schema`"
    jsonschema.Draft202012Validator.check_schema(schema.manifest_schema())


def test_records_write_the_manifest_read_byte_for_byte(tiny_package):
    """The records the reader builds write manifest.json back to the bytes the exporter wrote (so a writer that builds
    them writes what it wrote before them), and every fixture's manifest validates against the schema."""
    validator = jsonschema.Draft202012Validator(schema.manifest_schema())
    for folder in (tiny_package, SHIPPED, EARLIER):
        text = (folder / "manifest.json").read_text(encoding="utf-8")
        validator.validate(json.loads(text))
        record = read_package(folder).record
        if folder != EARLIER:        # format 2: its config reads with the fields format 3 added, at their defaults
            assert json.dumps(record.to_manifest(), indent=2, ensure_ascii=False) + "\n" == text, folder


@pytest.mark.parametrize("change, message", [
    (lambda m: m["graphs"]["encoder"]["inputs"][0].pop("dtype"), r"the field graphs\.encoder\.inputs\[0\]\.dtype is missing"),
    (lambda m: m["variants"]["int8"].update(thresholds={"top1_agreement": "high"}),
     r"the field variants\['int8'\]\.thresholds\['top1_agreement'\] should be a number, got 'high'"),
    (lambda m: m.update(source_model={"architectures": "MarianMTModel"}),
     r"the field source_model\.architectures should be a list, got 'MarianMTModel'"),
    (lambda m: m["variants"]["int8"]["few_rows"].update(parity=[1]),
     r"the field variants\['int8'\]\.few_rows\.parity should be an object, got \[1\]"),
])
def test_a_field_the_records_refuse_the_schema_refuses(pkg, change, message):
    """A field of the wrong kind: read_package refuses it with one line naming it, and the schema (what the web
    runtime validates against) refuses the same manifest."""
    edit_manifest(pkg, change)
    refused(pkg, message)
    manifest = json.loads((pkg / "manifest.json").read_text())
    assert not jsonschema.Draft202012Validator(schema.manifest_schema()).is_valid(manifest)


def test_decoder_format_is_not_the_manifests_format_version(tiny_package):
    """ModelPackage.decoder_format: the decoder step contract (graph_io.DECODER_FORMATS), which the manifest's
    format_version maps to (4 -> 3)."""
    p = read_package(tiny_package)
    assert (p.manifest["format_version"], p.decoder_format) == (FORMAT_VERSION, DECODER_FORMAT)
