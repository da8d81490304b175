"""The graphs of N layers stamped from the trace of two (export/stamp.py) are those of a trace of all N.

A random tiny Transformer whose every weight differs (a layer wired to another's weights, inputs or outputs shows in
the numbers) with 3 encoder and 4 decoder layers: each stamped graph holds the same ops as the whole model's trace,
the same inputs and outputs (names, dtypes, axes), and computes the same numbers on inputs of sizes other than the
traced ones: a padded sentence, beams, rows of unequal past lengths over a cache of noise.
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from seq2onnx.export import onnx_export, stamp
from seq2onnx.export.fused_attention import FusedAttentionStep
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.training.model import Transformer

ENCODER_LAYERS, DECODER_LAYERS = 3, 4


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=40, dropout=0.0, attention_dropout=0.0, max_positions=16,
                             encoder_layers=ENCODER_LAYERS, decoder_layers=DECODER_LAYERS)
    model = Transformer(cfg).eval()
    with torch.no_grad():                     # biases and LayerNorms too: no two layers' weights alike
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def _traced(monkeypatch, whole: bool, export) -> int:
    """export() with stamping (or, `whole`, with a trace of every layer) -> how many times it traced."""
    calls = []
    real = torch.onnx.export
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(stamp, "TRACED_LAYERS", 1000 if whole else stamp.TRACED_LAYERS)
    export()
    monkeypatch.undo()
    return len(calls)


def _feed(cfg, graph: str, fmt: int) -> dict:
    rng = np.random.default_rng(3)
    sentences, beams, src_len, capacity = 3, 2, 6, 9
    rows = sentences * beams
    mask = np.ones((sentences, src_len), dtype=np.int64)
    mask[1, 4:] = 0
    if graph == "encoder":
        return {"input_ids": rng.integers(4, cfg.vocab_size, (sentences, src_len)), "attention_mask": mask}
    feed = {"input_ids": rng.integers(4, cfg.vocab_size, (rows, 1)), "encoder_attention_mask": mask}
    if fmt == 3:
        feed["past_length"] = np.array([0, 3, 8, 1, 5, 2])
    elif fmt == 2:
        feed["past_length"] = np.array(4)
    for prefix, size, length in (("past", rows, capacity if fmt >= 2 else 4), ("cross", sentences, src_len)):
        for name in onnx_export.cache_names(prefix, cfg.decoder_layers):
            feed[name] = rng.standard_normal((size, cfg.n_heads, length, cfg.head_dim)).astype(np.float32)
    return feed


def _same_graph(cfg, graph: str, fmt: int, stamped, whole) -> None:
    a, b = onnx.load(str(stamped)), onnx.load(str(whole))
    assert Counter((n.domain, n.op_type) for n in a.graph.node) == Counter((n.domain, n.op_type) for n in b.graph.node)
    assert onnx_export.graph_io(stamped) == onnx_export.graph_io(whole)
    feed = _feed(cfg, graph, fmt)
    got, expected = (ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feed)
                     for p in (stamped, whole))
    for x, y in zip(got, expected):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


def test_stamped_graphs_are_the_whole_trace(model, tmp_path, monkeypatch, fmt=3):
    """The encoder and the decoder step of format 3 (the default)."""
    for graph, export in (("encoder", onnx_export._export_encoder), ("decoder", onnx_export._export_decoder)):
        paths = {kind: tmp_path / f"{graph}.{kind}.onnx" for kind in ("stamped", "whole")}
        for kind, path in paths.items():
            traces = _traced(monkeypatch, kind == "whole",
                             lambda: export(model, path, onnx_export.DEFAULT_OPSET, fmt, external=False)
                             if graph == "decoder" else export(model, path, onnx_export.DEFAULT_OPSET, fmt, False))
            assert traces == 1, (graph, kind)          # stamped: the truncated model's trace only, no fallback
        _same_graph(model.cfg, graph, fmt, paths["stamped"], paths["whole"])


def test_stamped_fused_attention_step_is_the_whole_trace(model, tmp_path, monkeypatch):
    """The int8 variant's source where the plain step cannot be rewritten: onnxruntime's fused attention traced."""
    paths = {kind: tmp_path / f"fused.{kind}.onnx" for kind in ("stamped", "whole")}
    for kind, path in paths.items():
        assert _traced(monkeypatch, kind == "whole", lambda: onnx_export._export_decoder(
            model, path, onnx_export.DEFAULT_OPSET, 3, step_type=FusedAttentionStep)) == 1
    assert {n.op_type for n in onnx.load(str(paths["stamped"])).graph.node} >= {"GroupQueryAttention"}
    _same_graph(model.cfg, "decoder", 3, paths["stamped"], paths["whole"])


def test_a_trace_stamp_does_not_know_is_traced_whole(model, tmp_path, monkeypatch):
    """Where the traced layers are not as stamp expects (here: it says so), the whole model is traced instead."""
    def refuse(*a, **k):
        raise stamp.NotStampable("test")
    monkeypatch.setattr(stamp, "stamp_decoder", refuse)
    calls = []
    real = torch.onnx.export
    monkeypatch.setattr(torch.onnx, "export", lambda *a, **k: calls.append(k["output_names"]) or real(*a, **k))
    path = tmp_path / "decoder.onnx"
    onnx_export._export_decoder(model, path, onnx_export.DEFAULT_OPSET, 3)
    assert [len(names) for names in calls] == [2 + 2 * 2, 2 + 2 * DECODER_LAYERS]   # the truncation's, then the whole
    assert [o.name for o in onnx.load(str(path)).graph.output] == calls[1]
