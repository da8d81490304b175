"""Rewrites of the traced fp32 graphs, before they are checked against PyTorch: sibling projections fused, and
onnxruntime's GroupQueryAttention fed their packed output.

Projections that read the same tensor (each layer's self-attention Q, K and V; in the encoder, every decoder
layer's cross-attention K and V of the encoder output) are traced as separate MatMul + Add pairs:

    y_i = x W_i + b_i                       W_i [K, N_i], b_i [N_i], i = 1..n

They become one MatMul + Add over the concatenated weights and one Split:

    [y_1 | ... | y_n] = x [W_1 | ... | W_n] + [b_1 | ... | b_n]

Each output element is the same dot product as before, and the export's parity gate checks the fused graphs
against PyTorch. One matrix product instead of three reads the same weights in fewer, larger kernel calls; the
int8 variant (export/quantize.py) quantises the fused MatMul like any other.

In the decoder step traced with onnxruntime's fused attention (the int8 variant's source), the Split of each layer's
Q | K | V then only feeds a GroupQueryAttention, which takes the product packed (pack_attention_qkv): the Split goes.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _bias_add(node: onnx.NodeProto, consumers: Dict[str, List[onnx.NodeProto]],
              initializers) -> Optional[Tuple[onnx.NodeProto, str]]:
    """(the Add of a constant bias that is `node`'s only reader, the bias's name), or None."""
    readers = consumers.get(node.output[0], [])
    if len(readers) != 1 or readers[0].op_type != "Add":
        return None
    add = readers[0]
    bias = add.input[1] if add.input[0] == node.output[0] else add.input[0]
    return (add, bias) if bias in initializers and len(initializers[bias].dims) == 1 else None


def fuse_sibling_projections(model: onnx.ModelProto) -> int:
    """Fuse the MatMul + bias Add pairs that read one tensor (module docstring) -> how many groups."""
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}       # read as arrays only where joined: one group's at a time
    consumers: Dict[str, List[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    groups: Dict[str, List[tuple]] = defaultdict(list)      # x -> [(MatMul, bias Add, bias name)]
    for node in graph.node:
        weight = initializers.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is not None and len(weight.dims) == 2:
            found = _bias_add(node, consumers, initializers)
            if found is not None:
                groups[node.input[0]].append((node, *found))
    fused, removed, replacement = 0, set(), {}
    for x, pairs in groups.items():
        if len(pairs) < 2 or len({initializers[m.input[1]].dims[0] for m, _, _ in pairs}) != 1:
            continue
        if any(initializers[m.input[1]].dims[1] != initializers[bias].dims[0] for m, _, bias in pairs):
            continue
        weights = [numpy_helper.to_array(initializers[m.input[1]]) for m, _, _ in pairs]
        biases = [numpy_helper.to_array(initializers[bias]) for _, _, bias in pairs]
        stem = f"fused_projection_{fused}"
        graph.initializer.extend([
            numpy_helper.from_array(np.concatenate(weights, axis=1), f"{stem}.weight"),
            numpy_helper.from_array(np.concatenate(biases), f"{stem}.bias"),
            numpy_helper.from_array(np.array([w.shape[1] for w in weights], dtype=np.int64), f"{stem}.split")])
        first = pairs[0][0]
        replacement[first.name] = [
            helper.make_node("MatMul", [x, f"{stem}.weight"], [f"{stem}.product"], name=f"{stem}.matmul"),
            helper.make_node("Add", [f"{stem}.product", f"{stem}.bias"], [f"{stem}.sum"], name=f"{stem}.add"),
            helper.make_node("Split", [f"{stem}.sum", f"{stem}.split"], [a.output[0] for _, a, _ in pairs],
                             name=f"{stem}.split", axis=-1)]
        removed.update(n.name for m, a, _ in pairs for n in (m, a))
        fused += 1
    if fused:
        nodes = []
        for node in graph.node:                       # the fused nodes where the group's first MatMul was
            nodes.extend(replacement.get(node.name, []) if node.name in removed else [node])
        _set_nodes(graph, nodes)
    return fused


def _set_nodes(graph: onnx.GraphProto, nodes: List[onnx.NodeProto]) -> None:
    """The graph's nodes become `nodes`; the initializers no node reads any more go."""
    del graph.node[:]
    graph.node.extend(nodes)
    used = {name for node in graph.node for name in node.input}
    for i in reversed(range(len(graph.initializer))):       # in place: a rebuilt list would copy every weight
        if graph.initializer[i].name not in used:
            del graph.initializer[i]


def pack_attention_qkv(model: onnx.ModelProto) -> int:
    """GroupQueryAttention nodes fed Q, K and V by the Split of one fused projection (fuse_sibling_projections) take
    the projection's output whole instead, as its packed QKV input [R, 1, (H + 2 Hkv) Dh] (onnxruntime's contrib op
    spec: `query` packed, `key` and `value` absent), and the Split goes: one node less per layer. -> how many."""
    graph = model.graph
    readers: Dict[str, int] = defaultdict(int)
    for node in graph.node:
        for name in node.input:
            readers[name] += 1
    splits = {n.output[0]: n for n in graph.node if n.op_type == "Split" and len(n.output) == 3}
    packed, removed = 0, set()
    for node in graph.node:
        if node.op_type != "GroupQueryAttention" or len(node.input) < 3:
            continue
        split = splits.get(node.input[0])
        if split is None or list(split.output) != list(node.input[:3]) or any(readers[o] != 1 for o in split.output):
            continue
        node.input[0], node.input[1], node.input[2] = split.input[0], "", ""
        removed.add(split.name)
        packed += 1
    if packed:
        _set_nodes(graph, [n for n in graph.node if n.name not in removed])
    return packed
