"""A tiny ONNX graph of Gather nodes, written as protobuf bytes by hand.

On CUDA the KV cache lives on the GPU as onnxruntime OrtValues, and beam search must reorder
it every step (rows = sentence * beam). numpy cannot touch device memory and the runtime may
not depend on torch or onnx, so the reorder is itself a small onnxruntime graph:

    y_i = Gather(x_i, indices, axis=0)      for i in 0..n-1,  x_i [rows, ...] -> y_i [len(indices), ...]

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


def _gather_node(data: str, indices: str, output: str) -> bytes:
    """NodeProto{input=1, output=2, name=3, op_type=4, attribute=5: AttributeProto{name=1, i=3, type=20 (INT)}}"""
    axis = _str_field(1, "axis") + _int_field(3, 0) + _int_field(20, 2)
    return (_str_field(1, data) + _str_field(1, indices) + _str_field(2, output)
            + _str_field(3, f"gather_{output}") + _str_field(4, "Gather") + _bytes_field(5, axis))


def gather_model_bytes(inputs: Iterable[Tuple[np.dtype, int]]) -> bytes:
    """Serialized ModelProto: inputs `indices` int64 [n] and x_i (dtype, rank); outputs y_i.

    Dimension names are symbolic (`rows`, `d1`...), so one session serves every shape.
    """
    specs: List[Tuple[int, int]] = []
    for dtype, rank in inputs:
        if np.dtype(dtype) not in ONNX_ELEM_TYPE:
            raise ValueError(f"gather graph: unsupported dtype {dtype}")
        specs.append((ONNX_ELEM_TYPE[np.dtype(dtype)], rank))
    graph = b"".join(_bytes_field(1, _gather_node(f"x{i}", "indices", f"y{i}")) for i in range(len(specs)))
    graph += _str_field(2, "seq2onnx_gather")
    graph += _bytes_field(11, _value_info("indices", ONNX_ELEM_TYPE[np.dtype(np.int64)], ["n"]))
    for i, (elem, rank) in enumerate(specs):
        dims = ["rows"] + [f"x{i}_d{j}" for j in range(1, rank)]
        graph += _bytes_field(11, _value_info(f"x{i}", elem, dims))
    for i, (elem, rank) in enumerate(specs):
        dims = ["n"] + [f"x{i}_d{j}" for j in range(1, rank)]
        graph += _bytes_field(12, _value_info(f"y{i}", elem, dims))
    opset = _str_field(1, "") + _int_field(2, _OPSET)
    return (_int_field(1, _IR_VERSION) + _str_field(2, "seq2onnx.runtime")
            + _bytes_field(7, graph) + _bytes_field(8, opset))
