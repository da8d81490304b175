"""Reduced-precision variants of the fp32 graphs, made with onnxruntime's own tools.

int8  (--int8): dynamic quantisation of the MatMul weights (onnxruntime.quantization.quantize_dynamic,
      signed int8 weights, activations quantised at run time). The dynamo exporter writes `value_info`
      entries for some initializers, which makes quantize_dynamic fail: they are dropped first.
      Weights are quantised per output channel (PER_CHANNEL), one scale per column: on the trained tiny
      test model its beam-4 hypotheses match fp32 at 0.98 (per tensor: 0.91) and its top-1 agreement on
      synthetic sources is 0.996 (per tensor: 0.992); greedy tokens on real sentences match with both.
      Weights are 7-bit (REDUCE_RANGE, onnxruntime's reduce_range=True: symmetric, |w| <= 64). onnxruntime's
      u8s8 GEMM on AVX2 CPUs without VNNI multiplies with VPMADDUBSW, whose 16-bit sums of two products
      saturate at 32767 with full 8-bit weights (255*127*2 > 32767): the same package then gave other tokens
      there than on AVX512/VNNI CPUs (numbers-en-de: "zero" -> "nulll" on an AVX2 AMD EPYC). With 7-bit
      weights a pair sum is at most 255*64*2 < 32767, so every int32 accumulation is exact on AVX2, AVX512
      and VNNI alike: the integer part of an int8 step no longer depends on the CPU (onnxruntime's
      quantization docs advise reduce_range for these CPUs); only the fp32 parts' rounding remains.
      quantize_dynamic rewrites every Gemm as a MatMul, transposing its weight in place: with tied
      embeddings that weight is also the embedding table of a Gather, which it would break. So a Gemm
      weight shared with other nodes gets its own copy first (`untie_gemm_weights`): the output
      projection is then quantised like the other MatMuls.
      The embedding table (a Gather of input_ids) becomes int8 too (`int8_embeddings`): int8 rows, one float32
      scale per row (symmetric, max |row| / 127), gathered, then Cast and Mul back to float32 (standard ops:
      onnxruntime-web runs them as the CPU does). The table is then a quarter of its float32 bytes in every int8
      graph (encoder, step, few-rows step), on disk and in memory: at vocab 32000 and d_model 512 three float32
      tables were 188 MiB of the package. With tied embeddings the output projection is its own copy already
      (above), quantised per column as a weight; the embedding is a second, per-row int8 copy of the same matrix.
int8, few rows (format 2, with --int8 --few-rows): the int8 decoder step a second time, for steps of at most
      FEW_ROWS_MAX rows, its embedding int8 as the step's, its weight MatMuls as onnxruntime's MatMulNBits (8-bit symmetric blocks of
      FEW_ROWS_BLOCK along the input axis, activations quantised per block at run time: accuracy_level 4), made
      by onnxruntime's MatMulNBitsQuantizer (`quantize_int8_few_rows`). At 1-2 rows its kernels read the weights
      1.2-1.9x faster than DynamicQuantizeMatMul's (the output projection most); from ~8 rows they are slower
      (bench/int8_kernels.py; docs/CONTRACTS.md has the figures). The quantizer takes MatMuls only, so the output projection (a Gemm
      with the embedding table transposed) first becomes a MatMul of its own transposed copy (`gemm_as_matmul`).
      No reduce_range is needed there: MLAS's 8-bit CompInt8 kernel for blocks of 64 and more on AVX2 without
      VNNI (sqnbitgemm_kernel_avx2_int8_blklen64.h, accumulate_q8_blklen64_*) masks each weight pair into two
      VPMADDUBSW calls of one product per 16-bit lane (|255 * 127| < 32767), so its sums are exact too; blocks of
      16 and 32 (models narrower than 64) were not checked.
fp16  (--fp16, for CUDA): weights and activations in float16, graph inputs and outputs kept float32
      (onnxruntime.transformers.float16 with keep_io_types=True); LogSoftmax runs in fp32. Constants are
      clipped to the fp16 range, so the -3.4e38 mask bias becomes -65504 (finite).
Both keep the I/O names of the fp32 graphs; export/parity.py checks them (check_reduced).
"""
from __future__ import annotations

import logging
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Sequence

import onnx

from .graph_files import remove_graph, save_graph, too_big

PER_CHANNEL = True
REDUCE_RANGE = True                 # 7-bit weights: exact int32 sums on AVX2 as on VNNI (module docstring)
QUANTIZED_OPS = ["MatMul"]
EMBEDDING_INT8_MAX = 127            # int8_embeddings: symmetric rows in [-127, 127] (no integer GEMM reads them)
EMBEDDING_ROWS, EMBEDDING_SCALES = ".embedding_rows", ".embedding_scales"   # suffixes of the table's int8 tensors
FEW_ROWS_BITS, FEW_ROWS_ACCURACY_LEVEL = 8, 4
FEW_ROWS_BLOCK = 256                # MatMulNBits' largest block: 256 beat 128 at 1 row (base dims)
FEW_ROWS_MAX = 4                    # the runtime steps with the few-rows graph up to this many rows (the manifest's)
FEW_ROWS_MIN_ONNXRUNTIME = (1, 22)  # 8-bit MatMulNBits: 1.21 refuses it (the runtime then keeps the int8 step)


def drop_initializer_value_info(model: onnx.ModelProto) -> int:
    """Remove value_info entries that name initializers (quantize_dynamic trips on them). -> how many."""
    initializers = {t.name for t in model.graph.initializer}
    keep = [v for v in model.graph.value_info if v.name not in initializers]
    dropped = len(model.graph.value_info) - len(keep)
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    return dropped


def input_readers(model: onnx.ModelProto) -> Counter:
    """How many node inputs of the graph read each name."""
    return Counter(name for node in model.graph.node for name in node.input)


def untie_gemm_weights(model: onnx.ModelProto) -> int:
    """Give each Gemm whose weight initializer other nodes also read its own copy. -> how many."""
    initializers = {t.name: t for t in model.graph.initializer}
    readers = input_readers(model)
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


def int8_embeddings(model: onnx.ModelProto) -> int:
    """Each Gather of the graph input input_ids over a float32 initializer [V, D] that nothing else reads -> a Gather
    over its int8 rows [V, D] and one over its per-row scales [V, 1], then Cast and Mul back to float32 (module
    docstring), under the old output name. -> how many."""
    import numpy as np
    from onnx import helper, numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    readers = input_readers(model)
    rewritten = 0
    for position in reversed(range(len(model.graph.node))):      # reversed: inserting keeps earlier positions
        node = model.graph.node[position]
        table = initializers.get(node.input[0]) if node.op_type == "Gather" else None
        axis = {a.name: helper.get_attribute_value(a) for a in node.attribute}.get("axis", 0)
        if (table is None or node.input[1] != "input_ids" or axis != 0 or len(table.dims) != 2
                or table.data_type != onnx.TensorProto.FLOAT or readers[table.name] != 1):
            continue
        weights = numpy_helper.to_array(table)                                   # [V, D] float32
        scales = np.abs(weights).max(axis=1, keepdims=True) / EMBEDDING_INT8_MAX  # [V, 1]
        scales[scales == 0] = 1.0                                                # a zero row stays zeros
        rows = np.clip(np.rint(weights / scales), -EMBEDDING_INT8_MAX, EMBEDDING_INT8_MAX).astype(np.int8)
        out = node.output[0]
        names = {"rows": table.name + EMBEDDING_ROWS, "scales": table.name + EMBEDDING_SCALES}
        model.graph.initializer.extend([numpy_helper.from_array(rows, names["rows"]),
                                        numpy_helper.from_array(scales.astype(np.float32), names["scales"])])
        model.graph.initializer.remove(table)
        del model.graph.node[position]
        for offset, new in enumerate([
                helper.make_node("Gather", [names["rows"], "input_ids"], [f"{out}.int8"], name=f"{node.name}.rows"),
                helper.make_node("Gather", [names["scales"], "input_ids"], [f"{out}.scale"],
                                 name=f"{node.name}.scales"),
                helper.make_node("Cast", [f"{out}.int8"], [f"{out}.float"], to=onnx.TensorProto.FLOAT,
                                 name=f"{node.name}.cast"),
                helper.make_node("Mul", [f"{out}.float", f"{out}.scale"], [out], name=f"{node.name}.dequantize")]):
            model.graph.node.insert(position + offset, new)
        rewritten += 1
    return rewritten


def quantize_int8(src: Path, dst: Path, per_channel: bool = PER_CHANNEL, reduce_range: bool = REDUCE_RANGE,
                  external: bool = False) -> None:
    """src fp32 .onnx -> dst with int8 MatMul weights, inside the file or (external, or past protobuf's limit) in
    its data file (graph_files.save_graph). quantize_dynamic writes external data its own way (every tensor of
    attributes too, unaligned): its output is written again by save_graph."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src))
    drop_initializer_value_info(model)
    untie_gemm_weights(model)
    int8_embeddings(model)
    external = external or too_big(model)
    fd, cleaned = tempfile.mkstemp(prefix=".cleaned.", suffix=".onnx", dir=Path(dst).parent)
    os.close(fd)
    try:
        save_graph(model, Path(cleaned), external)
        del model
        logging.disable(logging.WARNING)   # it advises pre-processing on the root logger, every time
        quantize_dynamic(cleaned, str(dst), op_types_to_quantize=QUANTIZED_OPS, per_channel=per_channel,
                         weight_type=QuantType.QInt8, reduce_range=reduce_range, use_external_data_format=external)
    finally:
        logging.disable(logging.NOTSET)
        remove_graph(Path(cleaned))
    if external:
        save_graph(onnx.load(str(dst)), Path(dst), external)


def gemm_as_matmul(model: onnx.ModelProto) -> int:
    """Each Gemm of an initializer weight (B transposed, alpha 1: the output projection) -> a MatMul of its own
    transposed copy, which MatMulNBitsQuantizer quantises, then an Add of its C (beta 1) when it has one (HF
    Marian's final_logits_bias). -> how many."""
    from onnx import helper, numpy_helper

    initializers = {t.name: t for t in model.graph.initializer}
    rewritten, adds = 0, []
    for position, node in enumerate(model.graph.node):
        if node.op_type != "Gemm" or len(node.input) < 2 or node.input[1] not in initializers:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or (bias and attrs.get("beta", 1.0) != 1.0):
            raise ValueError(f"{node.name}: a Gemm other than x @ W^T (+ C); the exporter changed")
        if bias:
            out = node.output[0]
            node.output[0] = f"{out}.matmul"
            adds.append((position + 1, helper.make_node("Add", [node.output[0], bias], [out],
                                                        name=f"{node.name or 'gemm'}.bias")))
        weight = numpy_helper.to_array(initializers[node.input[1]])
        name = f"{node.input[1]}.{node.name or 'gemm'}.matmul"
        model.graph.initializer.append(numpy_helper.from_array(weight.T.copy() if attrs.get("transB", 0) else weight,
                                                               name))
        inputs = [node.input[0], name]
        node.op_type = "MatMul"
        del node.attribute[:]
        del node.input[:]
        node.input.extend(inputs)
        rewritten += 1
    for position, add in reversed(adds):             # after its MatMul: the graph stays topologically sorted
        model.graph.node.insert(position, add)
    return rewritten


def few_rows_block(d_model: int) -> int:
    """The MatMulNBits block size for a model of width d_model: FEW_ROWS_BLOCK, or the largest power of two not
    above d_model (blocks pad the input axis: a 64-wide model in blocks of 256 would store 4x its weights)."""
    return max(16, min(FEW_ROWS_BLOCK, 1 << (d_model.bit_length() - 1)))


def quantize_int8_few_rows(src: Path, dst: Path, block_size: int, external: bool = False) -> None:
    """src fp32 .onnx -> dst with every MatMul of an initializer weight as MatMulNBits (module docstring)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    model = onnx.load(str(src))
    drop_initializer_value_info(model)
    gemm_as_matmul(model)
    int8_embeddings(model)
    logging.disable(logging.INFO)      # it logs every node it skips
    try:
        # the settings as a config: onnxruntime 1.22's quantizer takes `bits` there only
        config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=True, bits=FEW_ROWS_BITS,
                                              accuracy_level=FEW_ROWS_ACCURACY_LEVEL, op_types_to_quantize=("MatMul",))
        quantizer = MatMulNBitsQuantizer(model, algo_config=config)
        quantizer.process()
    finally:
        logging.disable(logging.NOTSET)
    save_graph(quantizer.model.model, Path(dst), external)


def convert_fp16(src: Path, dst: Path, keep_float32: Sequence[str] = (), external: bool = False) -> None:
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
    save_graph(model16.model, Path(dst), external)

