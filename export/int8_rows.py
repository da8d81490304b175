"""Per-row activation scales for the int8 graphs: each row's int8 result depends on that row alone.

quantize_dynamic quantises a MatMul's activations at run time with one DynamicQuantizeLinear: one scale and zero
point over the whole tensor, that is over every row of the batch (and the encoder's padding positions), so one
sentence's int8 tokens changed with the sentences beside it (under the server's continuous batching, with other
clients' requests). `per_row_activations` rewrites each DynamicQuantizeLinear of such a graph (the MatMulIntegers'
and the output projection's QGemm, export/quantize.py `int8_embeddings`) as CTranslate2 quantises its int8 inputs,
one symmetric scale per row (per token):

    s    = max(max |x_row|, ROW_SCALE_FLOOR) / 127                    (ReduceMax over the last axis: [..., 1])
    q    = QuantizeLinear(x / s, 1, 128)                              uint8 in [1, 255]: round(x / s) + 128
    y    = MatMulIntegerToFloat(q, W, 1, w_scale, 128, W_zero) * s    (com.microsoft; its bias Add follows, as before)
    QGemm(q, 1, 128, table [V, D], scales, 0, transB=1) * s           (the output projection over the int8 table)

A Relu's output (the FFN's second product) is never negative: s = max x_row / 255 and zero point 0 give it all 256
levels (uint8 in [0, 255]), as quantize_dynamic's asymmetric range did; the symmetric form would use half of them
(on the tiny test model: beam-4 token match with fp32 0.905, per tensor 0.907, symmetric everywhere 0.898).

Standard ops but the two com.microsoft ones, which the int8 graphs held already (ORT fuses quantize_dynamic's
MatMulInteger -> Cast -> Mul into MatMulIntegerToFloat itself; the QGemm is int8_embeddings'); both get a scalar
a_scale of 1, so no onnxruntime version's handling of a per-row a_scale is relied on (older MatMulIntegerToFloat
kernels refuse one; newer ones scale after adding their bias, and ORT's own fusion would hand them ours). The integer part keeps MLAS's u8s8 kernel and the 7-bit exactness argument
of export/quantize.py's docstring: q is uint8 in [0, 255], |w| <= 64, so each VPMADDUBSW pair sum is at most
255 * 64 * 2 < 32767 on AVX2 without VNNI. Everything after the integer sum is elementwise per row, so a row's
result is the same float32 alone or in any batch.
"""
from __future__ import annotations

from typing import Dict, List

import onnx

ROW_INT8_MAX = 127                  # symmetric: round(x / s) in [-127, 127]
ZERO_POINT = 128                    # ... + 128: uint8 in [1, 255], MLAS's u8s8 GEMM
ROW_UINT8_MAX = 255                 # a Relu's output (x >= 0): s = max x_row / 255, zero point 0, uint8 in [0, 255]
ROW_SCALE_FLOOR = 1e-30             # an all-zero row gets a normal float scale (no 0 / 0); its q is all zero points
NAMES = {"one": "int8_rows.one", "zero_point": "int8_rows.zero_point", "floor": "int8_rows.floor",
         "int8_max": "int8_rows.int8_max", "last_axis": "int8_rows.last_axis",
         "uint8_max": "int8_rows.uint8_max", "unsigned_zero_point": "int8_rows.unsigned_zero_point"}


def _consumers(graph: onnx.GraphProto) -> Dict[str, List[onnx.NodeProto]]:
    found: Dict[str, List[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            found.setdefault(name, []).append(node)
    return found


def _only(nodes: List[onnx.NodeProto], op_type: str, what: str) -> onnx.NodeProto:
    if len(nodes) != 1 or nodes[0].op_type != op_type:
        raise ValueError(f"{what}: expected one {op_type} reading it, found {[n.op_type for n in nodes]}; "
                         "onnxruntime's quantize_dynamic wrote another pattern")
    return nodes[0]


def per_row_activations(model: onnx.ModelProto) -> int:
    """Each DynamicQuantizeLinear of `model` (quantize_dynamic's output, after export/quantize.py int8_embeddings)
    -> a per-row quantisation of its input, read by the same integer GEMMs (module docstring). In place; -> how many.
    Raises ValueError on a pattern it does not know (rather than leave a batch-dependent graph)."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    quantizers = [n for n in graph.node if n.op_type == "DynamicQuantizeLinear"]
    if not quantizers:
        return 0
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    graph.initializer.extend([
        numpy_helper.from_array(np.array(1.0, np.float32), NAMES["one"]),
        numpy_helper.from_array(np.array(ZERO_POINT, np.uint8), NAMES["zero_point"]),
        numpy_helper.from_array(np.array(ROW_SCALE_FLOOR, np.float32), NAMES["floor"]),
        numpy_helper.from_array(np.array(ROW_INT8_MAX, np.float32), NAMES["int8_max"]),
        numpy_helper.from_array(np.array(ROW_UINT8_MAX, np.float32), NAMES["uint8_max"]),
        numpy_helper.from_array(np.array(0, np.uint8), NAMES["unsigned_zero_point"]),
    ] + ([numpy_helper.from_array(np.array([-1], np.int64), NAMES["last_axis"])] if opset >= 18 else []))
    initializers = {t.name for t in graph.initializer}
    producers = {out: node.op_type for node in graph.node for out in node.output}
    for quantizer in quantizers:
        consumers = _consumers(graph)
        x, (x_q, x_scale, x_zero) = quantizer.input[0], quantizer.output
        p = x_q                                                       # the new tensors' prefix
        s = f"{p}.row_scale"
        unsigned = producers.get(x) == "Relu"                         # x >= 0: all 8 bits on [0, max]
        zero = NAMES["unsigned_zero_point" if unsigned else "zero_point"]
        magnitude = x if unsigned else f"{p}.abs"
        reduce = (helper.make_node("ReduceMax", [magnitude, NAMES["last_axis"]], [f"{p}.row_max"], keepdims=1,
                                   name=f"{p}.row_max")
                  if opset >= 18 else
                  helper.make_node("ReduceMax", [magnitude], [f"{p}.row_max"], axes=[-1], keepdims=1,
                                   name=f"{p}.row_max"))
        made = ([] if unsigned else [helper.make_node("Abs", [x], [magnitude], name=f"{p}.abs")]) + [
            reduce,
            helper.make_node("Max", [f"{p}.row_max", NAMES["floor"]], [f"{p}.row_max_floor"], name=f"{p}.floor"),
            helper.make_node("Div", [f"{p}.row_max_floor", NAMES["uint8_max" if unsigned else "int8_max"]], [s],
                             name=f"{p}.row_scale"),
            helper.make_node("Div", [x, s], [f"{p}.rows"], name=f"{p}.divide"),
            helper.make_node("QuantizeLinear", [f"{p}.rows", NAMES["one"], zero], [x_q], name=f"{p}.quantize"),
        ]
        position = list(graph.node).index(quantizer)
        graph.node.remove(quantizer)
        for offset, node in enumerate(made):
            graph.node.insert(position + offset, node)
        for gemm in consumers.get(x_q, []):
            if list(gemm.input).index(x_q) != 0:
                raise ValueError(f"{gemm.name}: reads {x_q} as its weight; quantize_dynamic wrote another pattern")
            if gemm.op_type == "QGemm":                               # int8_embeddings' output projection
                if gemm.input[1] != x_scale or gemm.input[2] != x_zero:
                    raise ValueError(f"{gemm.name}: a QGemm of another quantisation's scale or zero point")
                gemm.input[1], gemm.input[2] = NAMES["one"], zero
                last = gemm
            elif gemm.op_type == "MatMulInteger":
                # MatMulInteger(x_q, W, x_zero, W_zero) -> Cast -> Mul(., Mul(x_scale, w_scale)): quantize_dynamic's
                cast = _only(consumers.get(gemm.output[0], []), "Cast", gemm.output[0])
                scale = _only(consumers.get(cast.output[0], []), "Mul", cast.output[0])
                product = next((n for n in graph.node if scale.input[1 - list(scale.input).index(cast.output[0])]
                                in n.output), None)
                if product is None or product.op_type != "Mul" or x_scale not in product.input:
                    raise ValueError(f"{scale.name}: not a Mul by {x_scale} times the weight's scale")
                w_scale = product.input[1 - list(product.input).index(x_scale)]
                if w_scale not in initializers:
                    raise ValueError(f"{product.name}: the weight's scale {w_scale} is no initializer")
                b_zero = gemm.input[3] if len(gemm.input) > 3 else ""
                fused = helper.make_node("MatMulIntegerToFloat",
                                         [x_q, gemm.input[1], NAMES["one"], w_scale, zero, b_zero],
                                         [scale.output[0]], domain="com.microsoft", name=f"{scale.output[0]}.to_float")
                graph.node.insert(list(graph.node).index(gemm), fused)      # where its inputs exist
                for old in (gemm, cast, scale) + ((product,) if len(consumers[product.output[0]]) == 1 else ()):
                    graph.node.remove(old)
                last = next(n for n in graph.node if n.name == fused.name)  # the graph's copy
            else:
                raise ValueError(f"{gemm.name}: a {gemm.op_type} reads {x_q}; quantize_dynamic wrote another pattern")
            out = last.output[0]
            last.output[0] = f"{out}.unscaled"
            graph.node.insert(list(graph.node).index(last) + 1,
                              helper.make_node("Mul", [last.output[0], s], [out], name=f"{out}.row_scale"))
        left = [n.op_type for n in _consumers(graph).get(x_scale, []) + _consumers(graph).get(x_zero, [])]
        if left:
            raise ValueError(f"{quantizer.name or x_q}: its scale or zero point is still read by {left}")
    return len(quantizers)
