"""Reduced-precision variants of the fp32 graphs, made with onnxruntime's own tools.

int8  (--int8): dynamic quantisation of the MatMul weights (onnxruntime.quantization.quantize_dynamic,
      signed int8 weights, activations quantised at run time). The dynamo exporter writes `value_info`
      entries for some initializers, which makes quantize_dynamic fail: they are dropped first.
      Weights are quantised per output channel (PER_CHANNEL), one scale per column: on the trained tiny
      test model its beam-4 hypotheses match fp32 at 0.98 (per tensor: 0.91) and its top-1 agreement on
      synthetic sources is 0.996 (per tensor: 0.992); greedy tokens on real sentences match with both.
      quantize_dynamic rewrites every Gemm as a MatMul, transposing its weight in place: with tied
      embeddings that weight is also the embedding table of a Gather, which it would break. So a Gemm
      weight shared with other nodes gets its own copy first (`untie_gemm_weights`): the output
      projection is then quantised like the other MatMuls, the embedding (Gather) stays fp32.
fp16  (--fp16, for CUDA): weights and activations in float16, graph inputs and outputs kept float32
      (onnxruntime.transformers.float16 with keep_io_types=True); LogSoftmax runs in fp32. Constants are
      clipped to the fp16 range, so the -3.4e38 mask bias becomes -65504 (finite).
Both keep the I/O names of the fp32 graphs; export/parity.py checks them (check_reduced).
"""
from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Sequence

import onnx

PER_CHANNEL = True
QUANTIZED_OPS = ["MatMul"]


def drop_initializer_value_info(model: onnx.ModelProto) -> int:
    """Remove value_info entries that name initializers (quantize_dynamic trips on them). -> how many."""
    initializers = {t.name for t in model.graph.initializer}
    keep = [v for v in model.graph.value_info if v.name not in initializers]
    dropped = len(model.graph.value_info) - len(keep)
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    return dropped


def untie_gemm_weights(model: onnx.ModelProto) -> int:
    """Give each Gemm whose weight initializer other nodes also read its own copy. -> how many."""
    initializers = {t.name: t for t in model.graph.initializer}
    readers: dict = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    copies = 0
    for node in model.graph.node:
        if node.op_type == "Gemm" and node.input[1] in initializers and readers[node.input[1]] > 1:
            copy = onnx.TensorProto()
            copy.CopyFrom(initializers[node.input[1]])
            copy.name = f"{node.input[1]}.{node.name or 'gemm'}.{copies}"
            model.graph.initializer.append(copy)
            readers[node.input[1]] -= 1
            node.input[1] = copy.name
            copies += 1
    return copies


def quantize_int8(src: Path, dst: Path, per_channel: bool = PER_CHANNEL) -> None:
    """src fp32 .onnx -> dst with int8 MatMul weights (weights inside the file)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    drop_initializer_value_info(model)
    untie_gemm_weights(model)
    fd, cleaned = tempfile.mkstemp(prefix=".cleaned.", suffix=".onnx", dir=Path(dst).parent)
    os.close(fd)
    try:
        onnx.save(model, cleaned)
        logging.disable(logging.WARNING)   # it advises pre-processing on the root logger, every time
        quantize_dynamic(cleaned, str(dst), op_types_to_quantize=QUANTIZED_OPS, per_channel=per_channel,
                         weight_type=QuantType.QInt8, use_external_data_format=False)
    finally:
        logging.disable(logging.NOTSET)
        os.unlink(cleaned)


def convert_fp16(src: Path, dst: Path, keep_float32: Sequence[str] = ()) -> None:
    """src fp32 .onnx -> dst with fp16 weights, activations and float inputs/outputs, except the
    inputs/outputs named in keep_float32. The KV caches stay float16 between steps: with float32 cache
    inputs and outputs the graph cast every cache tensor in and out at every step."""
    from onnxruntime.transformers import float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = onnx.load(str(src))
    blocked = list(float16.DEFAULT_OP_BLOCK_LIST) + ["LogSoftmax"]
    model16 = OnnxModel(float16.convert_float_to_float16(model, keep_io_types=list(keep_float32),
                                                         op_block_list=blocked))
    model16.topological_sort()          # the converter appends its input casts after their readers
    onnx.save(model16.model, str(dst))

