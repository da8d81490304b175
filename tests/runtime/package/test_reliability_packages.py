"""Model folders: every damaged, foreign or half-written package is refused when it is loaded,
by the API (ModelPackageError) and the CLI (exit 2, one stderr line), with a message that names the
file and the fix. Each case damages a copy of the session's tiny package the way it happens in life."""
from __future__ import annotations

import json
import shutil

import pytest

from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import sha256_of
from seq2onnx.runtime.translator import Translator
from seq2onnx.training.tokenizer import train_tokenizer
from tests.runtime.package.test_manifest import edit_manifest, pkg  # noqa: F401 - pkg: a copy of the tiny package, per test

REEXPORT = "re-export the model with `seq2onnx export`"


def relist(pkg, name):
    """Make manifest.json describe the current content of `name` (a consistent, but replaced, file)."""
    path = pkg / name
    edit_manifest(pkg, lambda m: m["files"][name].update(sha256=sha256_of(path), bytes=path.stat().st_size))


def refused(path, message, capsys, info=True, **kwargs):
    """The exact one-line message, from the API and from `seq2onnx translate` / `seq2onnx info` (which reads
    and checks the files but does not start onnxruntime: info=False for what only a session finds)."""
    with pytest.raises(ModelPackageError) as e:
        Translator(path, device="cpu", **kwargs)
    assert str(e.value) == message
    args = ["--no-verify"] if kwargs.get("verify") is False else []
    if kwargs.get("compute_type"):
        args += ["--compute-type", kwargs["compute_type"]]
    assert main(["translate", str(path), "--device", "cpu", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"seq2onnx translate: error: {message}\n"
    if info and not kwargs:
        assert main(["info", str(path)]) == 2
        assert capsys.readouterr().err == f"seq2onnx info: error: {message}\n"


# --- missing files -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["encoder.onnx", "decoder_step.onnx", "encoder.int8.onnx", "tokenizer.json",
                                  "README.md"])
def test_missing_file_names_it_and_the_fix(pkg, capsys, name):
    (pkg / name).unlink()
    refused(pkg, f"{pkg / name} is missing (listed in manifest.json); copy the whole package folder or {REEXPORT}",
            capsys)


def test_missing_manifest(pkg, capsys):
    (pkg / "manifest.json").unlink()
    refused(pkg, f"{pkg / 'manifest.json'} is missing: {pkg} is not a seq2onnx model package; {REEXPORT}", capsys)


# --- truncated or corrupted graphs -------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["encoder.onnx", "decoder_step.int8.onnx"])
def test_truncated_graph(pkg, capsys, name):
    path = pkg / name
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:size // 2])
    refused(pkg, f"{path} has {size // 2} bytes, manifest.json says {size} (truncated or changed); copy the "
                 f"package again or {REEXPORT}", capsys)


@pytest.mark.parametrize("name, compute_type", [("decoder_step.onnx", None), ("encoder.int8.onnx", "int8"),
                                                ("tokenizer.json", None)])
def test_corrupted_file_of_the_same_size_fails_its_sha256(pkg, capsys, name, compute_type):
    path = pkg / name
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x20
    path.write_bytes(bytes(data))
    kwargs = {"compute_type": compute_type} if compute_type else {}
    refused(pkg, f"{path}: its SHA-256 does not match manifest.json (the file is corrupt or was changed); copy the "
                 f"package again or {REEXPORT}", capsys, **kwargs)


def test_corrupted_graph_that_onnxruntime_cannot_load(pkg, tiny_package, capsys):
    """Checksums that agree with garbage (a package made by hand), or --no-verify: bytes that are no protobuf
    are refused before onnxruntime sees them (runtime/package/onnx_bytes.py), a protobuf that is no model by
    onnxruntime."""
    path = pkg / "encoder.onnx"
    path.write_bytes(b"\x08\x07" + bytes(range(256)) * 40)
    relist(pkg, "encoder.onnx")
    refused(pkg, f"{path} is not a valid ONNX model (field number 0 at byte 3); {REEXPORT}", capsys)

    path.write_bytes(b"\x08\x07\x12\x04abcd")                   # ir_version 7, producer_name "abcd": no graph
    relist(pkg, "encoder.onnx")
    with pytest.raises(ModelPackageError) as e:
        Translator(pkg, device="cpu")
    message = str(e.value)
    assert message.startswith(f"{path}: onnxruntime cannot load it (") and message.endswith("); re-export the model")
    refused(pkg, message, capsys, info=False)

    unverified = pkg.parent / "unverified"
    shutil.copytree(tiny_package, unverified)
    path = unverified / "decoder_step.onnx"
    data = bytearray(path.read_bytes())
    data[10:4000] = bytes(3990)                          # the same size: only the SHA-256 could tell
    path.write_bytes(bytes(data))
    with pytest.raises(ModelPackageError) as e:
        Translator(unverified, device="cpu", verify=False)
    message = str(e.value)
    assert message.startswith(f"{path} is not a valid ONNX model (") and message.endswith(f"); {REEXPORT}")
    refused(unverified, message, capsys, info=False, verify=False)


# --- the manifest -------------------------------------------------------------------------------------
@pytest.mark.parametrize("version, fix", [(5, "upgrade seq2onnx (update its checkout, then pip install it again)"), (0, REEXPORT),
                                          ("1", REEXPORT), (True, REEXPORT), (None, REEXPORT)])
def test_unknown_format_version(pkg, capsys, version, fix):
    edit_manifest(pkg, (lambda m: m.pop("format_version")) if version is None else
                  (lambda m: m.update(format_version=version)))
    refused(pkg, f"{pkg / 'manifest.json'}: format_version {version!r} is unknown; this runtime reads "
                 f"format_version 1, 2, 3 and 4: {fix}", capsys)


def test_a_format_version_that_does_not_match_the_graphs_is_refused(pkg, capsys):
    """The package's graphs follow format 2: a manifest that claims 1 is refused at load, naming the decoder
    graph and the contract it misses."""
    edit_manifest(pkg, lambda m: m.update(format_version=1))
    with pytest.raises(ModelPackageError, match=r"decoder_step.onnx: graph inputs/outputs .* do not match the "
                                                r"decoder_step contract of decoder format 1"):
        Translator(pkg, device="cpu")


def test_truncated_manifest(pkg, capsys):
    path = pkg / "manifest.json"
    path.write_text(path.read_text(encoding="utf-8")[:200], encoding="utf-8")
    with pytest.raises(ModelPackageError) as e:
        Translator(pkg, device="cpu")
    assert str(e.value).startswith(f"{path} is not valid JSON (") and str(e.value).endswith(f"); {REEXPORT}")
    refused(pkg, str(e.value), capsys)


# --- a tokenizer that is not the model's -----------------------------------------------------------------
@pytest.fixture(scope="module")
def other_tokenizer():
    """A real tokenizer of another size, trained on the same kind of text."""
    tok = train_tokenizer([t for pair in toy_pairs(200, seed=9) for t in pair], 40)
    assert tok.get_vocab_size() == 40
    return tok


def test_tokenizer_of_another_vocabulary_size(pkg, capsys, other_tokenizer):
    other_tokenizer.save(str(pkg / "tokenizer.json"))
    relist(pkg, "tokenizer.json")                       # as if the manifest had been fixed up too
    vocab = json.loads((pkg / "manifest.json").read_text())["config"]["vocab_size"]
    refused(pkg, f"{pkg / 'tokenizer.json'} has 40 tokens but the model config has vocab_size {vocab} (manifest "
                 f"vocab_size {vocab}): the tokenizer does not belong to this model; {REEXPORT}", capsys)


def test_config_edited_to_the_other_tokenizer_is_caught_by_the_graph(pkg, capsys, other_tokenizer):
    """manifest config and vocab_size made to agree with the swapped tokenizer: the graph still scores
    the model's own vocabulary, and says so."""
    vocab = json.loads((pkg / "manifest.json").read_text())["config"]["vocab_size"]
    other_tokenizer.save(str(pkg / "tokenizer.json"))
    relist(pkg, "tokenizer.json")
    edit_manifest(pkg, lambda m: (m["config"].update(vocab_size=40), m.update(vocab_size=40)))
    refused(pkg, f"{pkg / 'decoder_step.onnx'}: the graph scores {vocab} tokens per step but {pkg} has a tokenizer "
                 f"and config of 40: the tokenizer does not belong to this model; {REEXPORT}", capsys, info=False)


# --- what an interrupted export leaves ----------------------------------------------------------------
def test_staging_folder_of_an_interrupted_export(pkg, capsys):
    """The hidden folder an export writes into (export/package.py) before manifest.json, its last file."""
    staging = pkg.parent / f".{pkg.name}.partial-4242-x1y2z3"
    pkg.rename(staging)
    (staging / "manifest.json").unlink()
    refused(staging, f"{staging} is the unfinished staging folder of an interrupted `seq2onnx export` to "
                     f"{pkg}: run that export again (it removes this folder)", capsys)
    refused(pkg, f"{pkg} does not exist: an export to it was interrupted (its unfinished staging folder "
                 f"{staging.name} is left): run the export again", capsys)


def test_previous_package_left_aside_by_an_interrupted_overwrite(pkg, capsys):
    aside = pkg.parent / f".{pkg.name}.old-4242-abcd1234"
    pkg.rename(aside)
    refused(pkg, f"{pkg} does not exist: an export to it was interrupted and the previous package is left aside at "
                 f"{aside}: run the export again with --overwrite (it puts the previous package back first), or "
                 f"rename {aside.name} back to {pkg.name}", capsys)
    Translator(aside, device="cpu").translate("one two")          # it is a complete package
