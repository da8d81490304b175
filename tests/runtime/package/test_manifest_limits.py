"""runtime/package/manifest.py: what a manifest may hold. At most MAX_VARIANTS variants, MAX_FILES files and strings
of MAX_STRING_CHARS, refused when the manifest is read, before any other work (a hostile manifest cannot make
`seq2onnx info` hash its graphs thousands of times); `seq2onnx info` hashes each file once, however many variants
share it. Each case edits a copy of the session's real tiny package (test_manifest.py's `pkg`)."""
from __future__ import annotations

import json

import pytest

from tests.runtime.package.test_hostile_packages import info_says, refused
from tests.runtime.package.test_manifest import edit_manifest, pkg  # noqa: F401 - pkg: a copy of the tiny package, per test
from seq2onnx.runtime.cli.info import package_info
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.package import manifest as manifest_module


def many_variants(n):
    """n more variants, each of the fp32 variant's two graphs (~70 bytes each: 12,000 fit in 1 MiB)."""
    def change(m):
        for i in range(n):
            m["variants"][f"v{i}"] = {"encoder": "encoder.onnx", "decoder_step": "decoder_step.onnx"}
    return change


def test_manifest_of_12000_variants_is_refused_before_any_work(pkg, capsys):
    """Checked one variant at a time, `seq2onnx info` would read and hash the two graphs 12,000 times.
    Refused when the manifest is read, before any file is checked or hashed."""
    edit_manifest(pkg, many_variants(12_000))
    assert (pkg / "manifest.json").stat().st_size < manifest_module.MAX_MANIFEST_BYTES
    message = refused(pkg, rf"manifest.json: 'variants' has 120\d\d entries, more than a package holds "
                           rf"\({manifest_module.MAX_VARIANTS}\)")
    info_says(pkg, capsys, message)


def test_info_hashes_each_file_once_however_many_variants_share_it(pkg, capsys, monkeypatch):
    """MAX_VARIANTS variants of the same graphs (allowed): each file is read and hashed once."""
    package = json.loads((pkg / "manifest.json").read_text(encoding="utf-8"))
    edit_manifest(pkg, many_variants(manifest_module.MAX_VARIANTS - len(package["variants"])))
    reads = []
    read_file = manifest_module.ModelPackage.read_file
    monkeypatch.setattr(manifest_module.ModelPackage, "read_file",
                        lambda self, name, verify=None: reads.append(name) or read_file(self, name, verify))
    info = package_info(str(pkg))
    assert len(info["variants"]) == manifest_module.MAX_VARIANTS and info["verified"]
    assert sorted(reads) == sorted(set(reads)) and "encoder.onnx" in reads and "decoder_step.onnx" in reads
    assert main(["info", str(pkg)]) == 0
    assert f"  v{manifest_module.MAX_VARIANTS - len(package['variants']) - 1} " in capsys.readouterr().out


@pytest.mark.parametrize("change, message", [
    (lambda m: m["files"].update({f"f{i}": {"sha256": "0" * 64, "bytes": 0} for i in range(10_000)}),
     rf"'files' has 100\d\d entries, more than a package holds \({manifest_module.MAX_FILES}\)"),
    (lambda m: m.update(created="x" * 5000), r"holds a string of 5000 characters \(starting 'xxx"),
    (lambda m: m["exporter"].update({"k" * 100_000: "1"}), r"holds a string of 100000 characters \(starting 'kkk"),
    (lambda m: m["variants"]["fp32"]["parity"].update(note="\x1b[2J" * 2000), r"holds a string of 8000 characters"),
], ids=["files", "string", "key", "parity-string"])
def test_manifest_over_its_limits_is_refused(pkg, capsys, change, message):
    """Beyond the list: the other counts and every string (a key too) are bounded, checked in the same pass as the
    nesting depth, before any file is read."""
    edit_manifest(pkg, change)
    text = refused(pkg, message)
    assert text.endswith(": this is not a seq2onnx model package; re-export the model with `seq2onnx export`")
    info_says(pkg, capsys, text)
