"""Reduced-precision variants of the fp32 graphs, made with onnxruntime's own tools.

int8  (--int8): dynamic quantisation of the MatMul weights (onnxruntime.quantization.quantize_dynamic,
      signed int8 weights, activations quantised at run time, then per row: int8_rows.py, so that a row's result
      does not depend on the rows batched with it). The dynamo exporter writes `value_info`
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
      The embedding table and the output projection are one int8 table (`int8_embeddings`, `int8_table`),
      written before quantize_dynamic sees the graph: int8 rows [V, D], 7-bit as the other weights (one float32
      scale per row, max |row| / 64). The embedding Gathers its rows and multiplies each by its scale (Cast, Mul:
      standard ops); the output projection reads the same rows as its transposed per-column weight through
      onnxruntime's QGemm (com.microsoft, transB=1, float32 output, after a quantisation of its input, per row since
      int8_rows.py: the integers of quantize_dynamic's MatMulInteger over a [D, V] copy, bit for bit, and no
      slower). A [D, V] table that both read was tried first: the embedding's Gather along axis 1 cost 2 ms a step
      at 64 rows. Every int8
      graph (encoder, step, few-rows step) quantises the same float32 table to the same bytes, so the export's
      shared weights (graph_files.share_weights) store it once per variant: one int8 table where each graph held
      a float32 one, and one where an 8-bit embedding and a 7-bit projection were two. With untied embeddings each
      table is still quantised once, read by whatever reads it.
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
from pathlib import Path
from typing import Optional, Sequence

import onnx

from .graph_files import remove_graph, save_graph, tensor_chunks, too_big
from .int8_rows import per_row_activations

PER_CHANNEL = True
REDUCE_RANGE = True                 # 7-bit weights: exact int32 sums on AVX2 as on VNNI (module docstring)
PER_ROW = True                      # activations: one scale per row, a row's result its own (int8_rows.py)
QUANTIZED_OPS = ["MatMul"]
TABLE_CHUNK = 4096                  # int8_table: rows quantised at a time (temporaries of a block, not of a table)
TABLE_INT8_MAX = 64                 # int8_embeddings: symmetric rows in [-64, 64], REDUCE_RANGE's (a GEMM reads them)
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


def int8_table(weights):
    """A float32 table [V, D] -> (its int8 rows [V, D], one float32 scale per row [V]): symmetric 7-bit rows as
    REDUCE_RANGE's (onnxruntime's quantizer: scale max |row| / 64, round half to even, clip to +-64), so the output
    projection's integer GEMM can read them as its per-column weight (module docstring)."""
    import numpy as np

    rows = np.empty(weights.shape, np.int8)
    scales = np.empty(weights.shape[0], np.float32)
    for i in range(0, weights.shape[0], TABLE_CHUNK):
        block = weights[i:i + TABLE_CHUNK]
        absmax = np.abs(block).max(axis=1).astype(np.float64)                    # [rows]
        part = (absmax / TABLE_INT8_MAX).astype(np.float32)
        part[part == 0] = 1.0                                                    # a zero row stays zeros
        scales[i:i + TABLE_CHUNK] = part
        rows[i:i + TABLE_CHUNK] = np.clip(np.rint(block / part[:, None]), -TABLE_INT8_MAX, TABLE_INT8_MAX)
    return rows, scales


def _table_reader(node: onnx.NodeProto, initializers) -> str:
    """"gather" for a Gather of input_ids over a float32 [V, D] initializer (axis 0), "projection" for a Gemm
    x @ W^T (+ C) of one (the output projection), "" for anything else."""
    from onnx import helper

    table = initializers.get(node.input[1] if node.op_type == "Gemm" else node.input[0]) if node.input else None
    if table is None or len(table.dims) != 2 or table.data_type != onnx.TensorProto.FLOAT:
        return ""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Gather" and node.input[1] == "input_ids" and attrs.get("axis", 0) == 0:
        return "gather"
    if (node.op_type == "Gemm" and attrs.get("transB", 0) == 1 and not attrs.get("transA", 0)
            and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0):
        return "projection"
    return ""


def int8_embeddings(model: onnx.ModelProto, folder: Optional[Path] = None) -> int:
    """Each float32 table [V, D] that only Gathers of input_ids (the embedding) and output projections (a Gemm, B
    transposed) read -> one int8 copy [V, D] with a scale per row [V] (`int8_table`), read by all of them, under
    the old output names (module docstring):
      Gather:     Gather(int8 [V, D], input_ids) [..., D] -> Cast -> Mul(its scales)
      projection: DynamicQuantizeLinear(x) -> com.microsoft QGemm(x_q, x_scale, x_zero, int8 [V, D], scales, 0,
                  transB=1) -> float32 (+ C by an Add: QGemm's own bias is int32)
    -> how many tables. A table whose bytes lie in a data file of `folder` (onnx.load(..., load_external_data=False))
    is read from there (the table once in memory, as float32; quantised a block of rows at a time)."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    readers: dict = {}
    for node in graph.node:
        for name in set(node.input) & initializers.keys():
            readers.setdefault(name, []).append((node, _table_reader(node, initializers)))
    tables = [name for name, nodes in readers.items()
              if all((kind == "gather" and node.input[0] == name) or (kind == "projection" and node.input[1] == name)
                     for node, kind in nodes)]
    if not tables:
        return 0
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    kinds = {name: {kind for _, kind in readers[name]} for name in tables}     # what reads each table
    last = "int8_table.last_axis"                                   # Unsqueeze's axes, an input since opset 13
    if opset >= 13 and any("gather" in k for k in kinds.values()):
        graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), last))
    if any("projection" in k for k in kinds.values()) and not any(
            o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    for name in tables:
        table = initializers[name]
        rows, scales = int8_table(
            np.frombuffer(b"".join(tensor_chunks(table, folder)), np.float32).reshape(tuple(table.dims))
            if table.data_location == onnx.TensorProto.EXTERNAL else numpy_helper.to_array(table))
        names = {"rows": name + EMBEDDING_ROWS, "scales": name + EMBEDDING_SCALES, "zero": name + ".zero_point"}
        graph.initializer.extend([numpy_helper.from_array(rows, names["rows"]),
                                  numpy_helper.from_array(scales, names["scales"])])
        if "projection" in kinds[name]:                             # QGemm's weight zero point (the Gathers need none)
            graph.initializer.append(numpy_helper.from_array(np.zeros(len(scales), np.int8), names["zero"]))
        graph.initializer.remove(initializers[name])
        for node, kind in readers[name]:
            position = list(graph.node).index(node)
            out, n = node.output[0], node.name or kind
            bias = node.input[2] if kind == "projection" and len(node.input) > 2 and node.input[2] else ""
            unsqueeze = (helper.make_node("Unsqueeze", [f"{out}.scale_rows", last], [f"{out}.scale"], name=f"{n}.axes")
                         if opset >= 13 else
                         helper.make_node("Unsqueeze", [f"{out}.scale_rows"], [f"{out}.scale"], axes=[-1],
                                          name=f"{n}.axes"))
            new = [
                helper.make_node("Gather", [names["rows"], "input_ids"], [f"{out}.int8"], name=f"{n}.rows"),
                helper.make_node("Gather", [names["scales"], "input_ids"], [f"{out}.scale_rows"], name=f"{n}.scales"),
                unsqueeze,
                helper.make_node("Cast", [f"{out}.int8"], [f"{out}.float"], to=onnx.TensorProto.FLOAT,
                                 name=f"{n}.cast"),
                helper.make_node("Mul", [f"{out}.float", f"{out}.scale"], [out], name=f"{n}.dequantize"),
            ] if kind == "gather" else [
                helper.make_node("DynamicQuantizeLinear", [node.input[0]],
                                 [f"{out}.x_int8", f"{out}.x_scale", f"{out}.x_zero"], name=f"{n}.quantize"),
                helper.make_node("QGemm", [f"{out}.x_int8", f"{out}.x_scale", f"{out}.x_zero", names["rows"],
                                           names["scales"], names["zero"]], [f"{out}.matmul" if bias else out],
                                 domain="com.microsoft", transB=1, name=f"{n}.qgemm"),
            ] + ([helper.make_node("Add", [f"{out}.matmul", bias], [out], name=f"{n}.bias")] if bias else [])
            graph.node.remove(node)
            for offset, made in enumerate(new):
                graph.node.insert(position + offset, made)
    return len(tables)


def quantize_int8(src: Path, dst: Path, per_channel: bool = PER_CHANNEL, reduce_range: bool = REDUCE_RANGE,
                  external: bool = False, per_row: bool = PER_ROW) -> None:
    """src fp32 .onnx -> dst with int8 MatMul weights, inside the file or (external, or past protobuf's limit) in
    its data file (graph_files.save_graph). quantize_dynamic writes external data its own way (every tensor of
    attributes too, unaligned): its output is written again by save_graph. per_row: its activations quantised per
    row (export/int8_rows.py); False leaves quantize_dynamic's per-tensor ones (benchmarks and tests compare)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(src), load_external_data=False)  # the weights stay in src's data file until copied
    drop_initializer_value_info(model)
    int8_embeddings(model, Path(src).parent)
    external = external or too_big(model)
    fd, cleaned = tempfile.mkstemp(prefix=".cleaned.", suffix=".onnx", dir=Path(dst).parent)
    os.close(fd)
    try:
        save_graph(model, Path(cleaned), external, source_dir=Path(src).parent)
        del model
        logging.disable(logging.WARNING)   # it advises pre-processing on the root logger, every time
        quantize_dynamic(cleaned, str(dst), op_types_to_quantize=QUANTIZED_OPS, per_channel=per_channel,
                         weight_type=QuantType.QInt8, reduce_range=reduce_range, use_external_data_format=external)
    finally:
        logging.disable(logging.NOTSET)
        remove_graph(Path(cleaned))
    if external or per_row:
        quantized = onnx.load(str(dst))
        if per_row:
            per_row_activations(quantized)
        save_graph(quantized, Path(dst), external)


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

