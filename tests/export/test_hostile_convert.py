"""`seq2onnx convert` against hostile transformers folders. Each case is the tiny
MarianMT folder of tests/hf_folders.py (built once a session) with one file changed; the converter reads the folder
by the runtime's rule for package files (runtime/package/files.py: a regular file in the folder itself, at most a
limit of bytes) and checks every setting when it reads it, so each refusal is one line and exit 2, before any
export work, with nothing written and nothing of transformers' printed (capfd: file-descriptor level)."""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.hf_folders import hf_folders  # noqa: F401 - the fixture
from seq2onnx.export import commands, hf_convert, hf_tokenizers, parity
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.package.manifest import read_package

OUTSIDE = "w11_outside.safetensors"


@pytest.fixture(scope="module")
def marian(hf_folders):  # noqa: F811
    return hf_folders.get("marian")


@pytest.fixture
def folder(marian, tmp_path):
    """A copy of the marian folder (real files), with a weights file beside it, outside it."""
    copy = tmp_path / "model"
    shutil.copytree(marian, copy)
    shutil.copy(marian / "model.safetensors", tmp_path / OUTSIDE)
    return copy


def refused(folder: Path, capfd, *extra: str) -> str:
    """`seq2onnx convert FOLDER OUT` -> its one line (exit 2, nothing written, nothing else printed)."""
    out = folder.parent / "out"
    rc = main(["convert", str(folder), str(out), *extra])
    captured = capfd.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and not captured.out, captured.err + captured.out
    assert not out.exists() and not [p for p in folder.parent.iterdir() if ".partial-" in p.name]
    return lines[0]


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def as_index(folder: Path, shard: str) -> None:
    """model.safetensors replaced by an index that names `shard` for every tensor."""
    from safetensors import safe_open

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = list(f.keys())
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {},
                                                                      "weight_map": dict.fromkeys(names, shard)}))


# --- nothing outside the folder, regular files only ---------------------------------------------------------------
@pytest.mark.parametrize("shard, message", [
    (f"../{OUTSIDE}", rf"the file name '\.\./{OUTSIDE}' is not a file of the folder: seq2onnx convert reads "
                      "nothing outside the model folder"),
    ("ABSOLUTE", "is not a file of the folder: seq2onnx convert reads nothing outside the model folder"),
    ("linked.safetensors", r"linked.safetensors is a symbolic link: seq2onnx convert reads nothing outside the model "
                           r"folder; copy the files themselves into it \(cp -L\)"),
    ("gone.safetensors", r"model.safetensors.index.json names the file 'gone.safetensors', which the folder does not "
                         "hold"),
])
def test_weights_index_stays_inside_the_folder(folder, capfd, shard, message):
    if shard == "ABSOLUTE":
        shard = str(folder.parent / OUTSIDE)
    if shard == "linked.safetensors":
        os.symlink(folder.parent / OUTSIDE, folder / shard)
    as_index(folder, shard)
    assert re.search(message, refused(folder, capfd))


@pytest.mark.parametrize("name", ["vocab.json", "config.json", "source.spm", "generation_config.json"])
def test_a_link_to_outside_is_refused_before_it_is_read(folder, capfd, name):
    (folder / name).unlink()
    os.symlink("/etc/passwd", folder / name)
    assert f"{folder / name} is a symbolic link: seq2onnx convert reads nothing outside" in refused(folder, capfd)


def test_a_fifo_or_device_is_never_opened(folder, capfd):
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")                  # opening it to read would block forever
    assert f"{folder / 'config.json'} is not a regular file" in refused(folder, capfd)
    (folder / "config.json").unlink()
    os.symlink("/dev/zero", folder / "config.json")    # read whole, it would fill the memory
    assert "is a symbolic link" in refused(folder, capfd)


def test_files_past_their_limit_are_not_read_whole(folder, capfd):
    with open(folder / "config.json", "ab") as f:      # trailing spaces: valid JSON, but no config is this large
        f.truncate(hf_tokenizers.MAX_SETTINGS_BYTES + 10)
    assert f"config.json has more than {hf_tokenizers.MAX_SETTINGS_BYTES} bytes" in refused(folder, capfd)


# --- tokenizer files are what they claim, of the model's size ----------------------------------------------------
def test_empty_sentencepiece_model_is_refused(folder, capfd):
    (folder / "source.spm").write_bytes(b"")
    assert f"{folder / 'source.spm'} is not a SentencePiece model (it holds no pieces)" in refused(folder, capfd)


def test_converted_tokenizers_are_checked_against_transformers(hf_folders, folder):  # noqa: F811
    """The ids check before anything is written: the marian tokenizers pass against their own folder and are
    refused against another model's (the check can fail)."""
    config = json.loads((folder / "config.json").read_text())
    converted = hf_tokenizers.convert(folder, config)
    hf_tokenizers.check_against_transformers(folder, converted, marian=True)
    other = hf_folders.tokenizer_folder("marian_multilingual")
    with pytest.raises(Seq2OnnxError, match=r"the converted source tokenizer gives 'Hello, world!' the ids .*, "
                                            r"transformers' MarianTokenizer .*: the folder's tokenizer files"):
        hf_tokenizers.check_against_transformers(other, converted, marian=True)


def test_vocabulary_larger_than_the_model_is_refused_when_read(folder, capfd):
    vocab = json.loads((folder / "vocab.json").read_text())
    size = json.loads((folder / "config.json").read_text())["vocab_size"]
    vocab.update({f"extra{i}": len(vocab) + i for i in range(2000)})
    (folder / "vocab.json").write_text(json.dumps(vocab))
    assert f"vocab.json has {len(vocab)} tokens but config.json's vocab_size is {size}: the vocabulary does not " \
           "belong to this model" in refused(folder, capfd)


# --- weights and config that do not fit, one line and no transformers report --------------------------------------
def test_weights_of_other_shapes_or_not_finite(folder, capfd):
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "model.safetensors"))
    name = next(k for k in weights if k.endswith("fc1.weight"))
    good = weights[name].clone()
    weights[name] = torch.zeros(good.shape[0] + 3, good.shape[1])
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    assert f"the weight {name} has shape ({good.shape[0] + 3}, {good.shape[1]}), config.json implies " \
           f"({good.shape[0]}, {good.shape[1]})" in refused(folder, capfd)
    weights[name] = good
    weights[name][0, 0] = float("nan")
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    assert f"the weight {name} holds NaN or infinite values" in refused(folder, capfd)


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "config.json should be an object of settings, got list"),
    ("[" * 100_000, "config.json nests lists and objects more deeply than JSON is read here"),
    ({"activation_function": ["relu"]}, r"activation_function \['relu'\] is not supported"),
    ({"pad_token_id": None}, r"pad_token_id should be a token id in \[0, \d+\], got None"),
    ({"eos_token_id": 10**9}, r"eos_token_id should be a token id in \[0, \d+\], got 1000000000"),
    ({"d_model": "64"}, r"d_model should be an integer in \[1, 65536\], got '64'"),
    ({"max_position_embeddings": 10**12}, r"max_position_embeddings should be an integer in \[1, 1048576\]"),
    ({"init_std": float("nan")}, "init_std should be a finite number, got nan"),
    ({"scale_embedding": "yes"}, "scale_embedding should be true or false, got 'yes'"),
])
def test_config_fields_are_checked_when_read(folder, capfd, text, message):
    if isinstance(text, dict):
        edit_json(folder / "config.json", **text)
    else:
        (folder / "config.json").write_text(text)
    line = refused(folder, capfd)
    assert f"{folder / 'config.json'}" in line and re.search(message, line), line


# --- generation_config.json, checked when read --------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    ({"num_beams": 10**6}, r"num_beams should be an integer in \[1, 256\], got 1000000"),
    ({"num_beams": -3}, r"num_beams should be an integer in \[1, 256\], got -3"),
    ({"suppress_tokens": [-5]}, r"suppress_tokens should be a list of token ids in \[0, \d+\], got \[-5\]"),
    ({"bad_words_ids": [[[629]]]}, r"bad_words_ids should be a list of lists of token ids in \[0, \d+\]"),
    ({"bad_words_ids": 5}, r"bad_words_ids should be a list of lists of token ids .*, got 5"),
    ({"length_penalty": "long"}, r"length_penalty should be a number in \[-10, 10\], got 'long'"),
    ({"early_stopping": "maybe"}, r"early_stopping should be true or false or \"never\", got 'maybe'"),
    ({"forced_eos_token_id": [1, 10**7]}, r"forced_eos_token_id should be a token id in \[0, \d+\] or a list"),
])
def test_generation_config_is_checked_when_read(folder, capfd, change, message):
    edit_json(folder / "generation_config.json", **change)
    line = refused(folder, capfd)
    assert f"{folder / 'generation_config.json'}: " in line and re.search(message, line), line
    assert ".partial-" not in line and "seq2onnx export" not in line


# --- --parity-data is read as translate reads its input ----------------------------------------------------------
def test_parity_data_is_read_bounded(folder, tmp_path):
    config = hf_convert.read_config(folder)
    cfg = hf_convert.model_config(config)
    tok = hf_tokenizers.convert(folder, config).source_tokenizer()
    limit = cfg.max_positions - 1
    sources = commands._parity_sources(Path("/dev/zero"), tok, cfg)       # one endless line: a bounded prefix
    assert len(sources) == 1 and len(sources[0]) <= limit + 1 and sources[0][-1] == cfg.eos_id
    long = tmp_path / "long.txt"
    long.write_text("word " * 2_000_000 + "\nSecond line.\n")              # 10 MB in its first line
    sources = commands._parity_sources(long, tok, cfg)
    assert len(sources) == 2 and len(sources[0]) == limit + 1
    assert sources[1] == tok.encode("Second line.").ids + [cfg.eos_id]
    with pytest.raises(Seq2OnnxError, match="cannot read --parity-data .*: no such file"):
        commands._parity_sources(tmp_path / "none.txt", tok, cfg)


# --- the messages name the right command and flag -----------------------------------------------------------------
def test_int8_gate_names_skip_int8_validation():
    report = parity.ParityReport("CPUExecutionProvider", 0, 0, 0, 0.5, 0.5, 0, 0, 0, 10, 10)
    with pytest.raises(parity.ParityError, match=r"int8 parity check 'top-1 agreement' failed: 0.5000 < .*; the "
                                                 r"package was not written \(leave out --int8, or keep it with "
                                                 r"--skip-int8-validation"):
        parity.check_reduced(report, "int8")


def test_translate_of_a_transformers_folder_names_convert(marian, capfd):
    assert main(["translate", str(marian), "-i", os.devnull]) == 2
    line = capfd.readouterr().err.strip()
    assert line.count("\n") == 0 and f"{marian} is a transformers model folder (it holds model.safetensors), not a " \
        f"seq2onnx model package: convert it first, e.g. seq2onnx convert {marian} MODEL_DIR" in line, line
    with pytest.raises(Seq2OnnxError, match="seq2onnx convert"):
        read_package(marian)
