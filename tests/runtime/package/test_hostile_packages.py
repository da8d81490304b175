"""Hostile model folders: a package is untrusted input. Whatever its manifest, tokenizer or graphs
hold, loading it either works or raises one ModelPackageError line naming the file and the field, at load;
nothing outside the folder is read, every byte used is covered by the manifest's checksums, and a broken
graph is reported, never turned into an empty or NaN translation. Each case edits a copy of the session's
real tiny package (docs/SECURITY.md lists what these tests hold the runtime to)."""
from __future__ import annotations

import base64
import json
import os
import re

import numpy as np
import pytest

from seq2onnx.runtime.package import manifest as manifest_module
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.translator import Translator
from tests.runtime.package.test_manifest import edit_manifest, pkg  # noqa: F401 - pkg: a copy of the tiny package, per test
from tests.runtime.package.test_reliability_packages import relist

SOURCE = "three one four"


def refused(path, match, load=read_package):
    """`load(path)` raises one ModelPackageError line matching `match`; `seq2onnx info` says the same."""
    with pytest.raises(ModelPackageError, match=match) as e:
        load(path)
    assert "\n" not in str(e.value)
    return str(e.value)


def translator(path, **kwargs):
    return Translator(path, device="cpu", **kwargs)


def info_says(path, capsys, message):
    assert main(["info", str(path)]) == 2
    assert capsys.readouterr().err == f"seq2onnx info: error: {message}\n"


def edit_tokenizer(pkg, change):
    """Change tokenizer.json (a dict) and list its new checksum: a consistent, hostile package."""
    path = pkg / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")
    relist(pkg, "tokenizer.json")


# --- the manifest is checked, whole, at load -----------------------------------------------------------------
def test_manifest_over_the_size_limit_is_refused(pkg, capsys):
    edit_manifest(pkg, lambda m: m.update(padding=" " * manifest_module.MAX_MANIFEST_BYTES))
    message = refused(pkg, f"manifest.json has more than {manifest_module.MAX_MANIFEST_BYTES} bytes")
    info_says(pkg, capsys, message)


@pytest.mark.parametrize("depth", [manifest_module.MAX_JSON_DEPTH + 1, 200_000])
def test_deeply_nested_manifest_is_refused(pkg, depth):
    path = pkg / "manifest.json"
    text = path.read_text(encoding="utf-8").rstrip()
    path.write_text(text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}", encoding="utf-8")
    refused(pkg, f"nests lists and objects more than {manifest_module.MAX_JSON_DEPTH} levels deep")


def _set(*keys_and_value):
    """An edit that sets manifest[k1][k2]... = value."""
    *keys, value = keys_and_value

    def change(m):
        for key in keys[:-1]:
            m = m[key]
        m[keys[-1]] = value(m[keys[-1]]) if callable(value) else value
    return change


FIELDS = [  # (edit, what the message must say)
    (_set("config", "decoder_layers", 10**9), r"decoder_layers must be an integer in \[1, 1024\], got 1000000000"),
    (_set("config", "decoder_layers", float), r"decoder_layers must be an integer in \[1, 1024\], got 2.0"),
    (_set("config", "vocab_size", float), r"vocab_size must be an integer in \[1, 16777216\], got \d+\.0"),
    (_set("config", "n_heads", 4.0), r"n_heads must be an integer"),
    (_set("config", "norm_first", 0), r"norm_first must be true or false, got 0"),
    (_set("config", "pad_id", True), r"pad_id must be an integer in \[0, 16777216\], got True"),
    (_set("config", "max_positions", 10**12), r"max_positions must be an integer in \[1, 1048576\]"),
    (_set("config", "layer_norm_eps", "1e-5"), r"layer_norm_eps must be a finite number"),
    (lambda m: m["config"].pop("n_heads"), r"the field config.n_heads is missing"),
    (_set("config", []), r"the field config should be an object, got \[\]"),
    (_set("special_tokens", ["<pad>"]), r"the field special_tokens should be an object, got \['<pad>'\]"),
    (_set("special_tokens", "eos", 2), r"the field special_tokens.eos should be a string, got 2"),
    (_set("vocab_size", str), r"the field vocab_size should be an integer, got '\d+'"),
    (_set("variants", "fp32", "parity", "1.0"), r"the field variants\['fp32'\]\['parity'\] should be an object"),
    (_set("variants", "fp32", "status", 5), r"the field variants\['fp32'\]\['status'\] should be a string, got 5"),
    (_set("variants", "fp32", "status", "trusted"), r"variants\['fp32'\]\['status'\] should be one of checked, "),
    (_set("variants", "fp32", "precision", []), r"the field variants\['fp32'\]\['precision'\] should be a string"),
    (_set("graphs", []), r"the field graphs should be an object, got \[\]"),
    (_set("graphs", "decoder_step", 1), r"the field graphs.decoder_step should be an object, got 1"),
    (_set("files", "tokenizer.json", "sha256", "0" * 63), r"files\['tokenizer.json'\] should have a 'sha256' of 64"),
    (_set("files", "tokenizer.json", "bytes", True), r"the field files\['tokenizer.json'\]\['bytes'\] should be an "
                                                     r"integer, got True"),
    (lambda m: m["files"].update({"a\x00b": m["files"]["README.md"]}), r"bad file name 'a\\x00b' in 'files'"),
    (_set("exporter", ["torch"]), r"the field exporter should be an object, got \['torch'\]"),
    (_set("exporter", "torch", 2), r"the field exporter\['torch'\] should be a string, got 2"),
    (_set("source_checkpoint", "best.pt"), r"the field source_checkpoint should be an object, got 'best.pt'"),
    (_set("source_checkpoint", "train_meta", [400]), r"the field source_checkpoint.train_meta should be an object"),
    (_set("opset", "18"), r"the field opset should be an integer, got '18'"),
    (_set("created", 20261122), r"the field created should be a string, got 20261122"),
]


@pytest.mark.parametrize("change, message", FIELDS, ids=[re.sub(r"[^\w.]+", "-", m)[:40] for _, m in FIELDS])
def test_every_field_is_checked_at_load_and_named(pkg, capsys, change, message):
    """Unchecked, a field could hang the runtime (10**9 layers: 4e9 I/O names), raise a raw TypeError /
    AttributeError / ValueError, pass the load and fail at the first translation, or crash `seq2onnx info`."""
    edit_manifest(pkg, change)
    text = refused(pkg, message)
    assert text.startswith(f"{pkg / 'manifest.json'}: ")
    info_says(pkg, capsys, text)


@pytest.mark.parametrize("config", [dict(n_heads=2), dict(d_model=128), dict(n_heads=8, d_model=128)],
                         ids=["heads", "width", "heads-and-width"])
def test_config_that_lies_about_the_graph_is_refused_at_load(pkg, config):
    """Unchecked, it would load and every translation would fail inside onnxruntime."""
    edit_manifest(pkg, lambda m: m["config"].update(config))
    refused(pkg, r"encoder.onnx: its cross_key_0 is tensor\(float\) \['batch', 4, 'src_len', 16\], the contract and "
                 r"the config \(n_heads \d, d_model \d+\) want tensor\(float\) or tensor\(float16\) \['\*', \d, '\*', "
                 r"\d+\]: the graph and the config do not belong together", load=translator)


# --- every byte read is checksummed, nothing outside the folder is read ------------------------------------------
@pytest.mark.parametrize("listed", [True, False], ids=["data-listed", "data-unlisted"])
def test_graph_with_external_data_is_refused(pkg, capsys, listed):
    """Loaded, onnxruntime would read the weights from encoder.onnx.data, which no checksum covers (a changed
    file would change the translations while `info` said "checksums verified")."""
    import onnx
    path = pkg / "encoder.onnx"
    onnx.save_model(onnx.load(str(path)), str(path), save_as_external_data=True, location="encoder.onnx.data")
    relist(pkg, "encoder.onnx")
    # and no variant names a data file for it (the export names fp32.shared.data: share_weights)
    edit_manifest(pkg, lambda m: m["variants"]["fp32"].pop("external_data", None))
    if listed:
        edit_manifest(pkg, lambda m: m["files"].update({"encoder.onnx.data": {"sha256": "0" * 64, "bytes": 0}}))
        relist(pkg, "encoder.onnx.data")
    message = refused(pkg, "keeps weights in external data files, which the package's checksums do not cover",
                      load=translator)
    assert message.startswith(f"{path} ")
    info_says(pkg, capsys, message)


@pytest.mark.parametrize("name", ["manifest.json", "tokenizer.json", "decoder_step.onnx", "README.md"])
def test_symbolic_link_is_refused(pkg, tmp_path, capsys, name):
    """Followed, the link could point anywhere (here: an identical file outside the folder)."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (pkg / name).rename(outside / name)
    (pkg / name).symlink_to(outside / name)
    message = refused(pkg, "is a symbolic link: the runtime reads nothing outside the package folder",
                      load=translator)
    assert message.startswith(f"{pkg / name} ")
    info_says(pkg, capsys, message)


@pytest.mark.parametrize("name", ["manifest.json", "tokenizer.json"])
def test_fifo_is_refused_without_blocking(pkg, name):
    (pkg / name).unlink()
    os.mkfifo(pkg / name)
    refused(pkg, f"{pkg / name} is not a regular file")


def test_a_file_replaced_after_the_check_is_caught_by_the_bytes_read(pkg):
    """The SHA-256 is taken of the bytes that are used: a file changed between read_package and the
    Translator's read of the graphs (same size, other bytes) is refused, not run."""
    package = read_package(pkg)
    path = pkg / "decoder_step.onnx"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ModelPackageError, match="decoder_step.onnx: its SHA-256 does not match"):
        package.read_variant("fp32")


# --- a tokenizer that crashes in Rust --------------------------------------------------------------------------
def precompiled(charsmap: bytes):
    return lambda t: t.update(normalizer={"type": "Precompiled",
                                          "precompiled_charsmap": base64.b64encode(charsmap).decode()})


def test_tokenizer_that_panics_when_loaded(pkg, capsys):
    """Uncaught: pyo3_runtime.PanicException (a BaseException) and a traceback."""
    edit_tokenizer(pkg, precompiled(b"\xff" * 64))
    message = refused(pkg, "tokenizer.json: the tokenizer crashed in its Rust code")
    info_says(pkg, capsys, message)


def test_tokenizer_that_panics_when_it_encodes(pkg):
    """A corrupt normalizer table that loads and panics on the first text (index out of bounds)."""
    edit_tokenizer(pkg, precompiled(b"\x08\x00\x00\x00" + b"\xff\xff\xff\x7f" * 2 + b"abc"))
    tr = translator(pkg)
    with pytest.raises(ModelPackageError, match=f"^{pkg / 'tokenizer.json'}: the tokenizer crashed in its Rust code"):
        tr.translate(SOURCE)


# --- a decoder that returns NaN ----------------------------------------------------------------------------------
def nan_decoder(pkg):
    """decoder_step.onnx with its log_probs multiplied by NaN, re-checksummed."""
    import onnx
    from onnx import helper, numpy_helper
    path = pkg / "decoder_step.onnx"
    model = onnx.load(str(path))
    for node in model.graph.node:
        node.output[:] = ["log_probs_raw" if o == "log_probs" else o for o in node.output]
    model.graph.initializer.append(numpy_helper.from_array(np.array(np.nan, dtype=np.float32), "nan"))
    model.graph.node.append(helper.make_node("Mul", ["log_probs_raw", "nan"], ["log_probs"]))
    onnx.save(model, str(path))
    relist(pkg, "decoder_step.onnx")


@pytest.mark.parametrize("options", [dict(beam_size=1), dict(beam_size=4),
                                     dict(beam_size=1, sampling_topk=5, seed=1)], ids=["greedy", "beam4", "sampling"])
def test_decoder_returning_nan_is_reported(pkg, options):
    """Unchecked, beam search would give an empty translation with score 0.0, greedy a score of nan, exit 0."""
    nan_decoder(pkg)
    tr = translator(pkg)
    with pytest.raises(ModelPackageError, match=f"^{pkg / 'decoder_step.onnx'} returned NaN or infinite log-probs: "
                                                f"the model package is broken"):
        tr.translate_batch([SOURCE], return_scores=True, **options)


# --- beyond the list: the tokenizer cannot change what the model sees -----------------------------------------
@pytest.fixture(scope="module")
def expected(tiny_package):
    return translator(tiny_package).translate_batch([SOURCE, "one two"], return_scores=True)


@pytest.mark.parametrize("setting", [
    {"padding": {"strategy": {"Fixed": 5000}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                 "pad_type_id": 0, "pad_token": "<pad>"}},
    {"truncation": {"max_length": 1, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}},
], ids=["padding", "truncation"])
def test_tokenizer_padding_and_truncation_are_ignored(pkg, expected, setting):
    """Honoured, they would let a package make every source 5000 ids long (or 10**9: memory without end), or
    one id."""
    edit_tokenizer(pkg, lambda t: t.update(setting))
    assert translator(pkg).translate_batch([SOURCE, "one two"], return_scores=True) == expected


def test_tokenizer_with_a_post_processor_is_refused(pkg):
    """Its template could add id 10**6 to every text, refused only at the first translation."""
    edit_tokenizer(pkg, lambda t: t.update(post_processor={
        "type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}},
                                                 {"SpecialToken": {"id": "X", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
        "special_tokens": {"X": {"id": "X", "ids": [10**6], "tokens": ["X"]}}}))
    refused(pkg, "tokenizer.json has a post-processor")


def test_tokenizer_ids_outside_the_vocabulary_are_refused(pkg):
    """A piece renumbered to 10**6 (the vocabulary keeps its size): refused at load, or encoding it would give
    that id."""
    def renumber(t):
        vocab = t["model"]["vocab"]
        vocab[next(k for k, i in vocab.items() if i == len(vocab) // 2)] = 10**6
    edit_tokenizer(pkg, renumber)
    refused(pkg, r"tokenizer.json: its token ids are not exactly 0..\d+, one per token")
