"""Packages whose graphs keep their weights in a data file beside them (ONNX external data, for models past
protobuf's 2 GB limit), tested on the tiny model forced to it (--external-data); and the
variant's shared data file every export writes (a weight several graphs hold, written once), on tiny_package.

The export writes one data file per graph, lists it in `files` and names it in the variant's external_data; the
package translates exactly as the same export without external data (fp32 and int8). A data file that is changed,
truncated, missing or a link, and a graph whose initializer points elsewhere (outside the folder, another file,
past the end), is one ModelPackageError line, raised before onnxruntime sees the graph; nothing outside the
folder is opened.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.fixtures_export import package_graphs
from seq2onnx.export import onnx_export
from seq2onnx.export.commands import ExportOptions, run_export
from seq2onnx.export.graph_files import ALIGNMENT, SHARED_MIN_BYTES, SHARED_SUFFIX, variant_graphs
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import ModelPackage, read_package, sha256_of
from seq2onnx.runtime.engine.session import cuda_status
from seq2onnx.runtime.package.onnx_bytes import external_tensors
from seq2onnx.runtime.translator import Translator
from tests.runtime.package.test_manifest import edit_manifest
from tests.runtime.package.test_reliability_packages import relist

SOURCES = 24          # validation sentences translated by each variant, greedy and beam 4

CUDA_OK, CUDA_REASON = cuda_status()

_opened: list = []    # paths Python opened while _watching (sys.addaudithook: a hook cannot be removed)
_watching = [False]


def _audit(event: str, args: tuple) -> None:
    if _watching[0] and event in ("open", "os.open") and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def external_package(tiny_checkpoint, tiny_package, tiny_data_dir, tmp_path_factory) -> Path:
    """The tiny checkpoint exported as tiny_package is (fp32 + int8, the same parity data), forced to external data;
    its fp32 trace is tiny_package's (fixtures_export.package_graphs), written out as the export writes a trace."""
    out = tmp_path_factory.mktemp("external") / "model"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(onnx_export, "export_graphs", package_graphs(tiny_package))
        run_export(ExportOptions(checkpoint=tiny_checkpoint, out_dir=out, int8=True,
                                 parity_data=tiny_data_dir / "valid.tsv", external_data=True))
    return out


@pytest.fixture
def ext(external_package, tmp_path) -> Path:
    copy = tmp_path / "pkg"
    shutil.copytree(external_package, copy)
    return copy


def test_every_graph_has_its_own_data_file_listed_and_hashed(external_package, tiny_package):
    manifest = json.loads((external_package / "manifest.json").read_text())
    assert set(manifest["variants"]) == {"fp32", "int8"}
    for name, variant in manifest["variants"].items():
        assert variant["external_data"] == {g: g + ".data" for g in variant_graphs(variant)}, name
        for graph, data in variant["external_data"].items():
            entry = manifest["files"][data]
            assert entry == {"sha256": sha256_of(external_package / data),
                             "bytes": (external_package / data).stat().st_size}
            tensors = external_tensors((external_package / graph).read_bytes())
            assert tensors and all(t.initializer for t in tensors)
            entries = [dict(t.entries) for t in tensors]
            assert {e["location"] for e in entries} == {data}
            assert all(int(e["offset"]) % ALIGNMENT == 0 for e in entries)
            # the same weights as the export without external data, the graph itself a small part of them
            inline = {t.name: onnx.numpy_helper.to_array(t)
                      for t in onnx.load(str(tiny_package / graph)).graph.initializer}
            weights = {t.name: onnx.numpy_helper.to_array(t)
                       for t in onnx.load(str(external_package / graph)).graph.initializer}
            assert inline.keys() == weights.keys()
            assert all(np.array_equal(inline[k], weights[k]) for k in inline), graph
            assert (external_package / graph).stat().st_size < entry["bytes"]


@pytest.mark.parametrize("compute_type", ["float32", "int8"])
def test_translates_exactly_as_the_export_without_external_data(external_package, tiny_package, tiny_data_dir,
                                                                 compute_type):
    lines = (tiny_data_dir / "valid.tsv").read_text(encoding="utf-8").splitlines()[:SOURCES]
    sources = [line.split("\t")[0] for line in lines]
    got, want = (Translator(p, device="cpu", compute_type=compute_type, intra_threads=1)
                 for p in (external_package, tiny_package))
    for beam in (1, 4):
        mine = got.translate_batch(sources, beam_size=beam, num_hypotheses=beam, return_scores=True)
        theirs = want.translate_batch(sources, beam_size=beam, num_hypotheses=beam, return_scores=True)
        assert [(r.token_ids, r.scores) for r in mine] == [(r.token_ids, r.scores) for r in theirs]
        assert [r.hypotheses for r in mine] == [r.hypotheses for r in theirs]


def refused(pkg: Path, match: str, load=lambda p: Translator(p, device="cpu", compute_type="int8")) -> str:
    """Loading `pkg` raises one ModelPackageError line matching `match`; nothing outside the folder is opened by
    Python (onnxruntime gets bytes only)."""
    _opened.clear()
    _watching[0] = True
    try:
        with pytest.raises(ModelPackageError, match=match) as e:
            load(pkg)
    finally:
        _watching[0] = False
    assert "\n" not in str(e.value)
    root = os.path.realpath(pkg)
    outside = [p for p in _opened if os.path.dirname(p) != root and (p.endswith(".data") or "outside" in p)]
    assert not outside, outside
    return str(e.value)


def test_a_changed_data_file_is_refused(ext):
    data = ext / "decoder_step.int8.onnx.data"
    blob = bytearray(data.read_bytes())
    blob[len(blob) // 2] ^= 1
    data.write_bytes(bytes(blob))
    message = refused(ext, "its SHA-256 does not match manifest.json")
    assert message.startswith(f"{data}: ")


def test_a_truncated_data_file_is_refused(ext):
    data = ext / "encoder.onnx.data"
    os.truncate(data, data.stat().st_size - 1)
    refused(ext, rf"^{data} has \d+ bytes, manifest.json says \d+ \(truncated or changed\)", load=read_package)


def test_a_missing_data_file_is_refused(ext):
    (ext / "encoder.int8.onnx.data").unlink()
    refused(ext, r"encoder.int8.onnx.data is missing \(listed in manifest.json\)", load=read_package)


def test_a_data_file_that_is_a_link_is_refused(ext, tmp_path):
    data = ext / "encoder.onnx.data"
    outside = tmp_path / "outside.data"
    data.rename(outside)
    data.symlink_to(outside)
    refused(ext, "is a symbolic link: the runtime reads nothing outside the package folder", load=read_package)


def _point(pkg: Path, graph: str, **entries: str) -> None:
    """Rewrite every external initializer's external_data entries of `graph` (e.g. location="../x") and list the
    graph's new checksum: a consistent, hostile package."""
    model = onnx.load(str(pkg / graph), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key in entries:
                entry.value = entries[entry.key]
    onnx.save_model(model, str(pkg / graph))
    relist(pkg, graph)


@pytest.mark.parametrize("where", ["parent", "absolute", "other-graph's"])
def test_a_graph_pointing_outside_its_data_file_is_refused(ext, tmp_path, monkeypatch, where):
    """The location is a copy of the right bytes where onnxruntime would find it (beside the folder, at an absolute
    path, and relative to the working directory), or another listed data file: the graph would load if the runtime
    let onnxruntime read it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(ext / "encoder.int8.onnx.data", outside / "encoder.int8.onnx.data")
    location = {"parent": "../outside/encoder.int8.onnx.data",
                "absolute": str(outside / "encoder.int8.onnx.data"),
                "other-graph's": "encoder.onnx.data"}[where]
    _point(ext, "encoder.int8.onnx", location=location)
    monkeypatch.chdir(ext)
    message = refused(ext, f"names the external data file {re.escape(repr(location[:80]))}, but the manifest's data "
                           "file for this graph is 'encoder.int8.onnx.data'")
    assert message.startswith(f"{ext / 'encoder.int8.onnx'}: its tensor ")


def test_an_offset_past_the_end_of_the_data_file_is_refused(ext):
    size = (ext / "decoder_step.int8.onnx.data").stat().st_size
    _point(ext, "decoder_step.int8.onnx", offset=str(size))
    refused(ext, rf"lies at bytes {size}\.\.\d+ of decoder_step.int8.onnx.data, which has {size}: past its end")


def test_a_length_that_is_not_the_tensor_size_is_refused(ext):
    _point(ext, "encoder.onnx", length="4")
    refused(ext, r"\(\d+ bytes\) but external_data length 4", load=lambda p: Translator(p, device="cpu"))


@pytest.mark.parametrize("change, message", [
    (lambda v: v["external_data"].update({"encoder.onnx": "nowhere.data"}),
     r"variants\['fp32'\]\['external_data'\]\['encoder.onnx'\] = 'nowhere.data' is not a data file listed in 'files'"),
    (lambda v: v["external_data"].update({"encoder.onnx": "decoder_step.onnx"}),
     r"= 'decoder_step.onnx' is not a data file listed in 'files'"),
    (lambda v: v["external_data"].update({"tokenizer.json": "encoder.onnx.data"}),
     r"names 'tokenizer.json', not a graph of this variant"),
    (lambda v: v.update(encoder="encoder.int8.onnx", external_data={"encoder.int8.onnx": "encoder.onnx.data"}),
     r"variants\['int8'\]\['external_data'\] gives 'encoder.int8.onnx' the data file 'encoder.int8.onnx.data', "
     r"another variant 'encoder.onnx.data': a graph has one data file"),
])
def test_the_manifest_field_is_checked(ext, change, message):
    edit_manifest(ext, lambda m: change(m["variants"]["fp32"]))
    refused(ext, message, load=read_package)


# --- a variant's shared data file (export/graph_files.py share_weights) -----------------------------------------
def test_a_weight_that_several_graphs_hold_is_stored_once(tiny_package):
    """The tiny model's positions table (512 x 64 float32, 128 KiB) is in both graphs of each variant: it lies once in
    the variant's shared data file, both graphs reference the same bytes there, and nothing else does (its embedding
    table, 32 KiB, is under SHARED_MIN_BYTES; at vocab 32000 it is shared too)."""
    manifest = json.loads((tiny_package / "manifest.json").read_text())
    for name, variant in manifest["variants"].items():
        data = name + SHARED_SUFFIX
        assert variant["external_data"] == {g: data for g in variant_graphs(variant)}, name
        refs = []
        for graph in variant_graphs(variant):
            tensors = external_tensors((tiny_package / graph).read_bytes())
            assert {dict(t.entries)["location"] for t in tensors} == {data}
            refs.append({(dict(t.entries)["offset"], dict(t.entries)["length"]) for t in tensors})
        assert refs[0] and all(r == refs[0] for r in refs), name
        lengths = [int(length) for _, length in refs[0]]
        assert all(n >= SHARED_MIN_BYTES for n in lengths) and 512 * 64 * 4 in lengths
        size = (tiny_package / data).stat().st_size
        assert sum(lengths) <= size < sum(lengths) + ALIGNMENT * len(lengths)
        assert manifest["files"][data] == {"sha256": sha256_of(tiny_package / data), "bytes": size}


@pytest.mark.parametrize("device, compute_type", [
    ("cpu", "float32"), ("cpu", "int8"),
    pytest.param("cuda", "float32", marks=pytest.mark.skipif(not CUDA_OK, reason=f"no CUDA device: {CUDA_REASON}"))])
def test_sessions_read_the_shared_weights_in_place_from_the_checked_bytes(tiny_package, tiny_data_dir, tmp_path,
                                                                          monkeypatch, device, compute_type):
    """On CPU the encoder's and the decoder step's sessions read one buffer, the bytes the runtime read and checked:
    onnxruntime reads nothing from the file (zeros written over it after the runtime's read change no translation)
    and copies nothing (both sessions' OrtValues point at the same memory). On CUDA onnxruntime copies the checked
    bytes to the device (add_external_initializers) and reads nothing from the file either."""
    sources = [line.split("\t")[0] for line in
               (tiny_data_dir / "valid.tsv").read_text(encoding="utf-8").splitlines()[:SOURCES]]
    want = Translator(tiny_package, device=device, compute_type=compute_type, intra_threads=1)
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_package, pkg)
    read_file = ModelPackage.read_file

    def read_then_spoil(self, name, verify=None):
        data = read_file(self, name, verify)
        if name.endswith(SHARED_SUFFIX):
            (self.root / name).write_bytes(bytes(len(data)))
        return data
    monkeypatch.setattr(ModelPackage, "read_file", read_then_spoil)
    got = Translator(pkg, device=device, compute_type=compute_type, intra_threads=1)
    assert not (pkg / (got.variant + SHARED_SUFFIX)).read_bytes().strip(b"\0")      # zeros on disk: it was read
    for beam in (1, 4):
        mine = got.translate_batch(sources, beam_size=beam, num_hypotheses=beam, return_scores=True)
        theirs = want.translate_batch(sources, beam_size=beam, num_hypotheses=beam, return_scores=True)
        assert [(r.token_ids, r.scores) for r in mine] == [(r.token_ids, r.scores) for r in theirs]
    if device == "cpu":
        pointers = [{v.data_ptr() for v in session._seq2onnx_weights} for session in (got.engine.encoder,
                                                                                       got.engine.decoder)]
        assert pointers[0] and pointers[0] == pointers[1]
