"""Which tensors of an ONNX model (its bytes) keep their data in external files? Answered without the onnx package.

onnxruntime reads external data from files the model names, relative to the model's folder (for a model
given as bytes: relative to the working directory). The runtime never lets it: a graph of a package with
external data gets its weights from the data file the manifest lists for it, read and hashed by the runtime
(runtime/package/external_data.py), and any other external tensor is refused (docs/SECURITY.md). A model is a protobuf
message (onnx.proto): this walks the messages that can hold a tensor, skipping every other field by its
length, and reads each TensorProto's name, dims, data_type, data_location and external_data. Linear in the
size of the model; no recursion.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

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
_DIMS, _DATA_TYPE, _NAME = 1, 2, 8                        # TensorProto.dims (int64, packed or not), .data_type, .name
_GRAPH_FIELD, _INITIALIZER = 7, 5                         # ModelProto.graph, GraphProto.initializer


@dataclass
class ExternalTensor:
    """A TensorProto whose data lies in an external file."""
    name: str
    data_type: int                         # onnx.proto TensorProto.DataType
    dims: List[int]
    entries: List[Tuple[str, str]]         # external_data: (key, value), in order (location, offset, length, ...)
    initializer: bool                      # one of the main graph's initializers (not a subgraph's, an attribute's...)


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
    return bool(external_tensors(model))


def external_tensors(model: bytes) -> List[ExternalTensor]:
    """Every tensor of `model` (a serialized onnx ModelProto) whose data is external (data_location EXTERNAL or
    external_data entries), in the order they appear; ValueError when the bytes are not a well-formed protobuf
    message (onnx.proto uses no groups)."""
    found: List[ExternalTensor] = []
    todo = [(_MODEL, 0, len(model), False)]             # (message, start, end, in the main graph) still to read
    while todo:
        message, i, end, main = todo.pop()
        holds = _HOLDS[message]
        tensor = ExternalTensor("", 0, [], [], main) if message == _TENSOR else None
        external = False
        while i < end:
            key, i = _varint(model, i)
            field, wire = key >> 3, key & 7
            if field == 0:
                raise ValueError(f"field number 0 at byte {i}")
            if wire == 0:                                # varint
                value, i = _varint(model, i)
                if tensor is not None:
                    if field == _DATA_LOCATION:
                        external = value == _EXTERNAL
                    elif field == _DATA_TYPE:
                        tensor.data_type = value
                    elif field == _DIMS:
                        tensor.dims.append(_signed(value))
            elif wire == 2:                              # length-delimited: bytes, string or a message
                length, i = _varint(model, i)
                if i + length > end:
                    raise ValueError(f"a field runs past the end of its message at byte {end}")
                if tensor is not None:
                    if field == _EXTERNAL_DATA:
                        tensor.entries.append(_string_entry(model, i, i + length))
                    elif field == _NAME:
                        tensor.name = _text(model[i:i + length])
                    elif field == _DIMS:                 # packed
                        j = i
                        while j < i + length:
                            value, j = _varint(model, j)
                            tensor.dims.append(_signed(value))
                if field in holds:
                    todo.append((holds[field], i, i + length,
                                 (message == _MODEL and field == _GRAPH_FIELD)
                                 or (main and message == _GRAPH and field == _INITIALIZER)))
                i += length
            elif wire in (1, 5):                         # fixed 64 / 32 bits
                i += 8 if wire == 1 else 4
            else:
                raise ValueError(f"wire type {wire} at byte {i}")
            if i > end:
                raise ValueError(f"a field runs past the end of its message at byte {end}")
        if tensor is not None and (external or tensor.entries):
            found.append(tensor)
    return found


def _signed(value: int) -> int:
    """An int64 field's varint as the signed value (two's complement over 64 bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _text(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"a string field that is not UTF-8 ({e})") from None


def _string_entry(model: bytes, i: int, end: int) -> Tuple[str, str]:
    """A StringStringEntryProto (key = 1, value = 2, both strings; the last of each wins, as in protobuf)."""
    key = value = ""
    while i < end:
        tag, i = _varint(model, i)
        if tag & 7 != 2:
            raise ValueError(f"an external_data entry with a field of wire type {tag & 7} at byte {i}")
        length, i = _varint(model, i)
        if i + length > end:
            raise ValueError(f"an external_data entry runs past its end at byte {end}")
        if tag >> 3 == 1:
            key = _text(model[i:i + length])
        elif tag >> 3 == 2:
            value = _text(model[i:i + length])
        i += length
    return key, value
