"""Tiny ONNX graphs of Gather or Pad nodes, written as protobuf bytes by hand.

On CUDA the KV cache lives on the GPU as onnxruntime OrtValues, and beam search must reorder
it every step (rows = sentence * beam); a format-2 cache that is full moves into one of larger
capacity. numpy cannot touch device memory and the runtime may not depend on torch or onnx, so
both are themselves small onnxruntime graphs:

    y_i = Gather(x_i, indices, axis=0)      for i in 0..n-1,  x_i [rows, ...] -> y_i [len(indices), ...]
    y_i = Pad(x_i, pads)                    zeros after (or before) each axis, as pads [2 * rank] says

and beam search's candidates are picked where the log-probs are, so only [rows, k] of them come back:

    values, indices = TopK(log_probs + bias, k)     log_probs [rows, V], bias [1, V] (0 or -inf) -> [rows, k]

the positions a step writes at advance there too (add_one_model_bytes: y = x + 1 on a past_length),
and the search head (search_head_model_bytes) runs a step's filters and its greedy or beam selection there, so
that [rows] ids or [sentences, 2K] candidates come back instead of [rows, V] log-probs.

The graph is built here from the protobuf wire format (varints and length-delimited fields) of
onnx.proto's ModelProto, so no onnx package is needed. Field numbers are those of onnx.proto.
"""
from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from numpy.typing import DTypeLike

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


def _specs(inputs: Iterable[Tuple[DTypeLike, int]]) -> List[Tuple[int, int]]:
    specs: List[Tuple[int, int]] = []
    for dtype, rank in inputs:
        if np.dtype(dtype) not in ONNX_ELEM_TYPE:
            raise ValueError(f"gather graph: unsupported dtype {dtype}")
        specs.append((ONNX_ELEM_TYPE[np.dtype(dtype)], rank))
    return specs


def gather_model_bytes(inputs: Iterable[Tuple[DTypeLike, int]]) -> bytes:
    """Serialized ModelProto: inputs `indices` int64 [n] and x_i (dtype, rank); outputs y_i = x_i[indices].

    Dimension names are symbolic (`rows`, `d1`...), so one session serves every shape.
    """
    specs = _specs(inputs)
    in_dims = [["rows"] + [f"x{i}_d{j}" for j in range(1, rank)] for i, (_, rank) in enumerate(specs)]
    out_dims = [["n"] + dims[1:] for dims in in_dims]
    return _model(_gather_node, "indices", ["n"], specs, in_dims, out_dims)


def pad_model_bytes(inputs: Iterable[Tuple[DTypeLike, int]]) -> bytes:
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


def add_one_model_bytes(rank: int) -> bytes:
    """Serialized ModelProto: input `x` int64 of `rank` (a decoder step's past_length: [rows] for contract 3, 0-d
    for contract 2); output `y` = x + 1, so that the positions advance where they are."""
    i64 = ONNX_ELEM_TYPE[np.dtype(np.int64)]
    dims = [f"d{j}" for j in range(rank)]
    graph = _bytes_field(1, _op("Add", ["x", "one"], ["y"])) + _str_field(2, "seq2onnx_add_one")
    graph += _bytes_field(5, _scalar("one", np.int64(1)))
    graph += _bytes_field(11, _value_info("x", i64, dims)) + _bytes_field(12, _value_info("y", i64, dims))
    return _model_proto(graph)


def _op(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attributes: Union[int, Sequence[int]]) -> bytes:
    """A NodeProto of any inputs and outputs (input=1, output=2, name=3, op_type=4); attributes: an int (INT),
    a list of ints (INTS), as AttributeProto{name=1, i=3, ints=8, type=20}."""
    attrs = b""
    for name, value in attributes.items():
        if isinstance(value, int):
            attrs += _bytes_field(5, _str_field(1, name) + _int_field(3, value) + _int_field(20, 2))
        else:
            attrs += _bytes_field(5, _str_field(1, name) + b"".join(_int_field(8, int(x)) for x in value)
                                  + _int_field(20, 7))
    return (b"".join(_str_field(1, i) for i in inputs) + b"".join(_str_field(2, o) for o in outputs)
            + _str_field(3, f"{op_type.lower()}_{outputs[0]}") + _str_field(4, op_type) + attrs)


def _scalar(name: str, value: Union[np.ndarray, np.generic]) -> bytes:
    """An initializer: TensorProto{data_type=2, name=8, raw_data=9} of a 0-d float32 or int64 value."""
    value = np.asarray(value)
    return _int_field(2, ONNX_ELEM_TYPE[value.dtype]) + _str_field(8, name) + _bytes_field(9, value.tobytes())


def search_head_model_bytes(beam: bool, forcing: bool, renormalize: bool, positions: Optional[int] = None) -> bytes:
    """Serialized ModelProto of a step's search (decoding.py SearchHead), run on the step's log-probs where they are:

        inputs   log_probs float32 [rows, V], bias float32 [1, V] (0, or -inf for an id no row may take),
                 check_id int64 [1]; forcing: forced int64 [rows, 1] (the id the row must take, -1: none);
                 beam: cum float32 [rows, 1] (each row's beam score), shape int64 [2] ([sentences or -1, K x V]),
                 k int64 [1];
                 positions (a rank): past_length int64 of that rank (the step's, as add_one_model_bytes takes it)
        scores   log_probs + bias; forcing: a forced row's scores all -inf but 0 at its id; renormalize: each row
                 whose max is finite, (scores - max) - log(sum(exp(scores - max)))
        outputs  check float32 [rows, 1]: log_probs[:, check_id] (NaN for a row that holds one: the step's is a
                 log-softmax); greedy: ids int64 [rows] (ArgMax: the lowest id of the best) and values float32
                 [rows] (their scores); beam: values float32 and indices int64 [sentences, k] = TopK of
                 (scores + cum) reshaped to `shape`: the flat ids beam x V + id, best first, equal values in the
                 order of their ids; positions: next_length = past_length + 1 (last), so that the step's
                 positions advance in the run that follows it anyway."""
    f32, i64 = ONNX_ELEM_TYPE[np.dtype(np.float32)], ONNX_ELEM_TYPE[np.dtype(np.int64)]
    nodes = [_op("Gather", ["log_probs", "check_id"], ["check"], axis=1),
             _op("Add", ["log_probs", "bias"], ["biased"])]
    inits = []
    inputs = [_value_info("log_probs", f32, ["rows", "vocab"]), _value_info("bias", f32, ["one", "vocab"]),
              _value_info("check_id", i64, ["one_check"])]
    scores = "biased"
    if forcing:
        inputs.append(_value_info("forced", i64, ["rows", "one_forced"]))
        inits += [_scalar("zero_f", np.float32(0)), _scalar("minus_inf", np.float32(-np.inf)),
                  _scalar("zero_i", np.int64(0)), _scalar("one_i", np.int64(1))]
        nodes += [_op("Shape", ["log_probs"], ["lp_shape"]),
                  _op("Gather", ["lp_shape", "one_i"], ["vocab_size"], axis=0),
                  _op("Range", ["zero_i", "vocab_size", "one_i"], ["ids_all"]),
                  _op("Equal", ["ids_all", "forced"], ["hit"]),                               # [rows, V]
                  _op("Where", ["hit", "zero_f", "minus_inf"], ["only_forced"]),
                  _op("Less", ["forced", "zero_i"], ["free"]),                                 # [rows, 1]
                  _op("Where", ["free", scores, "only_forced"], ["forced_scores"])]
        scores = "forced_scores"
    if renormalize:
        inits.append(_int_field(1, 1) + _int_field(2, i64) + _str_field(8, "axis_1")
                     + _bytes_field(9, np.array([1], np.int64).tobytes()))
        nodes += [_op("ReduceMax", [scores], ["best"], axes=[1], keepdims=1),
                  _op("Sub", [scores, "best"], ["shifted"]),
                  _op("Exp", ["shifted"], ["exp"]),
                  _op("ReduceSum", ["exp", "axis_1"], ["total"], keepdims=1),
                  _op("Log", ["total"], ["log_total"]),
                  _op("Sub", ["shifted", "log_total"], ["normalized"]),
                  _op("IsInf", ["best"], ["best_inf"]),                     # a row all -inf stays as it is
                  _op("Where", ["best_inf", scores, "normalized"], ["renormalized"])]
        scores = "renormalized"
    if beam:
        inputs += [_value_info("cum", f32, ["rows", "one_cum"]), _value_info("shape", i64, ["two"]),
                   _value_info("k", i64, ["one_k"])]
        nodes += [_op("Add", [scores, "cum"], ["cand"]),
                  _op("Reshape", ["cand", "shape"], ["flat"]),
                  _op("TopK", ["flat", "k"], ["values", "indices"], axis=1)]
        outputs = [_value_info("values", f32, ["sentences", "k_out"]),
                   _value_info("indices", i64, ["sentences", "k_out"])]
    else:
        nodes += [_op("ArgMax", [scores], ["ids"], axis=1, keepdims=0),
                  _op("ReduceMax", [scores], ["values"], axes=[1], keepdims=0)]
        outputs = [_value_info("ids", i64, ["rows"]), _value_info("values", f32, ["rows"])]
    outputs.append(_value_info("check", f32, ["rows", "one_check_out"]))
    if positions is not None:
        dims = [f"p{j}" for j in range(positions)]
        inputs.append(_value_info("past_length", i64, dims))
        inits.append(_scalar("one_position", np.int64(1)))
        nodes.append(_op("Add", ["past_length", "one_position"], ["next_length"]))
        outputs.append(_value_info("next_length", i64, dims))
    graph = b"".join(_bytes_field(1, n) for n in nodes) + _str_field(2, "seq2onnx_search_head")
    graph += b"".join(_bytes_field(5, t) for t in inits)
    graph += b"".join(_bytes_field(11, i) for i in inputs) + b"".join(_bytes_field(12, o) for o in outputs)
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
