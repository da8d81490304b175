"""A graph of N identical layers from the trace of a model with two: the traced layer's nodes stamped N - 2 times.

torch.onnx.export's time (torch.export, the decompositions, the type promotion) grows with the traced nodes: at
OPUS-MT en-de's size (6 + 6 layers) each layer cost 3.5 CPU seconds of the decoder step's 34 and 2.6 of the encoder's
20. onnx_export traces a model whose stacks hold their first two layers (`truncated`) without the exporter's optimizer,
and this module writes the graph of the whole model from it, before the optimizer runs on the whole graph as it ran
on a full trace:
  * a stack's traced layer 0 is the template, its layer 1 the last layer (with the stack's end: the decoder's
    cross_attention output, the final LayerNorm, the log-probs); layers 1 .. N-2 are copies of the template's nodes
    reading their own weights ("model.<stack>.k." + the parameter's name, the model's own tensors), their own graph
    inputs and outputs (past_key_k, present_key_k, ...: graph_io.py's names) and the residual stream the copy
    before them wrote; the last layer is renamed to N-1 and reads the last copy's output
  * the encoder's cross K/V projections (one per decoder layer, each reading the encoder's output) are copied
    the same way, side by side instead of one after the other
A node belongs to the layer whose weights or graph inputs it reads, directly or through the nodes before it
(the last of them in stack order: a layer's nodes read the layers' before it through the residual stream); a
node that reads none belongs to no layer and is shared (the masks, the symbolic sizes). A Shape of a graph input
is a size, shared: torch.export reads each dynamic size from one input of those that share it.

Each traced layer is the same Python code as every other, so the stamped graph is the full trace's up to names
(tests/export/test_stamp.py checks both, op by op and on the contract's inputs); where the trace is not of that
shape (a layer's nodes read another layer's other than through one residual value), `stamp` raises
NotStampable and the caller traces the whole model. The export's parity gate checks the stamped graphs against the
whole PyTorch model, as it checked a full trace.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Dict, List, Optional, Sequence

import onnx_ir as ir
import torch

from seq2onnx.runtime.package.graph_io import DECODER_FORMAT, GraphNames
from seq2onnx.training.model import Transformer

TRACED_LAYERS = 2      # of each stack: the template and the last layer


class NotStampable(ValueError):
    """The traced graph is not made of layers as `stamp` expects: trace the whole model instead."""


def traced_layers(n: int) -> int:
    return min(n, TRACED_LAYERS)


def truncated(model: Transformer) -> Transformer:
    """The model with each stack's first traced_layers layers (the same modules and tensors, nothing copied)."""
    small = copy.copy(model)
    small._modules = dict(model._modules)          # copy.copy shares the dict: the model's own would change
    e, d = traced_layers(model.cfg.encoder_layers), traced_layers(model.cfg.decoder_layers)
    small.encoder_layers = torch.nn.ModuleList(list(model.encoder_layers)[:e])
    small.decoder_layers = torch.nn.ModuleList(list(model.decoder_layers)[:d])
    small.cfg = dataclasses.replace(model.cfg, encoder_layers=e, decoder_layers=d)
    return small


@dataclasses.dataclass
class _Stack:
    """One stack of layers in a graph: its weights' prefix ("model.encoder_layers."), how many layers the traced
    graph and the model hold, the graph inputs and outputs of layer k (names(k)), and whether each layer reads the
    one before it (chained) or all read the same value (the encoder's cross K/V projections)."""
    prefix: str
    traced: int
    full: int
    inputs: Sequence[str]             # name patterns of layer k's graph inputs: "past_key_{}" ...
    outputs: Sequence[str]
    chained: bool


def stamp_encoder(model: ir.Model, full: Transformer) -> None:
    """The traced encoder graph (of `truncated(full)`) -> the graph of `full`, in place."""
    cfg = full.cfg
    stacks = [_Stack("model.encoder_layers.", traced_layers(cfg.encoder_layers), cfg.encoder_layers, (), (), True),
              _Stack("model.decoder_layers.", traced_layers(cfg.decoder_layers), cfg.decoder_layers, (),
                     ("cross_key_{}", "cross_value_{}"), False)]
    names = GraphNames.for_config(cfg, DECODER_FORMAT)          # the encoder's names are those of every format
    _stamp(model.graph, full, stacks, names.encoder_inputs, names.encoder_outputs)


def stamp_decoder(model: ir.Model, full: Transformer, decoder_format: int) -> None:
    """The traced decoder step (of `truncated(full)`, any format) -> the graph of `full`, in place."""
    cfg = full.cfg
    stacks = [_Stack("model.decoder_layers.", traced_layers(cfg.decoder_layers), cfg.decoder_layers,
                     ("past_key_{}", "past_value_{}", "cross_key_{}", "cross_value_{}"),
                     ("present_key_{}", "present_value_{}"), True)]
    names = GraphNames.for_config(cfg, decoder_format)
    _stamp(model.graph, full, stacks, names.decoder_inputs, names.decoder_outputs)


def _stamp(graph: ir.Graph, full: Transformer, stacks: List[_Stack], input_names: List[str],
           output_names: List[str]) -> None:
    if any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS)
           for node in graph for a in node.attributes.values()):
        raise NotStampable("the traced graph has subgraphs")
    weights = dict(full.named_parameters(remove_duplicate=False))
    owner = _owners(graph, stacks)
    for s, stack in enumerate(stacks):
        if stack.full > stack.traced:
            _stamp_stack(graph, weights, owner, s, stack)
    for values, names in ((graph.inputs, input_names), (graph.outputs, output_names)):
        by_name = {v.name: v for v in values}
        if set(by_name) != set(names):
            raise NotStampable(f"the stamped graph's inputs or outputs {sorted(by_name)} are not {names}")
        values.clear()
        values.extend(by_name[n] for n in names)
    graph.sort()


def _layer_of(name: str, stacks: List[_Stack]) -> Optional[tuple]:
    """(stack index, layer) of a weight's or graph input's name, or None."""
    for s, stack in enumerate(stacks):
        if name.startswith(stack.prefix):
            head = name[len(stack.prefix):].split(".", 1)[0]
            if head.isdigit() and int(head) < stack.traced:
                return s, int(head)
        for pattern in stack.inputs:
            for k in range(stack.traced):
                if name == pattern.format(k):
                    return s, k
    return None


def _owners(graph: ir.Graph, stacks: List[_Stack]) -> Dict[ir.Node, Optional[tuple]]:
    """Each node -> the (stack, layer) it belongs to (module docstring), or None: shared."""
    order = {(s, k): s * 1_000_000 + k for s, stack in enumerate(stacks) for k in range(stack.traced)}
    seeds = {v: _layer_of(v.name, stacks) for v in (*graph.inputs, *graph.initializers.values())}
    owner: Dict[ir.Node, Optional[tuple]] = {}
    produced: Dict[ir.Value, Optional[tuple]] = {}
    for node in graph:                      # the exporter writes nodes in topological order
        found = set()
        size = node.op_type == "Shape" and node.inputs[0] is not None and node.inputs[0].is_graph_input()
        for value in node.inputs:
            if value is None or size:
                continue
            layer = produced[value] if value in produced else seeds.get(value)
            if layer is not None:
                found.add(layer)
        parallel = {layer for layer in found if not stacks[layer[0]].chained}
        if len(parallel) > 1:
            raise NotStampable(f"node {node.name} reads two side-by-side layers {sorted(parallel)}")
        owner[node] = max(found, key=order.__getitem__) if found else None
        for out in node.outputs:
            produced[out] = owner[node]
    return owner


def _stamp_stack(graph: ir.Graph, weights: Dict[str, torch.Tensor], owner: Dict[ir.Node, Optional[tuple]],
                 s: int, stack: _Stack) -> None:
    template = [node for node in graph if owner.get(node) == (s, 0)]
    inside = set(template)
    # what the template's nodes read from outside it, and what of theirs is read outside
    reads = {v for node in template for v in node.inputs if v is not None and v.producer() not in inside}
    read_out = {v for node in template for v in node.outputs for user, _ in v.uses() if user not in inside}
    last = [node for node in graph if owner.get(node) == (s, stack.traced - 1)] if stack.traced > 1 else []
    residual_in = residual_out = None
    if stack.chained:
        if stack.traced < 2:
            raise NotStampable(f"{stack.prefix}: one traced layer")
        if len(read_out) != 1:
            raise NotStampable(f"{stack.prefix}: {len(read_out)} values of the layer are read after it, expected 1")
        residual_out = next(iter(read_out))
        # the residual stream into the template: what the last layer reads from the template instead, a value of
        # its type and shape that the last layer does not read (a mask or a size is read by both)
        last_reads = {v for node in last for v in node.inputs if v is not None}
        carried = [v for v in reads if v.producer() is not None and v not in last_reads
                   and v.type == residual_out.type and v.shape == residual_out.shape]
        if residual_out.shape is None or len(carried) != 1:
            raise NotStampable(f"{stack.prefix}: {len(carried)} values read by the layer are like its output")
        residual_in = carried[0]
        if not all(user in last for user, _ in residual_out.uses()):
            raise NotStampable(f"{stack.prefix}: the template's output is read by other than the last layer")
    elif read_out:
        raise NotStampable(f"{stack.prefix}: a side-by-side layer's values are read outside it")
    first_copy = stack.traced - 1 if stack.chained else stack.traced
    if stack.chained:                       # the last traced layer becomes the model's last
        _rename_layer(graph, weights, last, stack, stack.traced - 1, stack.full - 1)
    stream = residual_out
    for k in range(first_copy, stack.full - (1 if stack.chained else 0)):
        mapping: Dict[ir.Value, ir.Value] = {}
        if stack.chained:
            mapping[residual_in] = stream
        for value in reads:
            if value.is_graph_input():
                if _layer_of(value.name, [stack]) is not None:
                    mapping[value] = _new_input(graph, value, _renamed(value.name, stack, 0, k))
            elif value.is_initializer() and value.name.startswith(stack.prefix):
                mapping[value] = _new_weight(graph, weights, _renamed(value.name, stack, 0, k))
        for node in template:
            copied = ir.Node(node.domain, node.op_type, [None if v is None else mapping.get(v, v) for v in node.inputs],
                             list(node.attributes.values()), overload=node.overload, num_outputs=len(node.outputs),
                             version=node.version, name=f"{node.name}.layer{k}",
                             metadata_props=dict(node.metadata_props))
            for old, new in zip(node.outputs, copied.outputs):
                new.name = _renamed(old.name, stack, 0, k) if old.is_graph_output() else f"{old.name}.layer{k}"
                new.shape, new.type = old.shape, old.type
                new.metadata_props.update(old.metadata_props)
                mapping[old] = new
                if old.is_graph_output():
                    graph.outputs.append(new)
            graph.append(copied)
        if stack.chained:
            stream = mapping[residual_out]
    if stack.chained:
        for user, index in list(residual_out.uses()):
            if user in last:
                user.replace_input_with(index, stream)


def _rename_layer(graph: ir.Graph, weights: Dict[str, torch.Tensor], nodes: List[ir.Node], stack: _Stack,
                  old: int, new: int) -> None:
    """The traced layer `old` (its nodes, weights, graph inputs and outputs) renamed to layer `new`."""
    inside = set(nodes)
    for value in {v for node in nodes for v in node.inputs if v is not None and v.producer() not in inside}:
        if value.is_graph_input() and _layer_of(value.name, [stack]) == (0, old):
            # another layer's nodes may read this input's size: a new input for the renamed layer, shared sizes kept
            replacement = _new_input(graph, value, _renamed(value.name, stack, old, new))
            for user, index in list(value.uses()):
                if user in inside:
                    user.replace_input_with(index, replacement)
        elif value.is_initializer() and _layer_of(value.name, [stack]) == (0, old):
            replacement = _new_weight(graph, weights, _renamed(value.name, stack, old, new))
            for user, index in list(value.uses()):
                if user in inside:
                    user.replace_input_with(index, replacement)
    for node in nodes:
        for out in node.outputs:
            if out.is_graph_output() and _layer_of(out.name, [dataclasses.replace(stack, inputs=stack.outputs)]):
                out.name = _renamed(out.name, stack, old, new)


def _renamed(name: str, stack: _Stack, old: int, new: int) -> str:
    if name.startswith(f"{stack.prefix}{old}."):
        return f"{stack.prefix}{new}." + name[len(f"{stack.prefix}{old}."):]
    for pattern in (*stack.inputs, *stack.outputs):
        if name == pattern.format(old):
            return pattern.format(new)
    raise NotStampable(f"{name} is not a name of layer {old} of {stack.prefix}")


def _new_input(graph: ir.Graph, like: ir.Value, name: str) -> ir.Value:
    existing = [v for v in graph.inputs if v.name == name]
    if existing:
        return existing[0]
    value = ir.Value(name=name, shape=like.shape, type=like.type)
    graph.inputs.append(value)
    return value


def _new_weight(graph: ir.Graph, weights: Dict[str, torch.Tensor], name: str) -> ir.Value:
    if name in graph.initializers:
        return graph.initializers[name]
    tensor = weights.get(name[len("model."):]) if name.startswith("model.") else None
    if tensor is None:
        raise NotStampable(f"{name}: the model has no such weight")
    value = ir.Value(name=name, const_value=ir.Tensor(tensor.detach().numpy(), name=name))
    value.shape, value.type = value.const_value.shape, ir.TensorType(value.const_value.dtype)
    graph.register_initializer(value)
    return value
