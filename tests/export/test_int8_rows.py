"""One client's int8 answer does not depend on its batch-mates: every int8 graph quantises each row's activations
with that row's own scale (export/int8_rows.py), so a row's integer sums, and all that follows them, are the same
alone and beside any other rows. quantize_dynamic's per-tensor scale (one over the whole batch and its padding) is
quantised here too, to show that these comparisons fail on it."""
from __future__ import annotations

import json
import random
import shutil
from itertools import groupby

import numpy as np
import onnx
import pytest

from tests.fixtures_training import toy_pairs
from seq2onnx.export.int8_rows import ZERO_POINT
from seq2onnx.export.quantize import quantize_int8
from seq2onnx.runtime.translator import Translator

TEXTS = sorted({s for s, _ in toy_pairs(40, seed=5, min_words=1, max_words=12)}, key=len)


def _session(path):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def requantized(tiny_package, tmp_path_factory):
    """The package's fp32 encoder and (plain-attention) decoder step quantised both ways: {per_row: (enc, dec)}."""
    out = tmp_path_factory.mktemp("int8_rows")
    graphs = {}
    for per_row in (True, False):
        graphs[per_row] = tuple(out / f"{name}.{per_row}.onnx" for name in ("encoder", "decoder_step"))
        for name, dst in zip(("encoder", "decoder_step"), graphs[per_row]):
            quantize_int8(tiny_package / f"{name}.onnx", dst, per_row=per_row)
    return graphs


def _sources(rng, lengths, width, vocab):
    ids, mask = np.zeros((len(lengths), width), np.int64), np.zeros((len(lengths), width), np.int64)
    for row, n in enumerate(lengths):
        ids[row, :n - 1] = rng.integers(4, vocab, n - 1)
        ids[row, n - 1], mask[row, :n] = 2, 1                                # EOS, then padding
    return ids, mask


def _encoder_rows_equal(path, vocab) -> bool:
    """Each source of mixed lengths encoded alone == its rows inside batches padded to longer sources."""
    enc, rng = _session(path), np.random.default_rng(0)
    for _ in range(12):
        lengths = rng.integers(1, 20, int(rng.integers(2, 7)))
        ids, mask = _sources(rng, lengths, int(lengths.max()), vocab)
        batch = enc.run(None, {"input_ids": ids, "attention_mask": mask})
        for row, n in enumerate(lengths):
            alone = enc.run(None, {"input_ids": ids[row:row + 1, :n], "attention_mask": mask[row:row + 1, :n]})
            if not all(np.array_equal(b[row:row + 1, :, :n], a) for b, a in zip(batch, alone)):
                return False
    return True


def _decoder_rows_equal(enc_path, dec_path, config) -> bool:
    """Each row of a step alone == the same row among others (other tokens, other past lengths, before and after it;
    the sentences' cross K/V padded to one source length, as the runtime holds them): every output, to the bit."""
    enc, dec, rng = _session(enc_path), _session(dec_path), np.random.default_rng(1)
    lengths = np.array([3, 11, 7, 1, 14])
    ids, mask = _sources(rng, lengths, int(lengths.max()), config["vocab_size"])
    cross = dict(zip([o.name for o in enc.get_outputs()], enc.run(None, {"input_ids": ids, "attention_mask": mask})))
    heads, head_dim, rows, capacity = config["n_heads"], config["d_model"] // config["n_heads"], len(lengths), 16
    feeds = {"input_ids": rng.integers(4, config["vocab_size"], (rows, 1)), "encoder_attention_mask": mask,
             "past_length": np.array([5, 0, 9, 2, 12], np.int64), **cross}
    for i in range(config["decoder_layers"]):
        for kind in ("key", "value"):
            feeds[f"past_{kind}_{i}"] = rng.standard_normal((rows, heads, capacity, head_dim)).astype(np.float32)
    names = [i.name for i in dec.get_inputs()]
    batch = dec.run(None, {k: v for k, v in feeds.items() if k in names})
    for row in range(rows):
        alone = dec.run(None, {k: v[row:row + 1] for k, v in feeds.items() if k in names})
        if not all(np.array_equal(b[row:row + 1], a) for b, a in zip(batch, alone)):
            return False
    return True


def test_the_int8_graphs_quantise_each_row_with_its_own_scale(tiny_package):
    """No per-tensor DynamicQuantizeLinear is left; every integer GEMM reads its activations as uint8 (round(x / s)
    + 128 in [1, 255], a Relu's output round(x / s) in [0, 255]: with the 7-bit weights, VPMADDUBSW's pair sums stay
    exact on AVX2, export/quantize.py) and a scale of 1 (each row's own is applied after); the manifest says so."""
    manifest = json.loads((tiny_package / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["variants"]["int8"]["quantization"]["per_row_activations"] is True
    for graph in ("encoder.int8.onnx", "decoder_step.int8.onnx"):
        model = onnx.load(str(tiny_package / graph), load_external_data=False)
        inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer if not t.external_data}
        ops = [n.op_type for n in model.graph.node]
        assert "DynamicQuantizeLinear" not in ops and "MatMulInteger" not in ops, graph
        producer = {out: node for node in model.graph.node for out in node.output}
        gemms = [n for n in model.graph.node if n.op_type in ("MatMulIntegerToFloat", "QGemm")]
        assert gemms and ops.count("Relu") > 0, graph
        for node in gemms:
            scale, zero = (node.input[2], node.input[4]) if node.op_type == "MatMulIntegerToFloat" else node.input[1:3]
            quantized = producer[producer[node.input[0]].input[0]].input[0]        # QuantizeLinear <- Div <- x
            relu = quantized in producer and producer[quantized].op_type == "Relu"
            assert inits[scale] == 1.0 and inits[zero].dtype == np.uint8, node.name
            assert inits[zero] == (0 if relu else ZERO_POINT), node.name


def test_an_encoded_row_is_the_same_alone_and_in_any_batch(tiny_package, requantized):
    vocab = json.loads((tiny_package / "manifest.json").read_text(encoding="utf-8"))["config"]["vocab_size"]
    assert _encoder_rows_equal(tiny_package / "encoder.int8.onnx", vocab)
    assert _encoder_rows_equal(requantized[True][0], vocab)
    assert not _encoder_rows_equal(requantized[False][0], vocab), "the per-tensor scale should show in this check"


def test_a_decoder_row_is_the_same_alone_and_in_any_batch(tiny_package, requantized):
    """The package's int8 step (fused attention), its few-rows step (MatMulNBits quantises activations per block of
    each row) and the plain-attention step quantised here; the per-tensor quantisation fails the same check."""
    config = json.loads((tiny_package / "manifest.json").read_text(encoding="utf-8"))["config"]
    encoder = tiny_package / "encoder.int8.onnx"
    few = tiny_package / "decoder_step.int8.few_rows.onnx"
    for step in [tiny_package / "decoder_step.int8.onnx", requantized[True][1]] + ([few] if few.exists() else []):
        assert _decoder_rows_equal(encoder, step, config), step.name
    assert not _decoder_rows_equal(*requantized[False], config), "the per-tensor scale should show in this check"


@pytest.fixture(scope="module")
def int8_translator(tiny_package, tmp_path_factory):
    """The tiny package's int8 variant without its few-rows step: with it, steps of up to max_rows rows run another
    graph (MatMulNBits), whose results differ from the int8 step's, so a row's answer depends on how many rows share
    its step (docs/CONTRACTS.md)."""
    pkg = tmp_path_factory.mktemp("int8_rows_pkg") / "model"
    shutil.copytree(tiny_package, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text(encoding="utf-8"))
    few = manifest["variants"]["int8"].pop("few_rows", None)
    if few:
        manifest["variants"]["int8"].get("external_data", {}).pop(few["decoder_step"], None)
    (pkg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return Translator(pkg, device="cpu", compute_type="int8", intra_threads=1)


def _alone_and_batched(tr, batches, **options):
    alone = {t: tr.translate_batch([t], return_scores=True, **options)[0] for batch in batches for t in batch}
    for batch in batches:
        for text, got in zip(batch, tr.translate_batch(batch, return_scores=True, **options)):
            assert (got.token_ids, got.scores) == (alone[text].token_ids, alone[text].scores), (text, batch)


def test_a_beam_search_translation_is_the_same_alone_and_beside_other_sentences(int8_translator):
    """Sources of 1 to 12 words in shuffled batches of five (padded to their longest): tokens and scores to the bit."""
    texts = list(TEXTS)
    random.Random(0).shuffle(texts)
    _alone_and_batched(int8_translator, [texts[i:i + 5] for i in range(0, len(texts), 5)], beam_size=4,
                       num_hypotheses=2)


def test_a_greedy_translation_is_the_same_alone_and_beside_other_sentences(int8_translator):
    """Greedy, in batches of sources of one token length. Not across lengths: with one row per sentence,
    onnxruntime's MultiHeadAttention (the step's cross-attention, float32) sums a query's weights over the batch's
    padded source length in another order than over its own (found here: one float32 ulp in some rows' outputs),
    as beam search's several rows per sentence do not."""
    def length(text):
        return len(int8_translator.tokenizer.encode(text).ids)
    groups = [list(g) for _, g in groupby(sorted(TEXTS, key=length), key=length)]
    batches = [g[i:i + 6] for g in groups for i in range(0, len(g), 6)]
    assert sum(len(b) > 1 for b in batches) >= 3, "too few sentences of one length to batch"
    _alone_and_batched(int8_translator, batches, beam_size=1)


def test_each_rows_scale_on_a_small_graph(tmp_path):
    """x @ W1 -> Relu -> @ W2 quantised by quantize_int8: a row of zeros gives zeros (its scale has a floor, no 0 / 0),
    rows a thousand times apart are each quantised to their own range (a per-tensor scale would round the small one
    to nothing), and the Relu's output is read with zero point 0 (all 256 levels on [0, max])."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    w1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((32, 8)) * 0.3).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 8])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "fp32.onnx"))
    quantize_int8(tmp_path / "fp32.onnx", tmp_path / "int8.onnx")
    int8 = onnx.load(str(tmp_path / "int8.onnx"))
    zeros = {n.input[0]: onnx.numpy_helper.to_array(next(t for t in int8.graph.initializer if t.name == n.input[2]))
             for n in int8.graph.node if n.op_type == "QuantizeLinear"}
    assert sorted(int(z) for z in zeros.values()) == [0, ZERO_POINT]
    x = rng.standard_normal((3, 16)).astype(np.float32)
    x[0], x[2] = 0.0, x[2] * 1e-3
    session = _session(tmp_path / "int8.onnx")
    y = session.run(None, {"x": x})[0]
    assert np.array_equal(y[0], np.zeros(8, np.float32))
    want = np.maximum(x @ w1, 0) @ w2
    for row in (1, 2):
        assert np.abs(y[row] - want[row]).max() < 0.1 * np.abs(want[row]).max(), row     # per tensor: 1.0 in row 2
        assert np.array_equal(session.run(None, {"x": x[row:row + 1]})[0][0], y[row])
