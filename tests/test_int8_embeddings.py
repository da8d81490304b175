"""int8 embeddings (export/quantize.py int8_embeddings): a Gather of input_ids over a float32 table becomes int8 rows
with one scale per row, within half a step of each row's float32 values, and no float32 table is left; a table
another node also reads (a tied output projection not yet untied) is left as it is."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from seq2onnx.export.quantize import EMBEDDING_INT8_MAX, EMBEDDING_ROWS, EMBEDDING_SCALES, int8_embeddings

V, D = 50, 16


def _graph(table: np.ndarray, tied: bool = False) -> onnx.ModelProto:
    """input_ids [B, T] -> Gather(table) * 2 [B, T, D]; tied: the table is also a Gemm's weight (logits [B*T, V])."""
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["embedded"], name="embed"),
             helper.make_node("Mul", ["embedded", "two"], ["out"], name="scale")]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, None, D])]
    if tied:
        nodes += [helper.make_node("Reshape", ["out", "flat"], ["rows"]),
                  helper.make_node("Gemm", ["rows", "table"], ["logits"], transB=1)]
        outputs.append(helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, V]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [None, None])],
                              outputs, [numpy_helper.from_array(table, "table"),
                                        numpy_helper.from_array(np.array(2.0, np.float32), "two"),
                                        numpy_helper.from_array(np.array([-1, D], np.int64), "flat")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _run(model: onnx.ModelProto, ids: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(["out"], {"input_ids": ids})[0]


def test_the_table_becomes_int8_rows_within_half_a_step_of_each_row():
    rng = np.random.default_rng(0)
    table = (rng.standard_normal((V, D)) * rng.uniform(0.01, 5.0, (V, 1))).astype(np.float32)   # rows of any size
    table[7] = 0.0                                                       # a zero row stays zeros
    ids = rng.integers(0, V, (3, 5)).astype(np.int64)
    ids[0, 0] = 7
    model = _graph(table)
    before = _run(model, ids)
    assert int8_embeddings(model) == 1
    onnx.checker.check_model(model)
    kinds = {t.name: t.data_type for t in model.graph.initializer}
    assert "table" not in kinds, "the float32 table is still in the graph"
    assert kinds["table" + EMBEDDING_ROWS] == TensorProto.INT8 and kinds["table" + EMBEDDING_SCALES] == TensorProto.FLOAT
    after = _run(model, ids)
    step = np.abs(table).max(axis=1) / EMBEDDING_INT8_MAX               # [V]: each row's quantisation step
    err = np.abs(after - before) / 2                                     # the graph doubles the embedding
    assert np.all(err <= step[ids][..., None] / 2 * (1 + 1e-5) + 1e-7), float((err / step[ids][..., None]).max())
    assert np.all(after[0, 0] == 0.0)
    assert err.max() > 0, "nothing was quantised"


def test_a_table_that_another_node_reads_stays_float32():
    table = np.random.default_rng(1).standard_normal((V, D)).astype(np.float32)
    model = _graph(table, tied=True)
    assert int8_embeddings(model) == 0
    assert [t.name for t in model.graph.initializer if t.data_type == TensorProto.INT8] == []
