"""Trace a Transformer into the two ONNX graphs of docs/CONTRACTS.md.

    encoder.onnx       input_ids, attention_mask [B, S]  ->  cross_key_i, cross_value_i [B, H, S, Dh]
    decoder_step.onnx  format 3 (the default): input_ids [R, 1], encoder_attention_mask [B, S],
                       past_length (int64 [R], one per row), past_key_i, past_value_i [R, H, C, Dh],
                       cross_key_i, cross_value_i [B, H, S, Dh]
                       ->  log_probs [R, V], present_key_i, present_value_i [R, H, C, Dh], cross_attention [R, S]
                       (training/model.py decode_step_fixed: a fixed-capacity cache, row r written at past_length[r])
                       format 2: the same with one past_length (int64, 0-d) for every row
                       format 1: no past_length; past [R, H, P, Dh] -> present [R, H, P+1, Dh] (decode_step:
                       the cache grows by a Concat each step); no cross_attention

The decoder step takes the cross K/V and the encoder mask once per sentence (B, axis `sentences`)
and everything else once per row (R = B x G, axis `rows`, row = sentence * G + g): a beam search's
G = K beams share their sentence's cross K/V (training/model.py, forward_per_sentence); B = R
(G = 1) is greedy decoding, or cross K/V copied to every row as packages before this contract took them.

The cut follows the model's own encode + cross_kv / decode_step methods. Both graphs are exported
with the torch.onnx dynamo exporter from `.eval()` at a batch of 2 sentences, 10 decoder rows and
distinct lengths (S=7, P=3; in format 3 the rows' past_length differ: TRACE_PAST_LENGTHS), so that no axis is
specialised; batch (encoder), rows, sentences, src_len and past_len are named dynamic axes. Weights are traced into a
data file beside the graph, tensor by tensor, then stored as graph_files.save_graph decides (inside the .onnx file
unless the graph is big or --external-data). Projections that read one tensor (Q, K, V; the encoder's cross K/V of
every decoder layer) are then fused into one MatMul each (export/fuse.py), before the graphs are checked against
PyTorch.
"""
from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import onnx
import onnxscript  # noqa: F401 - the dynamo exporter needs it; a missing one is reported by the CLI
import torch
import torch.nn as nn

from seq2onnx.export import fuse, stamp
from seq2onnx.export.beside import beside
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.package.graph_io import (  # noqa: F401 - the runtime owns the names
    DECODER_FORMAT, FUSED_ATTENTION_DOMAIN, FUSED_ATTENTION_OPS, GraphNames, cache_names)
from seq2onnx.training.model import FixedCacheStep, Transformer

from .fused_attention import FusedAttentionStep
from .graph_files import data_file, save_graph, tensor_chunks

DEFAULT_OPSET = 18
ENCODER_FILE = "encoder.onnx"
DECODER_FILE = "decoder_step.onnx"
# trace sizes: batch >= 2 and sizes that differ from each other and from 0/1
TRACE_BATCH, TRACE_SRC_LEN, TRACE_PAST_LEN = 2, 7, 3
TRACE_ROWS_PER_SENTENCE = 5     # decoder step: rows = TRACE_BATCH sentences x 5 (beams)
TRACE_CAPACITY = 6              # formats 2, 3: cache capacity; format 2: past_length = TRACE_PAST_LEN
TRACE_PAST_LENGTHS = (3, 0, 5, 1, 2)   # format 3: the rows' past_length, repeated over the rows (unequal, < capacity)
# ops that would mean the exporter took a path the runtime does not expect (the decoder step's fused attention is
# onnxruntime's: FUSED_ATTENTION_OPS in FUSED_ATTENTION_DOMAIN, graph_io.py)
FINITE_CHUNK = 1 << 24          # check_graph reads a constant's bytes from its data file this many at a time
FORBIDDEN_OPS = {"Attention", "MultiHeadAttention", "GroupQueryAttention", "ScaledDotProductAttention", "If", "Loop"}


# --- graph I/O names -------------------------------------------------------------------------------
# --- the two graphs as modules -----------------------------------------------------------------------
class EncoderGraph(nn.Module):
    """(input_ids [B, S], attention_mask [B, S]) -> (cross_key_0, cross_value_0, ...) each [B, H, S, Dh]"""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        memory = self.model.encode(input_ids, attention_mask)                  # [B, S, D]
        return tuple(t for kv in self.model.cross_kv(memory) for t in kv)


class DecoderStepGraph(nn.Module):
    """(input_ids [B, 1], encoder_attention_mask [B, S], *past (2L x [B, H, P, Dh]), *cross (2L x [B, H, S, Dh]))
    -> (log_probs [B, V], *present (2L x [B, H, P+1, Dh])). Caches are flat: key_0, value_0, key_1, ..."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.layers = model.cfg.decoder_layers

    def forward(self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor,
                *caches: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        n = self.layers
        past = [(caches[2 * i], caches[2 * i + 1]) for i in range(n)]
        cross = [(caches[2 * n + 2 * i], caches[2 * n + 2 * i + 1]) for i in range(n)]
        log_probs, present = self.model.decode_step(input_ids, encoder_attention_mask, past, cross)
        return (log_probs,) + tuple(t for kv in present for t in kv)


class FixedCacheStepGraph(DecoderStepGraph):
    """Format 3: (input_ids [R, 1], encoder_attention_mask [B, S], past_length (int64 [R]), *past (2L x [R, H, C, Dh]),
    *cross (2L x [B, H, S, Dh])) -> (log_probs [R, V], *present (2L x [R, H, C, Dh]), cross_attention [R, S]).
    step_type: how the layers attend (FixedCacheStep; FusedAttentionStep, onnxruntime's GroupQueryAttention /
    MultiHeadAttention: the int8 variant's graph, see export_fused_decoder)."""

    def __init__(self, model: Transformer, step_type: type = FixedCacheStep):
        super().__init__(model)
        self.step_type = step_type

    def row_lengths(self, past_length: torch.Tensor, rows: int) -> torch.Tensor:
        """The graph's past_length input -> int64 [R]: in format 3 it is one per row already."""
        return past_length

    def forward(self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor, past_length: torch.Tensor,
                *caches: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        n = self.layers
        past = [(caches[2 * i], caches[2 * i + 1]) for i in range(n)]
        cross = [(caches[2 * n + 2 * i], caches[2 * n + 2 * i + 1]) for i in range(n)]
        lengths = self.row_lengths(past_length, input_ids.shape[0])                          # [R]
        log_probs, present, weights = self.model.decode_step_fixed(input_ids, encoder_attention_mask, lengths,
                                                                   past, cross, self.step_type)
        return (log_probs,) + tuple(t for kv in present for t in kv) + (weights,)


class SharedLengthStepGraph(FixedCacheStepGraph):
    """Format 2: FixedCacheStepGraph with one past_length (int64, 0-d) for every row."""

    def row_lengths(self, past_length: torch.Tensor, rows: int) -> torch.Tensor:
        return past_length.reshape(1).expand(rows)                                          # [R]


STEP_GRAPHS = {1: DecoderStepGraph, 2: SharedLengthStepGraph, 3: FixedCacheStepGraph}


# --- model from a checkpoint -------------------------------------------------------------------------
def model_from_checkpoint(ckpt: Dict[str, Any]) -> Transformer:
    """A checkpoint dict (training/checkpoint.py) -> the Transformer in eval mode, on the CPU, fp32."""
    try:
        cfg = ModelConfig.from_dict(ckpt["config"])
    except (TypeError, ValueError) as e:
        raise Seq2OnnxError(f"the checkpoint's config is invalid ({e}): use a checkpoint written by seq2onnx train")
    model = Transformer(cfg)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise Seq2OnnxError(f"the checkpoint's weights do not fit its config ({first}): the file is damaged")
    return model.float().eval()


# --- export ------------------------------------------------------------------------------------------
def trace_inputs(cfg: ModelConfig, batch: int = TRACE_BATCH, src_len: int = TRACE_SRC_LEN,
                 past_len: int = TRACE_PAST_LEN, rows_per_sentence: int = TRACE_ROWS_PER_SENTENCE,
                 decoder_format: int = DECODER_FORMAT) -> Tuple[tuple, tuple]:
    """Example inputs of (encoder, decoder_step) at the given sizes; the second source row is padded.
    The decoder step gets `batch` sentences (mask, cross) and batch * rows_per_sentence rows; in formats 2 and 3
    a cache of TRACE_CAPACITY positions, past_len of them written (format 3: each row's from TRACE_PAST_LENGTHS,
    with past_len among them)."""
    g = torch.Generator().manual_seed(0)
    n_special = 1 + max(cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id)
    ids = torch.randint(n_special, max(cfg.vocab_size, n_special + 1), (batch, src_len), generator=g)
    mask = torch.ones(batch, src_len, dtype=torch.long)
    mask[1:, src_len - 2:] = 0
    ids[mask == 0] = cfg.pad_id
    h, dh, n = cfg.n_heads, cfg.head_dim, cfg.decoder_layers
    rows = batch * rows_per_sentence
    capacity = past_len if decoder_format == 1 else max(TRACE_CAPACITY, past_len + 1)
    row_lengths = [TRACE_PAST_LENGTHS[r % len(TRACE_PAST_LENGTHS)] % capacity for r in range(rows)]
    row_lengths[0] = past_len
    past = [torch.randn(rows, h, capacity, dh, generator=g) for _ in range(2 * n)]
    cross = [torch.randn(batch, h, src_len, dh, generator=g) for _ in range(2 * n)]
    last = ids[:, :1].repeat_interleave(rows_per_sentence, 0)                       # [rows, 1]
    length = {1: (), 2: (torch.tensor(past_len, dtype=torch.long),),
              3: (torch.tensor(row_lengths, dtype=torch.long),)}[decoder_format]        # format 3: [rows]
    return (ids, mask), (last, mask, *length, *past, *cross)


def _dynamic_shapes(cfg: ModelConfig, decoder_format: int) -> Tuple[dict, tuple]:
    Dim = torch.export.Dim
    batch = Dim("batch", min=1)
    src_len = Dim("src_len", min=1, max=cfg.max_positions)          # positions of the source
    # past_len + 1 <= max_positions (the position table); 0 is allowed (first step), see export_graphs
    past_len = Dim("past_len", min=0, max=cfg.max_positions - 1)
    # decoder step: `rows` (input_ids, past, present, log_probs) = `sentences` (encoder_attention_mask,
    # cross) x G; G = rows / sentences is computed inside the graph
    rows, sentences = Dim("rows", min=1), Dim("sentences", min=1)
    # formats 2, 3: the cache's capacity; past_length < capacity <= max_positions
    capacity = Dim("capacity", min=1, max=cfg.max_positions)
    n = cfg.decoder_layers
    encoder = {"input_ids": {0: batch, 1: src_len}, "attention_mask": {0: batch, 1: src_len}}
    if decoder_format == 1:
        decoder = ({0: rows}, {0: sentences, 1: src_len},
                   tuple([{0: rows, 2: past_len}] * (2 * n) + [{0: sentences, 2: src_len}] * (2 * n)))
    else:                                   # past_length: 0-d (format 2) or one per row (format 3)
        decoder = ({0: rows}, {0: sentences, 1: src_len}, None if decoder_format == 2 else {0: rows},
                   tuple([{0: rows, 2: capacity}] * (2 * n) + [{0: sentences, 2: src_len}] * (2 * n)))
    return encoder, decoder


def _export_one(module: nn.Module, args: tuple, input_names: List[str], output_names: List[str],
                dynamic_shapes: Any, opset: int, path: Path, grow: Optional[Callable[[Any], None]] = None) -> None:
    """The module traced into `path` (its weights in a data file beside it). grow: the traced graph (onnx_ir, before
    the exporter's optimizer) -> the whole model's, in place (export/stamp.py); the optimizer then runs on that."""
    registration_log = logging.getLogger("torch.onnx._internal.exporter._registration")
    level = registration_log.level
    with warnings.catch_warnings():
        # the exporter warns about each axis name it merges with an identical one, and logs each
        # torchvision op it cannot register: harmless for this model
        warnings.simplefilter("ignore", UserWarning)
        warnings.simplefilter("ignore", FutureWarning)
        registration_log.setLevel(logging.ERROR)
        try:
            # without FakeTensor's dispatch cache: rebuilding a cached output's symbolic sizes and strides cost more
            # than computing them (a decoder step's trace took 1.2x the CPU time with it); the same graph
            with torch._dynamo.config.patch(fake_tensor_cache_enabled=False):
                program = torch.onnx.export(module.eval(), args, input_names=input_names, output_names=output_names,
                                            dynamic_shapes=dynamic_shapes, dynamo=True, opset_version=opset,
                                            external_data=False, verbose=False, optimize=grow is None)
        finally:
            registration_log.setLevel(level)
    if program is None:
        raise RuntimeError("torch.onnx.export returned no program (is the dynamo exporter available?)")
    if grow is not None:
        grow(program.model)
        program.optimize()
    # the weights straight into a data file, tensor by tensor from the model's own (a graph serialized whole holds
    # them twice more); _fuse_projections writes the graph again as graph_files.save_graph decides
    program.save(str(path), external_data=True)


@torch.no_grad()
def export_graphs(model: Transformer, out_dir: Path, opset: int = DEFAULT_OPSET,
                  decoder_format: int = DECODER_FORMAT, external: bool = False,
                  meanwhile: Callable[[], None] = lambda: None, stamped: bool = True) -> Tuple[Path, Path]:
    """Write encoder.onnx and decoder_step.onnx (fp32, the decoder step of `decoder_format`) into out_dir, their
    weights inside, or in a data file beside each with `external` or past protobuf's limit (graph_files.py).
    Each graph is traced from the model's first two layers of each stack and stamped to all of them
    (export/stamp.py; the whole model where it has no more, or without `stamped`). Both traces run in a child process on the second core
    (export/beside.py) while this one runs `meanwhile` (the parity checks' PyTorch side: at OPUS-MT en-de's size about
    the CPU time of the two stamped traces).

    torch.export assumes dynamic sizes are >= 2 while tracing; the graph traced at P = 3 has no
    branch on P, and parity checks run it at P = 0 and P = 1 (export/parity.py).
    """
    model = model.float().eval()
    if model.cfg.max_positions <= TRACE_SRC_LEN:
        raise ValueError(f"max_positions must be > {TRACE_SRC_LEN} to export, got {model.cfg.max_positions}")
    out_dir = Path(out_dir)
    enc_path, dec_path = out_dir / ENCODER_FILE, out_dir / DECODER_FILE

    def traces() -> None:
        _export_decoder(model, dec_path, opset, decoder_format, external=external, stamped=stamped)
        _export_encoder(model, enc_path, opset, decoder_format, external, stamped)

    with beside(traces, "the traces"):
        meanwhile()
    return enc_path, dec_path


def _export_encoder(model: Transformer, path: Path, opset: int, decoder_format: int, external: bool,
                    stamped: bool = True) -> Path:
    def one(m: Transformer, stamp_to: Optional[Callable[[Any], None]]) -> None:
        names = GraphNames.for_config(m.cfg, decoder_format)
        args, _ = trace_inputs(m.cfg, decoder_format=decoder_format)
        shapes, _ = _dynamic_shapes(m.cfg, decoder_format)
        _export_one(EncoderGraph(m), args, names.encoder_inputs, names.encoder_outputs, shapes, opset, path, stamp_to)

    _stamped_or_whole(model, stamped and (model.cfg.encoder_layers > stamp.TRACED_LAYERS or
                                          model.cfg.decoder_layers > stamp.TRACED_LAYERS),
                      one, lambda g: stamp.stamp_encoder(g, model))
    _fuse_projections(path, external)
    return path


def _stamped_or_whole(model: Transformer, worth: bool, export: Callable[[Transformer, Any], None],
                      stamp_to: Callable[[Any], None]) -> None:
    """export(model's two-layer truncation, stamp_to) where it has more layers (export/stamp.py), else (or where the
    trace is not one stamp can grow) export(model, None): the whole model traced."""
    if worth:
        try:
            export(stamp.truncated(model), stamp_to)
            return
        except stamp.NotStampable:
            pass
    export(model, None)


@torch.no_grad()
def export_fused_decoder(model: Transformer, path: Path, opset: int = DEFAULT_OPSET, external: bool = False,
                         decoder_format: int = DECODER_FORMAT) -> Path:
    """The decoder step of `decoder_format` (2 or 3; fp32) with its attention as onnxruntime's fused CPU ops (FUSED_ATTENTION_OPS),
    written to `path`: what the int8 variant is quantised from (export/commands.py; fused_decoder_from_plain writes
    the same graph without tracing, where it applies). Measured on the benchmark
    model against the plain graph (bench/ab_packages.py, same process): batch-1 greedy 1.08x int8 and 1.04x fp32,
    batch 16 beam 4 1.00x. The fp32 and fp16 variants keep the plain attention: onnxruntime's CUDA provider has
    GroupQueryAttention for float16 and bfloat16 only, and would run a float32 one on the CPU."""
    return _export_decoder(model.float().eval(), Path(path), opset, decoder_format, step_type=FusedAttentionStep,
                           external=external)


def fused_decoder_from_plain(plain: Path, path: Path, cfg: ModelConfig, external: bool = False) -> bool:
    """export_fused_decoder's graph without a second trace: the plain decoder step `plain` (formats 2, 3, as
    export_graphs wrote it) rewritten by fuse.fused_attention_from_plain into the graph tracing FusedAttentionStep
    writes, saved to `path` as save_graph does -> True; False (nothing written) where the graph is not the one the
    rewrite expects, and export_fused_decoder traces it instead."""
    graph = onnx.load(str(plain))
    try:
        fuse.fused_attention_from_plain(graph, cfg.n_heads, cfg.decoder_layers, FUSED_ATTENTION_DOMAIN)
    except ValueError:
        return False
    save_graph(graph, Path(path), external)
    return True


def _export_decoder(model: Transformer, path: Path, opset: int, decoder_format: int,
                    step_type: type = FixedCacheStep, external: bool = False, stamped: bool = True) -> Path:
    def one(m: Transformer, stamp_to: Optional[Callable[[Any], None]]) -> None:
        names = GraphNames.for_config(m.cfg, decoder_format)
        _, args = trace_inputs(m.cfg, decoder_format=decoder_format)
        _, shapes = _dynamic_shapes(m.cfg, decoder_format)
        graph = STEP_GRAPHS[decoder_format](m, step_type) if decoder_format >= 2 else STEP_GRAPHS[1](m)
        _export_one(graph, args, names.decoder_inputs, names.decoder_outputs, shapes, opset, path, stamp_to)

    _stamped_or_whole(model, stamped and model.cfg.decoder_layers > stamp.TRACED_LAYERS, one,
                      lambda g: stamp.stamp_decoder(g, model, decoder_format))
    _fuse_projections(path, external)
    return path


def _fuse_projections(path: Path, external: bool = False) -> None:
    """Sibling projections as one MatMul, and GroupQueryAttention on its packed QKV (export/fuse.py), in place;
    the graph written again as graph_files.save_graph does when it changed or has its weights outside. Only the
    weights fuse can join are read into memory (what a MatMul or an Add reads); the others (the embedding table,
    the positions) stay in the traced data file, from which save_graph copies them."""
    graph = onnx.load(str(path), load_external_data=False)
    fusable = _fusable(graph)
    aside = [t for t in graph.graph.initializer if t.name not in fusable]         # references only: no bytes yet
    keep = [t for t in graph.graph.initializer if t.name in fusable]
    del graph.graph.initializer[:]
    graph.graph.initializer.extend(keep)
    onnx.load_external_data_for_model(graph, str(path.parent))
    changed = fuse.fuse_sibling_projections(graph)
    changed += fuse.pack_attention_qkv(graph)
    graph.graph.initializer.extend(aside)
    if changed or external or data_file(path).exists():
        save_graph(graph, path, external)


def _fusable(graph: onnx.ModelProto) -> set:
    """The names of the initializers fuse.fuse_sibling_projections may join: a MatMul's weight, an Add's bias."""
    return {name for node in graph.graph.node if node.op_type in ("MatMul", "Add") for name in node.input}


# --- static checks of a written graph ------------------------------------------------------------------
def check_graph(path: Path, expected_inputs: List[str], expected_outputs: List[str]) -> None:
    """onnx.checker, the I/O names in order, no forbidden op, every float constant finite.
    Raises ValueError naming the problem."""
    model = onnx.load(str(path), load_external_data=False)  # the weights are read one at a time, below
    onnx.checker.check_model(str(path), full_check=True)     # by path: a model past 2 GB has its weights outside
    inputs = [i.name for i in model.graph.input]
    outputs = [o.name for o in model.graph.output]
    if inputs != expected_inputs or outputs != expected_outputs:
        raise ValueError(f"{path.name}: graph I/O {inputs} -> {outputs}, expected {expected_inputs} -> "
                         f"{expected_outputs}")
    bad = sorted({n.op_type for n in model.graph.node if n.op_type in FORBIDDEN_OPS
                  and not (n.domain == FUSED_ATTENTION_DOMAIN and n.op_type in FUSED_ATTENTION_OPS)})
    if bad:
        raise ValueError(f"{path.name}: unexpected ops {bad} (the plain attention equation, or onnxruntime's fused "
                         f"attention ops {', '.join(FUSED_ATTENTION_OPS)}, was expected)")
    dtypes = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
              onnx.TensorProto.DOUBLE: np.float64}
    for tensor in _constant_tensors(model):
        if tensor.data_type in dtypes:
            pieces = ((np.frombuffer(piece, dtypes[tensor.data_type])           # one piece in memory at a time
                       for piece in tensor_chunks(tensor, path.parent, FINITE_CHUNK))
                      if tensor.HasField("raw_data") or tensor.data_location == onnx.TensorProto.EXTERNAL
                      else iter([onnx.numpy_helper.to_array(tensor)]))
            if not all(np.isfinite(piece).all() for piece in pieces):
                raise ValueError(f"{path.name}: constant {tensor.name!r} holds inf/NaN (masks must be finite)")


def _constant_tensors(model: onnx.ModelProto):
    yield from model.graph.initializer
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.TENSOR:
                    yield attr.t


def graph_io(path: Path) -> Dict[str, List[Dict[str, Any]]]:
    """{"inputs": [{"name", "dtype", "shape"}], "outputs": [...]} of a graph, as the manifest lists them.
    A dynamic axis is its name ("batch", "src_len", "past_len", "past_len + 1"), a fixed one an int."""
    model = onnx.load(str(path), load_external_data=False)

    def describe(value: onnx.ValueInfoProto) -> Dict[str, Any]:
        t = value.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name
        shape = [d.dim_param if d.dim_param else d.dim_value for d in t.shape.dim]
        return {"name": value.name, "dtype": dtype, "shape": shape}

    return {"inputs": [describe(v) for v in model.graph.input],
            "outputs": [describe(v) for v in model.graph.output]}


def opset_and_ir(path: Path) -> Tuple[int, int]:
    model = onnx.load(str(path), load_external_data=False)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    return opset, model.ir_version

