"""Decoder step contract 3: the rows of one step stand at different past_length (docs/CONTRACTS.md).

Each row of a step must get what the PyTorch reference (training/model.py decode_step, over a growing cache) gives
for that row alone at its own length: the model's decode_step_fixed, the exported contract-3 graph with the plain
attention (the fp32 variant) and with onnxruntime's fused GroupQueryAttention (what the int8 variant is quantised
from). A random tiny Transformer, no trained model: the rule checked is arithmetic, not what a model learned.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from seq2onnx.export import onnx_export
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.package.graph_io import DECODER_FORMAT, PAST_LENGTH, GraphNames
from seq2onnx.runtime.package.manifest import DECODER_OF_FORMAT, FORMAT_VERSION, decoder_format, manifest_format
from seq2onnx.training.model import Transformer

from tests.agreement import Float32Bounds

LENGTHS = (3, 0, 6, 1, 4, 6)       # past_length of each row: unequal, 0 (a row just added) and the longest twice
SENTENCES = 2                      # rows = SENTENCES x G, G = 3 rows per sentence share its cross K/V
CAPACITY = 9                       # > max(LENGTHS): the positions after each row's hold noise the step must ignore


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", vocab_size=40, dropout=0.0, attention_dropout=0.0, max_positions=16)
    model = Transformer(cfg).eval()
    g = torch.Generator().manual_seed(1)
    rows = len(LENGTHS)
    src = torch.randint(4, cfg.vocab_size, (SENTENCES, 5), generator=g)
    mask = torch.ones_like(src)
    mask[1, 3:] = 0                                                                  # the second sentence padded
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src, mask))                              # per layer [B, H, S, Dh]
    h, dh = cfg.n_heads, cfg.head_dim
    # each row's own past [1, H, L_r, Dh] per layer and cache entry, and the fixed-capacity cache holding them
    pasts = [[torch.randn(1, h, n, dh, generator=g) for _ in range(2 * cfg.decoder_layers)] for n in LENGTHS]
    cache = [torch.randn(rows, h, CAPACITY, dh, generator=g) for _ in range(2 * cfg.decoder_layers)]
    for r, n in enumerate(LENGTHS):
        for c, p in zip(cache, pasts[r]):
            c[r, :, :n] = p[0]
    tokens = torch.randint(4, cfg.vocab_size, (rows, 1), generator=g)
    return model, mask, cross, pasts, cache, tokens


def per_row_reference(setup):
    """Each row alone, at its own length, through decode_step (a growing cache): log-probs [R, V] and, per cache
    entry, the row's present [H, L_r + 1, Dh]."""
    model, mask, cross, pasts, _, tokens = setup
    g = len(LENGTHS) // SENTENCES
    logps, presents = [], []
    with torch.no_grad():
        for r, past in enumerate(pasts):
            s = r // g
            row_cross = [(k[s:s + 1], v[s:s + 1]) for k, v in cross]
            layers = [(past[2 * i], past[2 * i + 1]) for i in range(model.cfg.decoder_layers)]
            logp, present = model.decode_step(tokens[r:r + 1], mask[s:s + 1], layers, row_cross)
            logps.append(logp[0])
            presents.append([t[0] for kv in present for t in kv])
    return torch.stack(logps).numpy(), presents


def test_decode_step_fixed_gives_each_row_its_own_length(setup):
    model, mask, cross, _, cache, tokens = setup
    ref_logp, ref_present = per_row_reference(setup)
    lengths = torch.tensor(LENGTHS)
    layers = [(cache[2 * i].clone(), cache[2 * i + 1].clone()) for i in range(model.cfg.decoder_layers)]
    with torch.no_grad():
        logp, present, weights = model.decode_step_fixed(tokens, mask, lengths, layers, cross)
    # 1e-5, not a measured figure: a row's arithmetic is the same ops in the same order as decode_step's for that
    # row alone (its hidden positions weigh exp(-inf) = 0 exactly), only other rows sit beside it in the batch
    np.testing.assert_allclose(logp.numpy(), ref_logp, atol=1e-5, rtol=0)
    flat = [t for kv in present for t in kv]
    for r, n in enumerate(LENGTHS):
        for got, want, before in zip(flat, ref_present[r], cache):
            np.testing.assert_allclose(got[r, :, :n + 1].numpy(), want.numpy(), atol=1e-5, rtol=0)
            assert torch.equal(got[r, :, n + 1:], before[r, :, n + 1:])              # the rest untouched
    assert torch.allclose(weights.sum(-1), torch.ones(len(LENGTHS)))


@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_contract3_graph_gives_each_row_its_own_length(setup, tmp_path, fused):
    """The exported graph (onnxruntime, CPU) at unequal past_length: every row within the float32 bound of
    tests/agreement.py of the PyTorch reference for that row alone; present_i written in place (bound to past_i)."""
    model = setup[0]
    _, mask, cross, _, cache, tokens = setup
    path = tmp_path / "decoder_step.onnx"
    if fused:
        onnx_export.export_fused_decoder(model, path)
    else:
        onnx_export._export_decoder(model, path, onnx_export.DEFAULT_OPSET, DECODER_FORMAT)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    shape = {i.name: i.shape for i in sess.get_inputs()}[PAST_LENGTH]
    assert len(shape) == 1 and isinstance(shape[0], str)                             # [rows], a dynamic axis
    names = GraphNames.for_config(model.cfg, DECODER_FORMAT)
    past = [c.numpy().copy() for c in cache]
    feeds = [tokens.numpy(), mask.numpy(), np.array(LENGTHS, dtype=np.int64)] + past + \
        [t.numpy() for kv in cross for t in kv]
    io = sess.io_binding()
    for name, value in zip(names.decoder_inputs, feeds):
        io.bind_cpu_input(name, value)
    for name in names.decoder_outputs:
        if name.startswith("present_"):                  # written in place, as the runtime binds it
            io.bind_output(name, "cpu", 0, np.float32, past[0].shape,
                           past[names.decoder_outputs.index(name) - 1].ctypes.data)
        else:
            io.bind_output(name)
    sess.run_with_iobinding(io)
    logp = io.get_outputs()[0].numpy()
    ref_logp, ref_present = per_row_reference(setup)
    bound = Float32Bounds.of_model(model).log_prob
    assert np.abs(logp - ref_logp).max() <= bound, (np.abs(logp - ref_logp).max(), bound)
    for r, n in enumerate(LENGTHS):
        for got, want in zip(past, ref_present[r]):
            # the cache entries are the K/V projections of the step's input: the same bound's kind, 1e-5 covers
            # d_model-term sums of values near 1 (d u S with S ~ 30 here)
            np.testing.assert_allclose(got[r, :, :n + 1], want.numpy(), atol=1e-5, rtol=0)


def test_manifest_formats_map_to_decoder_contracts():
    """Format 4 is contract 3; format 3 packages stay contract 2; export writes the newest."""
    assert decoder_format(4) == 3 and decoder_format(3) == 2 and decoder_format(2) == 2 and decoder_format(1) == 1
    assert manifest_format(DECODER_FORMAT) == FORMAT_VERSION == 4 and manifest_format(2) == 3
    assert set(DECODER_OF_FORMAT.values()) == {1, 2, 3}
