"""Tiny ONNX graphs of Gather or Pad nodes, written as protobuf bytes by hand.

On CUDA the KV cache lives on the GPU as onnxruntime OrtValues, and beam search must reorder
it every step (rows = sentence * beam); a format-2 cache that is full moves into one of larger
capacity. numpy cannot touch device memory and the runtime may not depend on torch or onnx, so
both are themselves small onnxruntime graphs:

    y_i = Gather(x_i, indices, axis=0)      for i in 0..n-1,  x_i [rows, ...] -> y_i [len(indices), ...]
    y_i = Pad(x_i, pads)                    zeros after (or before) each axis, as pads [2 * rank] says

and beam search's candidates are picked where the log-probs are, so only [rows, k] of them come back:

    values, indices = TopK(log_probs + bias, k)     log_probs [rows, V], bias [1, V] (0 or -inf) -> [rows, k]

The graph is built here from the protobuf wire format (varints and length-delimited fields) of
onnx.proto's ModelProto, so no onnx package is needed. Field numbers are those of onnx.proto.
"""
from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple

import numpy as np

# onnx.TensorProto.DataType values of the dtypes the runtime moves around
ONNX_ELEM_TYPE = {np.dtype(np.float32): 1, np.dtype(np.int64): 7, np.dtype(np.float16): 10}

_VARINT, _LEN = 0, 2
_IR_VERSION = 8          # onnxruntime >= 1.14 reads it
_OPSET = 13              # Gather-13


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _int_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def _str_field(number: int, text: str) -> bytes:
    return _bytes_field(number, text.encode("utf-8"))


def _value_info(name: str, elem_type: int, dims: Sequence[str]) -> bytes:
    """ValueInfoProto{name=1, type=2: TypeProto{tensor_type=1: {elem_type=1, shape=2: {dim=1: {dim_param=2}}}}}"""
    shape = b"".join(_bytes_field(1, _str_field(2, d)) for d in dims)
    tensor_type = _int_field(1, elem_type) + _bytes_field(2, shape)
    return _str_field(1, name) + _bytes_field(2, _bytes_field(1, tensor_type))


def _node(op_type: str, data: str, second: str, output: str, attributes: bytes = b"", *more_outputs: str) -> bytes:
    """NodeProto{input=1, output=2, name=3, op_type=4, attribute=5}"""
    return (_str_field(1, data) + _str_field(1, second) + b"".join(_str_field(2, o) for o in (output, *more_outputs))
            + _str_field(3, f"{op_type.lower()}_{output}") + _str_field(4, op_type) + attributes)


def _gather_node(data: str, indices: str, output: str) -> bytes:
    """Gather along axis 0; AttributeProto{name=1, i=3, type=20 (INT)}"""
    axis = _str_field(1, "axis") + _int_field(3, 0) + _int_field(20, 2)
    return _node("Gather", data, indices, output, _bytes_field(5, axis))


def _pad_node(data: str, pads: str, output: str) -> bytes:
    """Pad-13, mode constant (its default), value 0"""
    return _node("Pad", data, pads, output)


def _specs(inputs: Iterable[Tuple[np.dtype, int]]) -> List[Tuple[int, int]]:
    specs: List[Tuple[int, int]] = []
    for dtype, rank in inputs:
        if np.dtype(dtype) not in ONNX_ELEM_TYPE:
            raise ValueError(f"gather graph: unsupported dtype {dtype}")
        specs.append((ONNX_ELEM_TYPE[np.dtype(dtype)], rank))
    return specs


def gather_model_bytes(inputs: Iterable[Tuple[np.dtype, int]]) -> bytes:
    """Serialized ModelProto: inputs `indices` int64 [n] and x_i (dtype, rank); outputs y_i = x_i[indices].

    Dimension names are symbolic (`rows`, `d1`...), so one session serves every shape.
    """
    specs = _specs(inputs)
    in_dims = [["rows"] + [f"x{i}_d{j}" for j in range(1, rank)] for i, (_, rank) in enumerate(specs)]
    out_dims = [["n"] + dims[1:] for dims in in_dims]
    return _model(_gather_node, "indices", ["n"], specs, in_dims, out_dims)


def pad_model_bytes(inputs: Iterable[Tuple[np.dtype, int]]) -> bytes:
    """Serialized ModelProto: inputs `pads` int64 [2 * rank] (ONNX Pad's: every axis's begins, then its ends)
    and x_i (dtype, rank), all of one rank; outputs y_i = x_i padded with zeros."""
    specs = _specs(inputs)
    in_dims = [[f"x{i}_d{j}" for j in range(rank)] for i, (_, rank) in enumerate(specs)]
    out_dims = [[f"y{i}_d{j}" for j in range(rank)] for i, (_, rank) in enumerate(specs)]
    return _model(_pad_node, "pads", ["p"], specs, in_dims, out_dims)


def top_k_model_bytes() -> bytes:
    """Serialized ModelProto: inputs `log_probs` float32 [rows, V], `bias` float32 [1, V] and `k` int64 [1]; outputs
    `values` float32 [rows, k] and `indices` int64 [rows, k] of log_probs + bias, each row best first (ONNX TopK:
    equal values in the order of their indices)."""
    f32, i64 = ONNX_ELEM_TYPE[np.dtype(np.float32)], ONNX_ELEM_TYPE[np.dtype(np.int64)]
    graph = _bytes_field(1, _node("Add", "log_probs", "bias", "scores"))
    graph += _bytes_field(1, _node("TopK", "scores", "k", "values", b"", "indices"))   # axis -1, largest, sorted
    graph += _str_field(2, "seq2onnx_top_k")
    graph += _bytes_field(11, _value_info("log_probs", f32, ["rows", "vocab"]))
    graph += _bytes_field(11, _value_info("bias", f32, ["one", "vocab"]))
    graph += _bytes_field(11, _value_info("k", i64, ["one_k"]))
    graph += _bytes_field(12, _value_info("values", f32, ["rows", "k"]))
    graph += _bytes_field(12, _value_info("indices", i64, ["rows", "k"]))
    return _model_proto(graph)


def _model(make_node, second: str, second_dims: List[str], specs: List[Tuple[int, int]],
           in_dims: List[List[str]], out_dims: List[List[str]]) -> bytes:
    """y_i = make_node(x_i, second) for each (elem type, rank) in specs; `second` an int64 input."""
    graph = b"".join(_bytes_field(1, make_node(f"x{i}", second, f"y{i}")) for i in range(len(specs)))
    graph += _str_field(2, "seq2onnx_gather")
    graph += _bytes_field(11, _value_info(second, ONNX_ELEM_TYPE[np.dtype(np.int64)], second_dims))
    for i, (elem, _) in enumerate(specs):
        graph += _bytes_field(11, _value_info(f"x{i}", elem, in_dims[i]))
    for i, (elem, _) in enumerate(specs):
        graph += _bytes_field(12, _value_info(f"y{i}", elem, out_dims[i]))
    return _model_proto(graph)


def _model_proto(graph: bytes) -> bytes:
    opset = _str_field(1, "") + _int_field(2, _OPSET)
    return (_int_field(1, _IR_VERSION) + _str_field(2, "seq2onnx.runtime")
            + _bytes_field(7, graph) + _bytes_field(8, opset))
