"""The int8 table (export/quantize.py int8_embeddings): a float32 table [V, D] that Gathers of input_ids and output
projections read becomes one int8 copy [V, D] (7-bit rows, a scale per row), read by all of them: the embedding is
within half a step of each row's float32 values; the projection (DynamicQuantizeLinear, then onnxruntime's QGemm
with B transposed) equals its integer arithmetic done in numpy; no float32 table is left; a table another kind of
node also reads is left as it is."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from seq2onnx.export.quantize import EMBEDDING_ROWS, EMBEDDING_SCALES, TABLE_INT8_MAX, int8_embeddings, int8_table

V, D = 50, 16


def _graph(table: np.ndarray, reader: str = "", bias: bool = False) -> onnx.ModelProto:
    """input_ids [B, T] -> Gather(table) * 2 [B, T, D]; reader "gemm": the table is also the weight of an output
    projection (logits [B*T, V], + a bias with `bias`); "matmul": a MatMul reads it too (not a projection)."""
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["embedded"], name="embed"),
             helper.make_node("Mul", ["embedded", "two"], ["out"], name="scale")]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, None, D])]
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array([-1, D], np.int64), "flat")]
    if reader:
        nodes.append(helper.make_node("Reshape", ["out", "flat"], ["rows"]))
        if reader == "gemm":
            nodes.append(helper.make_node("Gemm", ["rows", "table"] + (["bias"] if bias else []), ["logits"],
                                          transB=1))
        else:
            nodes += [helper.make_node("Transpose", ["table"], ["table_t"], perm=[1, 0]),
                      helper.make_node("MatMul", ["rows", "table_t"], ["logits"])]
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, V]))
        inits.append(numpy_helper.from_array(np.linspace(-1, 1, V, dtype=np.float32), "bias"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [None, None])],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _table(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    table = (rng.standard_normal((V, D)) * rng.uniform(0.01, 5.0, (V, 1))).astype(np.float32)   # rows of any size
    table[7] = 0.0                                                       # a zero row stays zeros
    return table


def test_the_table_becomes_int8_within_half_a_step_of_each_row():
    table = _table(0)
    ids = np.random.default_rng(0).integers(0, V, (3, 5)).astype(np.int64)
    ids[0, 0] = 7
    model = _graph(table)
    before = _session(model).run(["out"], {"input_ids": ids})[0]
    assert int8_embeddings(model) == 1
    onnx.checker.check_model(model)
    kinds = {t.name: (t.data_type, list(t.dims)) for t in model.graph.initializer}
    assert "table" not in kinds, "the float32 table is still in the graph"
    assert kinds["table" + EMBEDDING_ROWS] == (TensorProto.INT8, [V, D])
    assert kinds["table" + EMBEDDING_SCALES] == (TensorProto.FLOAT, [V])
    after = _session(model).run(["out"], {"input_ids": ids})[0]
    step = np.abs(table).max(axis=1) / TABLE_INT8_MAX                   # [V]: each row's quantisation step
    err = np.abs(after - before) / 2                                     # the graph doubles the embedding
    assert np.all(err <= step[ids][..., None] / 2 * (1 + 1e-5) + 1e-7), float((err / step[ids][..., None]).max())
    assert np.all(after[0, 0] == 0.0)
    assert err.max() > 0, "nothing was quantised"
    rows, _ = int8_table(table)
    assert np.abs(rows.astype(np.int16)).max() == TABLE_INT8_MAX         # 7-bit: the GEMM's sums stay exact


@pytest.mark.parametrize("bias", [False, True])
def test_a_tied_projection_reads_the_same_int8_table(bias):
    table = _table(1)
    ids = np.random.default_rng(1).integers(0, V, (2, 3)).astype(np.int64)
    model = _graph(table, "gemm", bias)
    assert int8_embeddings(model) == 1
    onnx.checker.check_model(model)
    int8 = [t for t in model.graph.initializer if t.data_type == TensorProto.INT8 and t.dims]
    assert [t.name for t in int8 if len(t.dims) == 2] == ["table" + EMBEDDING_ROWS], "one int8 table, not two"
    assert not [t for t in model.graph.initializer if t.data_type == TensorProto.FLOAT and len(t.dims) == 2]
    assert [n.op_type for n in model.graph.node if n.input and "table" + EMBEDDING_ROWS in n.input] == ["Gather",
                                                                                                       "QGemm"]
    # the projection's input as the graph quantised it (onnxruntime's DynamicQuantizeLinear, whichever kernel this
    # CPU runs), so that numpy redoes only the integer product and its scaling, not the activation rounding
    quantised = ["logits.x_int8", "logits.x_scale", "logits.x_zero"]
    model.graph.output.extend(helper.make_tensor_value_info(name, kind, None) for name, kind in
                              zip(quantised, [TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8]))
    out, logits, x_q, x_scale, x_zero = _session(model).run(["out", "logits"] + quantised, {"input_ids": ids})
    rows, scales = int8_table(table)
    acc = (x_q.astype(np.int32) - np.int32(x_zero)) @ rows.T.astype(np.int32)          # exact: 7-bit weights
    want = acc.astype(np.float32) * (x_scale * scales)
    want += np.linspace(-1, 1, V, dtype=np.float32) if bias else 0
    np.testing.assert_allclose(logits, want, rtol=1e-5, atol=1e-5)
    reference = out.reshape(-1, D) @ table.T + (np.linspace(-1, 1, V, dtype=np.float32) if bias else 0)
    assert np.abs(logits - reference).max() < 0.05 * np.abs(reference).max()          # and near the float32 ones


def test_a_table_that_another_kind_of_node_reads_stays_float32():
    model = _graph(_table(2), "matmul")
    assert int8_embeddings(model) == 0
    assert [t.name for t in model.graph.initializer if t.data_type == TensorProto.INT8] == []


def test_the_exported_int8_step_reads_one_table_and_the_encoder_the_same_bytes(tiny_package):
    """The tiny package's int8 graphs: the step's embedding and output projection read one int8 table, and the
    encoder holds the same bytes (so that share_weights stores it once where it is large enough)."""
    tables = {}
    for graph in ("encoder.int8.onnx", "decoder_step.int8.onnx"):
        model = onnx.load(str(tiny_package / graph))
        inits = {t.name: t for t in model.graph.initializer}
        gathered = {n.input[0] for n in model.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids"
                    and n.input[0].endswith(EMBEDDING_ROWS)}
        assert len(gathered) == 1, (graph, gathered)
        table = gathered.pop()
        tables[graph] = numpy_helper.to_array(inits[table])
        assert not [t for t in inits.values() if t.data_type == TensorProto.FLOAT and len(t.dims) == 2
                    and tables[graph].shape == tuple(t.dims)], "a float32 table is left"
        if graph.startswith("decoder"):
            gemms = [n for n in model.graph.node if n.op_type == "QGemm" and n.input[3] == table]
            assert len(gemms) == 1, "the output projection reads another table"
    assert np.array_equal(*tables.values())
