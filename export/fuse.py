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
fused_attention_from_plain writes that graph from the plain decoder step without a second trace.
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
    for i in reversed(range(len(graph.initializer))):      # in place: rebuilding the list copied every weight
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


# --- the int8 variant's decoder step: the plain graph's attention as onnxruntime's fused ops ----------------------
_DATA_OPS = ("Expand", "Gather", "Transpose", "Reshape", "Unsqueeze", "Squeeze")   # move K / V, compute nothing
_VIEW_OPS = ("Transpose", "Reshape")


def fused_attention_from_plain(model: onnx.ModelProto, heads: int, layers: int, domain: str = "com.microsoft") -> None:
    """Rewrite a plain decoder step (formats 2 and 3: export/onnx_export.py FixedCacheStep's index_put and attention
    equation, its Q, K, V projections fused by fuse_sibling_projections) in place into the graph that tracing
    export/fused_attention.py's FusedAttentionStep writes (after pack_attention_qkv), node for node where it counts:
      self-attention   GroupQueryAttention(Q | K | V packed, past_key_i, past_value_i, seqlens_k = int32 row lengths,
                       total_sequence_length = int32 max(past_length) + 1) -> (out, present_key_i, present_value_i);
                       the projection's columns reordered to Q | K | V (the trace's order; each column keeps its dot
                       product), the ScatterND and the equation go
      cross-attention  every layer but the last: MultiHeadAttention(Q reshaped [B, -1, D], cross_key_i, cross_value_i,
                       key_padding_mask = int32 encoder_attention_mask) reshaped [-1, 1, D]; the last keeps the
                       equation, whose weights are the cross_attention output
    What no output needs any more goes. ValueError (the graph unchanged) where the graph is not the expected one:
    tracing the fused step is then the way."""
    graph = model.graph
    init = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    readers: Dict[str, List[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    inputs = {i.name: i for i in graph.input}
    names = [n.name for n in graph.node]
    if not all(names) or len(set(names)) != len(names):
        raise ValueError("the graph's nodes are not named one name each")
    if "past_length" not in inputs:
        raise ValueError("no past_length input: only decoder steps of formats 2 and 3 take the fused attention")

    def upstream_split(name: str) -> Tuple[onnx.NodeProto, int]:
        node = producer.get(name)
        while node is not None and node.op_type in _DATA_OPS:
            name = node.input[0]
            node = producer.get(name)
        if node is None or node.op_type != "Split" or len(node.output) != 3:
            raise ValueError(f"{name} does not come from a fused Q, K, V projection")
        return node, list(node.output).index(name)

    def out_projection(node: onnx.NodeProto) -> Tuple[onnx.NodeProto, str]:
        """From an attention's (weights @ V) MatMul down its views to the output projection -> (it, what it reads)."""
        name = node.output[0]
        while len(readers[name]) == 1 and readers[name][0].op_type in _VIEW_OPS:
            name = readers[name][0].output[0]
        nxt = readers[name]
        if len(nxt) != 1 or nxt[0].op_type != "MatMul" or nxt[0].input[1] not in init:
            raise ValueError(f"{name} does not feed an output projection")
        return nxt[0], name

    def reader(name: str, op: str, slot: int) -> onnx.NodeProto:
        found = [n for n in readers[name] if n.op_type == op and len(n.input) > slot and n.input[slot] == name]
        if len(found) != 1:
            raise ValueError(f"{name}: {len(found)} {op} readers, expected 1")
        return found[0]

    stem = "fused_attention"
    new_inits: List[onnx.TensorProto] = []
    first: List[onnx.NodeProto] = []                          # shared inputs of the fused ops, at the graph's start
    before: Dict[str, List[onnx.NodeProto]] = defaultdict(list)   # output projection's name -> nodes put before it
    gone: set = set()
    rewired: List[Tuple[onnx.NodeProto, str]] = []
    reordered: List[tuple] = []
    lengths = "past_length"
    if not inputs["past_length"].type.tensor_type.shape.dim:             # format 2: one for every row
        first += [helper.make_node("Reshape", ["past_length", f"{stem}.one"], [f"{stem}.past_length_1"]),
                  helper.make_node("Shape", ["input_ids"], [f"{stem}.rows"], start=0, end=1),
                  helper.make_node("Expand", [f"{stem}.past_length_1", f"{stem}.rows"], [f"{stem}.row_lengths"])]
        new_inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), f"{stem}.one"))
        lengths = f"{stem}.row_lengths"
    first += [helper.make_node("Cast", [lengths], [f"{stem}.seqlens_k"], to=onnx.TensorProto.INT32),
              helper.make_node("ReduceMax", [lengths], [f"{stem}.max_length"], keepdims=0),
              helper.make_node("Add", [f"{stem}.max_length", f"{stem}.int64_1"], [f"{stem}.total_length_64"]),
              helper.make_node("Cast", [f"{stem}.total_length_64"], [f"{stem}.total_length"], to=onnx.TensorProto.INT32),
              helper.make_node("Cast", ["encoder_attention_mask"], [f"{stem}.key_padding_mask"],
                               to=onnx.TensorProto.INT32)]
    new_inits += [numpy_helper.from_array(np.array(1, dtype=np.int64), f"{stem}.int64_1"),
                  numpy_helper.from_array(np.array([-1], dtype=np.int64), f"{stem}.minus_1")]
    d_model = None
    for i in range(layers):
        key, value = f"present_key_{i}", f"present_value_{i}"
        scatter_k, scatter_v = producer.get(key), producer.get(value)
        if (scatter_k is None or scatter_v is None or scatter_k.op_type != "ScatterND" or scatter_v.op_type != "ScatterND"
                or scatter_k.input[0] != f"past_key_{i}" or scatter_v.input[0] != f"past_value_{i}"):
            raise ValueError(f"layer {i}: {key} / {value} are not the past written by ScatterND")
        split, k_at = upstream_split(scatter_k.input[2])
        split_v, v_at = upstream_split(scatter_v.input[2])
        if split_v is not split or k_at == v_at:
            raise ValueError(f"layer {i}: K and V do not come from one fused projection")
        q_at = 3 - k_at - v_at
        add = producer.get(split.input[0])
        matmul = producer.get(add.input[0]) if add is not None and add.op_type == "Add" else None
        if (matmul is None or matmul.op_type != "MatMul" or matmul.input[1] not in init or add.input[1] not in init
                or split.input[1] not in init):
            raise ValueError(f"layer {i}: the fused projection is not MatMul + bias Add + Split")
        proj, attn_out = out_projection(reader(value, "MatMul", 1))
        sizes = numpy_helper.to_array(init[split.input[1]]).tolist()
        reordered.append((matmul, add, sizes, [q_at, k_at, v_at], f"{stem}_{i}.qkv"))
        out = f"{stem}_{i}.self"
        before[proj.name].append(helper.make_node(
            "GroupQueryAttention", [split.input[0], "", "", f"past_key_{i}", f"past_value_{i}", f"{stem}.seqlens_k",
                                   f"{stem}.total_length"], [out, key, value], name=f"{stem}_{i}.self",
            domain=domain, num_heads=heads, kv_num_heads=heads))
        rewired.append((proj, out))
        gone.update((scatter_k.name, scatter_v.name))
        d_model = sizes[q_at]
        if i == layers - 1:
            continue                           # the last layer's cross-attention weights are an output: kept
        cross_v = reader(f"cross_value_{i}", "MatMul", 1)
        softmax = producer.get(cross_v.input[0])
        if softmax is None or softmax.op_type != "Softmax" or len(readers[softmax.output[0]]) != 1:
            raise ValueError(f"layer {i}: the cross-attention's weights are not a Softmax read once")
        cross_proj, cross_out = out_projection(cross_v)
        scores = reader(reader(f"cross_key_{i}", "Transpose", 0).output[0], "MatMul", 1)
        q = scores.input[0]
        while producer.get(q) is not None and producer[q].op_type in _VIEW_OPS:
            q = producer[q].input[0]
        if producer.get(q) is None or producer[q].op_type != "Add":
            raise ValueError(f"layer {i}: the cross-attention's query is not a projection")
        at = f"{stem}_{i}.cross"
        before[cross_proj.name] += [
            helper.make_node("Shape", [f"cross_key_{i}"], [f"{at}.sentences"], start=0, end=1),
            helper.make_node("Concat", [f"{at}.sentences", f"{stem}.minus_1", f"{stem}.d_model"], [f"{at}.shape"],
                             axis=0),
            helper.make_node("Reshape", [q, f"{at}.shape"], [f"{at}.query"], allowzero=1),
            helper.make_node("MultiHeadAttention", [f"{at}.query", f"cross_key_{i}", f"cross_value_{i}", "",
                                                    f"{stem}.key_padding_mask"], [f"{at}.out"], name=at,
                             domain=domain, num_heads=heads),
            helper.make_node("Reshape", [f"{at}.out", f"{stem}.rows_shape"], [f"{at}.rows"], allowzero=1)]
        rewired.append((cross_proj, f"{at}.rows"))
    new_inits += [numpy_helper.from_array(np.array([d_model], dtype=np.int64), f"{stem}.d_model"),
                  numpy_helper.from_array(np.array([-1, 1, d_model], dtype=np.int64), f"{stem}.rows_shape")]
    # the graph is the expected one: rewrite it
    for matmul, add, sizes, picks, name in reordered:         # new tensors: an initializer may be read elsewhere
        starts = np.cumsum([0] + sizes)
        for node, axis, what in ((matmul, 1, "weight"), (add, 0, "bias")):
            array = numpy_helper.to_array(init[node.input[1]])
            parts = [np.take(array, range(starts[j], starts[j + 1]), axis=axis) for j in picks]
            new_inits.append(numpy_helper.from_array(np.concatenate(parts, axis=axis), f"{name}.{what}"))
            node.input[1] = f"{name}.{what}"
    for node, name in rewired:
        node.input[0] = name
    graph.initializer.extend(new_inits)
    nodes = list(first)
    for node in graph.node:
        if node.name not in gone:
            nodes.extend(before.get(node.name, []))
            nodes.append(node)
    _set_nodes(graph, _needed(nodes, [o.name for o in graph.output]))
    produced = {o for n in graph.node for o in n.output}
    keep = [v for v in graph.value_info if v.name in produced]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    if domain not in {o.domain for o in model.opset_import}:
        model.opset_import.append(helper.make_opsetid(domain, 1))


def _needed(nodes: List[onnx.NodeProto], outputs: List[str]) -> List[onnx.NodeProto]:
    """`nodes` (in order) less those no output depends on."""
    wanted, kept = set(outputs), []
    for node in reversed(nodes):
        if any(o in wanted for o in node.output):
            kept.append(node)
            wanted.update(node.input)
    return kept[::-1]
