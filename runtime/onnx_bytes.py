"""Does an ONNX model (its bytes) keep tensor data in external files? Answered without the onnx package.

onnxruntime reads external data from files the model names, relative to the model's folder (for a model
given as bytes: relative to the working directory), and no checksum of the package covers them, so the
runtime refuses such graphs (docs/SECURITY.md). A model is a protobuf message (onnx.proto): this walks
the messages that can hold a tensor, skipping every other field by its length, and looks at each
TensorProto's data_location and external_data. Linear in the size of the model; no recursion.
"""
from __future__ import annotations

from typing import Dict, Tuple

# onnx.proto field numbers: message -> {field: the message it holds}, for the fields that lead to tensors
_MODEL, _TRAINING_INFO, _GRAPH, _FUNCTION, _NODE, _ATTRIBUTE, _SPARSE_TENSOR, _TENSOR = range(8)
_HOLDS: Dict[int, Dict[int, int]] = {
    _MODEL: {7: _GRAPH, 20: _TRAINING_INFO, 25: _FUNCTION},                  # graph, training_info, functions
    _TRAINING_INFO: {1: _GRAPH, 2: _GRAPH},                                 # initialization, algorithm
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE_TENSOR},                     # node, initializer, sparse_initializer
    _FUNCTION: {7: _NODE, 11: _ATTRIBUTE},                                  # node, attribute_proto
    _NODE: {5: _ATTRIBUTE},                                                 # attribute
    _ATTRIBUTE: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH,            # t, g, tensors, graphs,
                 22: _SPARSE_TENSOR, 23: _SPARSE_TENSOR},                   # sparse_tensor, sparse_tensors
    _SPARSE_TENSOR: {1: _TENSOR, 2: _TENSOR},                               # values, indices
    _TENSOR: {},
}
_EXTERNAL_DATA, _DATA_LOCATION, _EXTERNAL = 13, 14, 1     # TensorProto.external_data, .data_location, EXTERNAL


def _varint(data: bytes, i: int) -> Tuple[int, int]:
    """(value, index after it) of the varint at data[i]."""
    value = shift = 0
    while True:
        if i >= len(data) or shift > 63:
            raise ValueError(f"a truncated or overlong varint at byte {i}")
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def has_external_data(model: bytes) -> bool:
    """True when a tensor of `model` (a serialized onnx ModelProto) has its data in an external file;
    ValueError when the bytes are not a well-formed protobuf message (onnx.proto uses no groups)."""
    todo = [(_MODEL, 0, len(model))]                     # (message, start, end) still to read
    while todo:
        message, i, end = todo.pop()
        holds = _HOLDS[message]
        while i < end:
            key, i = _varint(model, i)
            field, wire = key >> 3, key & 7
            if field == 0:
                raise ValueError(f"field number 0 at byte {i}")
            if wire == 0:                                # varint
                value, i = _varint(model, i)
                if message == _TENSOR and field == _DATA_LOCATION and value == _EXTERNAL:
                    return True
            elif wire == 2:                              # length-delimited: bytes, string or a message
                length, i = _varint(model, i)
                if message == _TENSOR and field == _EXTERNAL_DATA:
                    return True
                if field in holds:
                    todo.append((holds[field], i, i + length))
                i += length
            elif wire in (1, 5):                         # fixed 64 / 32 bits
                i += 8 if wire == 1 else 4
            else:
                raise ValueError(f"wire type {wire} at byte {i}")
            if i > end:
                raise ValueError(f"a field runs past the end of its message at byte {end}")
    return False
