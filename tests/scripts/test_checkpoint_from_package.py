"""scripts/checkpoint_from_package.py: a package's fp32 graphs -> the checkpoint they were exported from."""
from __future__ import annotations

import importlib.util
import json

import torch

from tests import REPO

SCRIPT = REPO / "scripts" / "checkpoint_from_package.py"


def _script():
    spec = importlib.util.spec_from_file_location("checkpoint_from_package", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recovers_the_exported_weights_exactly(tiny_package, tiny_checkpoint, tiny_data_dir, tmp_path):
    """Every weight of the tiny run's best.pt comes back bit for bit from the package exported from it (the
    graphs hold float32 copies, so nothing is rounded), with the manifest's train_meta and tokenizer."""
    from seq2onnx.training.checkpoint import load_checkpoint

    out = tmp_path / "recovered.pt"
    report = _script().recover(tiny_package, out, tiny_data_dir / "valid.tsv")
    recovered, original = load_checkpoint(out), load_checkpoint(tiny_checkpoint)
    assert set(recovered["model"]) == set(original["model"])
    different = [k for k, v in original["model"].items() if not torch.equal(recovered["model"][k], v.float())]
    assert not different
    assert recovered["config"] == original["config"]
    manifest = json.loads((tiny_package / "manifest.json").read_text(encoding="utf-8"))
    assert recovered["tokenizer"] == (tiny_package / "tokenizer.json").read_text(encoding="utf-8")
    assert recovered["train_meta"]["step"] == manifest["source_checkpoint"]["train_meta"]["step"]
    source = recovered["train_meta"]["recovered_from"]
    assert source["graphs_sha256"]["encoder.onnx"] == manifest["files"]["encoder.onnx"]["sha256"]
    assert report.greedy_token_match == 1.0 and report.beam4_token_match == 1.0

