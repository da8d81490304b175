"""Parity: do the ONNX graphs compute what the PyTorch model computes? Checked before a package is written.

On a fixed set of inputs (`parity_batches`) this compares, ONNX on the CPU provider (or another) against
the PyTorch model. The set: real source sentences when the user gives some (`seq2onnx export
--parity-data FILE`: batches of 1, 3, 4 and 8 of its first 16 lines), and always synthetic sources of
random pieces (fixed seed) in batches of 1, 3 and 4, right-padded, 1 to 64 tokens, plus a left-padded batch:
  * encoder: every cross_key_i / cross_value_i                      -> encoder_max_abs_diff
  * decoder: log_probs and present caches over STEPS chained steps   -> decoder_max_abs_diff, cache_max_abs_diff
    (past lengths 0 .. STEPS-1), each step fed the reference's argmax token (top1_agreement: the share of
    steps whose argmax agrees); then BEAM_STEPS chained steps shaped as beam search, BEAM_SIZE rows per
    sentence fed different tokens, the ONNX graph given one cross K/V and mask per sentence and PyTorch
    a copy per row (an independent computation of the same numbers)   -> the same two figures;
    and where the graph takes a past_length per row (contract 3), RAGGED_STEPS chained steps whose rows stand
    at different lengths (row r joins at step r % RAGGED_SPREAD, at length 0 until then, as a server adds
    sentences to a running batch), against training/model.py decode_step_fixed at the same lengths
    (tests/export/test_row_lengths.py checks that against decode_step per row)  -> the same two figures
  * decoding: greedy and beam-4 (4 hypotheses) by the runtime's own decoding loop (runtime/decode/decoding.py,
    over an engine on the graphs just written) versus training/reference.py's greedy_search / beam_search,
    the independent PyTorch oracle                                      -> greedy_token_match, beam4_token_match

Thresholds. fp32: every diff <= FP32_TOLERANCE (caches: FP32_CACHE_TOLERANCE; where the model's own float32 noise
is larger, NOISE_FACTOR times it: `float32_noise`, `check_fp32`) and identical tokens; a diff is
|onnx - torch| / max(1, |torch|) elementwise (absolute below 1, relative above: `_max_diff`). Reduced precision
(int8, fp16): top1_agreement >= MIN_TOP1_AGREEMENT and greedy_token_match >= MIN_GREEDY_TOKEN_MATCH.
greedy_token_match compares position by position, so after a first differing token the rest of that
sentence counts as misses: one near-tie flipped in one of the 8 synthetic sentences (random pieces are
far from what a model was trained on, its top two tokens are often close) costs up to 1/8. Measured on
the trained tiny test model: int8 per-channel gives top-1 0.996 and greedy 0.949 on the synthetic
sources alone, 0.997 and 1.0 on 16 real sentences. 0.90 allows about one diverging synthetic sentence.
A failed check raises ParityError naming the check and the figure.

The PyTorch side of a batch depends on the model and the batch only (both sides are fed the PyTorch tokens), so it is
computed once and kept on the batch (`Reference`): an export's fp32, fused-attention and int8 graphs are measured
against the same numbers without recomputing them (at the size of OPUS-MT en-de it was 3/4 of a measure's time).
Every compared step's log-probs [rows, V] and caches are kept in a temporary file (`Spilled`), not in memory: ~320 MB
at OPUS-MT en-de's size (vocab 58,101, 6 decoder layers) with the synthetic batches alone, ~1 GB at NLLB-200's.

A decoding rule lives in runtime/decode/decoding.py alone; this check runs it, so a package that passes was
decoded by the code users will run.
"""
from __future__ import annotations

import math
import os
import tempfile
import threading
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnxruntime as ort
import torch

from seq2onnx.runtime.decode.decoding import decode
from seq2onnx.runtime.decode.search import Hypothesis
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.engine.cuda import IoBindingEngine
from seq2onnx.runtime.engine.cpu import ArrayEngine
from seq2onnx.runtime.engine.session import cache_dtype, graph_format
from seq2onnx.training.model import Transformer
from seq2onnx.training.reference import beam_search, greedy_search, pad_batch

from .onnx_export import GraphNames

FP32_TOLERANCE = 1e-4          # max diff (_max_diff) of encoder outputs and log-probs at fp32
# ... and of the present caches. Each chained ONNX step reads the caches the ONNX step before wrote, so
# float32 rounding drifts along the chain: numbers-en-de averaged over 5 checkpoints reached 3.9e-4 on one
# cache element after 24 steps of a synthetic source while every log-prob stayed within 1.1e-5 and every
# token matched. A wrong cache shows in the next steps' log-probs, which the 1e-4 above already checks.
FP32_CACHE_TOLERANCE = 1e-3
# A model whose float32 arithmetic is itself noisier than FP32_TOLERANCE (wide layers, large activations: NLLB-200's
# shape) gets a tolerance from its own noise instead: NOISE_FACTOR times float32_noise's figures (`check_fp32`).
NOISE_FACTOR = 2.0
MIN_TOP1_AGREEMENT = 0.98      # reduced precision: share of steps whose argmax token agrees
MIN_GREEDY_TOKEN_MATCH = 0.90  # reduced precision: share of greedy token positions that agree
STEPS = 24                     # chained decoder steps compared (past lengths 0 .. STEPS-1)
BEAM_STEPS = 4                 # chained decoder steps compared with BEAM_SIZE rows per sentence
MAX_LENGTH = 24                # max_length of the greedy / beam comparisons
BEAM_SIZE = 4
SPARE_CAPACITY = 3             # format 2 graph checks: cache positions after the written ones, filled with noise
RAGGED_SPREAD = 3              # contract 3: rows join at steps 0 .. RAGGED_SPREAD-1, so their past_length differ
RAGGED_STEPS = BEAM_STEPS + RAGGED_SPREAD


class ParityError(Seq2OnnxError):
    """An exported graph does not compute what the checkpoint computes."""


@dataclass
class ParityReport:
    """Figures of one variant (all vs the PyTorch fp32 model); written into the manifest."""
    provider: str
    encoder_max_abs_diff: float
    decoder_max_abs_diff: float        # log_probs
    cache_max_abs_diff: float          # present_key_i / present_value_i
    top1_agreement: float              # share of (row, step) whose argmax token agrees
    greedy_token_match: float          # share of greedy token positions (EOS included) that agree
    greedy_sentence_match: float       # share of sentences with identical greedy tokens
    beam4_token_match: float           # share of beam-4 hypotheses (4 per sentence) with identical tokens
    beam4_score_max_abs_diff: float    # of the hypotheses' scores
    sentences: int                     # decoded: all but the left-padded batch
    real_sentences: int                # of those, from --parity-data
    batch_sizes: List[int] = field(default_factory=list)
    src_lengths: List[int] = field(default_factory=list)
    past_lengths: List[int] = field(default_factory=list)   # [min, max] compared
    encoder_tolerance: float = FP32_TOLERANCE    # what check_fp32 allowed encoder_max_abs_diff
    decoder_tolerance: float = FP32_TOLERANCE    # ... and decoder_max_abs_diff (the log-probs)

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


# --- the fixed parity inputs ---------------------------------------------------------------------
@dataclass
class ParityBatch:
    sources: List[List[int]]     # id lists ending with EOS
    left_pad: bool = False       # pad on the left (graph-level comparison only; decoding pads right)
    real: bool = False           # from --parity-data (else synthetic)
    reference: Optional["Reference"] = field(default=None, repr=False, compare=False)   # the PyTorch side, once


REAL_BATCH_SIZES = (1, 3, 4, 8)


def parity_batches(cfg, real: Sequence[Sequence[int]] = ()) -> List[ParityBatch]:
    """Real sources (id lists ending with EOS) in batches of REAL_BATCH_SIZES, then synthetic ones:
    batch sizes 1, 3, 4 and a left-padded batch of 3; sources of 1 to 64 tokens incl. EOS."""
    batches, start = [], 0
    for size in REAL_BATCH_SIZES:
        if start < len(real):
            batches.append(ParityBatch([list(s) for s in real[start:start + size]], real=True))
        start += size
    rng = np.random.default_rng(1234)
    special = {cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id}
    words = [i for i in range(cfg.source_vocab_size) if i not in special] or [cfg.unk_id]
    longest = max(1, min(64, cfg.max_positions))

    def source(length: int) -> List[int]:
        length = max(1, min(length, longest))
        return [int(x) for x in rng.choice(words, size=length - 1)] + [cfg.eos_id]

    return batches + [ParityBatch([source(1)]),
                      ParityBatch([source(2), source(9), source(31)]),
                      ParityBatch([source(5), source(5), source(17), source(64)]),
                      ParityBatch([source(3), source(12), source(7)], left_pad=True)]


def batch_arrays(batch: ParityBatch, pad_id: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """-> ids, mask [B, S] int64 (right-padded, or left-padded when batch.left_pad)."""
    if not batch.left_pad:
        return pad_batch(batch.sources, pad_id)
    ids, mask = pad_batch([list(reversed(s)) for s in batch.sources], pad_id)
    return ids.flip(1), mask.flip(1)


def session_options() -> ort.SessionOptions:
    """One thread that does not spin: the checks alternate onnxruntime and torch calls, and spinning
    onnxruntime workers would take the cores torch needs (it slows the checks down many times)."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


# --- the ONNX pair ---------------------------------------------------------------------------------
class OnnxPair:
    """encoder + decoder_step sessions; arrays in, arrays out (numpy).

    cross_per_sentence: the decoder step takes cross K/V and encoder mask once per sentence (the graphs
    this exporter writes); False for graphs of the earlier contract, which need a copy per row.
    The decoder step's contract (format 1 or 2, graph_io.py) is read from the graph's inputs."""

    def __init__(self, encoder: Path, decoder: Path, cfg, provider: str = "CPUExecutionProvider",
                 cross_per_sentence: bool = True, options: Optional[Callable[[Path], ort.SessionOptions]] = None):
        self.cfg = cfg
        self.cross_per_sentence = cross_per_sentence
        opts = options or (lambda graph: session_options())     # options(graph path): export/commands.py TorchWeights
        self.decoder_path = decoder
        self.encoder = ort.InferenceSession(str(encoder), opts(encoder), providers=[provider])
        self.decoder = ort.InferenceSession(str(decoder), opts(decoder), providers=[provider])
        self.provider = self.decoder.get_providers()[0]
        self.decoder_format = graph_format(self.decoder)
        self.names = GraphNames.for_config(cfg, self.decoder_format)

    def encode(self, ids: np.ndarray, mask: np.ndarray) -> List[np.ndarray]:
        """ids, mask [B, S] int64 -> cross caches, 2L x [B, H, S, Dh] (key_0, value_0, ...)"""
        return self.encoder.run(self.names.encoder_outputs, {"input_ids": ids, "attention_mask": mask})

    def step(self, tokens: np.ndarray, mask: np.ndarray, past: List[np.ndarray],
             cross: List[np.ndarray]) -> Tuple[np.ndarray, List[np.ndarray]]:
        """tokens [R, 1], mask [B, S], past 2L x [R, H, P, Dh], cross 2L x [B, H, S, Dh]
        -> log_probs [R, V], present 2L x [R, H, P+1, Dh]   (R = B, or R = B x G with cross_per_sentence)

        Format 2: the past goes in at the start of a cache of P + 1 + SPARE_CAPACITY positions whose other
        positions hold noise, which the graph must ignore; present is the written part of its output."""
        if self.decoder_format == 1:
            feed = dict(zip(self.names.decoder_inputs, [tokens, mask] + list(past) + list(cross)))
            out = self.decoder.run(self.names.decoder_outputs, feed)
            return out[0], out[1:]
        p = past[0].shape[2]
        rng = np.random.default_rng(p)
        caches = []
        for x in past:
            cache = rng.standard_normal((*x.shape[:2], p + 1 + SPARE_CAPACITY, x.shape[3])).astype(x.dtype)
            cache[:, :, :p] = x
            caches.append(cache)
        log_probs, present = self.step_fixed(tokens, mask, np.full(tokens.shape[0], p, dtype=np.int64), caches, cross)
        return log_probs, [c[:, :, :p + 1] for c in present]

    def step_fixed(self, tokens: np.ndarray, mask: np.ndarray, lengths: np.ndarray, caches: List[np.ndarray],
                   cross: List[np.ndarray]) -> Tuple[np.ndarray, List[np.ndarray]]:
        """Formats 2, 3: tokens [R, 1], lengths int64 [R] (format 2: all alike, fed as one 0-d past_length), caches
        2L x [R, H, C, Dh] -> log_probs [R, V], present 2L x [R, H, C, Dh]."""
        past_length = lengths if self.decoder_format >= 3 else np.array(lengths[0], dtype=np.int64)
        feed = dict(zip(self.names.decoder_inputs, [tokens, mask, past_length] + list(caches) + list(cross)))
        out = self.decoder.run(self.names.decoder_outputs[:-1], feed)
        return out[0], out[1:]

    def empty_cache(self, batch: int) -> List[np.ndarray]:
        """In the dtype of the graph's past inputs (float16 in the fp16 variant)."""
        shape = (batch, self.cfg.n_heads, 0, self.cfg.head_dim)
        return [np.zeros(shape, cache_dtype(self.decoder, self.cfg)) for _ in range(2 * self.cfg.decoder_layers)]


# --- decoding over the ONNX pair: the runtime's own loop (runtime/decode/decoding.py) ---------------------------
def _engine(pair: OnnxPair):
    """The runtime's engine over the pair's sessions: what `Translator` decodes with, minus the package.
    ArrayEngine (CPU, float32 caches) where it can; else the IO-binding engine, which takes any cache dtype
    (an fp16 variant checked on the CPU provider) and any device."""
    path = str(pair.decoder_path)
    if pair.provider == "CUDAExecutionProvider" or cache_dtype(pair.decoder, pair.cfg) != np.float32:
        device = "cuda" if pair.provider == "CUDAExecutionProvider" else "cpu"
        return IoBindingEngine(pair.encoder, pair.decoder, pair.cfg, device, 0, pair.decoder.get_providers(),
                               pair.cross_per_sentence, path)
    return ArrayEngine(pair.encoder, pair.decoder, pair.cfg, pair.cross_per_sentence, path)


def onnx_decode(pair: OnnxPair, sources: Sequence[Sequence[int]], beam_size: int = BEAM_SIZE,
                num_hypotheses: int = BEAM_SIZE, length_penalty: float = 1.0, max_length: int = MAX_LENGTH,
                min_length: int = 0, strategy: Optional[str] = None) -> List[List[Hypothesis]]:
    """runtime.decoding.decode over the pair with the reference's options: `max_length` steps and nothing
    relative to the source (max_length_a 0, max_length_b None); per source, the best `num_hypotheses`."""
    options = DecodingOptions(beam_size=beam_size, num_hypotheses=num_hypotheses, length_penalty=length_penalty,
                              max_decoding_length=max_length, min_decoding_length=min_length,
                              max_length_a=0.0, max_length_b=None)
    return decode(_engine(pair), pair.cfg, [list(s) for s in sources], options, strategy=strategy)


def onnx_greedy(pair: OnnxPair, sources: Sequence[Sequence[int]], max_length: int = MAX_LENGTH,
                min_length: int = 0, length_penalty: float = 1.0) -> List[Hypothesis]:
    return [hyps[0] for hyps in onnx_decode(pair, sources, 1, 1, length_penalty, max_length, min_length)]


def onnx_beam(pair: OnnxPair, sources: Sequence[Sequence[int]], beam_size: int = BEAM_SIZE,
              num_hypotheses: int = BEAM_SIZE, length_penalty: float = 1.0, max_length: int = MAX_LENGTH,
              min_length: int = 0) -> List[List[Hypothesis]]:
    """Beam search, also for beam_size 1 (the reference's beam_search(beam_size=1))."""
    return onnx_decode(pair, sources, beam_size, num_hypotheses, length_penalty, max_length, min_length, "beam")


# --- comparisons -----------------------------------------------------------------------------------
def _max_diff(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """max over elements of |onnx - torch| / max(1, |torch|): absolute below 1, relative above (numpy's
    allclose with rtol = atol). A cache value near 16 has float32 steps of 2e-6, and a few steps of
    differently fused arithmetic move it by 1e-4 without anything being wrong."""
    return max((float((np.abs(x - y) / np.maximum(1.0, np.abs(y))).max()) if x.size else 0.0)
               for x, y in zip(a, b))


def _flat(kvs) -> List[np.ndarray]:
    return [t.numpy() for kv in kvs for t in kv]


# --- the PyTorch side, computed once per batch --------------------------------------------------------
class Spilled:
    """A list of arrays (or of lists of arrays) kept in an unnamed temporary file instead of memory: `append` writes
    one item, reading an item (index or iteration) reads it back. The reference's log-probs and caches are the
    largest part of it (~1 GB at NLLB-200's vocabulary of 256,206): on disk, a check holds one step's at a time."""

    def __init__(self) -> None:
        self.file: Optional[BinaryIO] = None
        self.items: List[List[Tuple[int, np.dtype, Tuple[int, ...]]]] = []
        self.single: List[bool] = []

    def append(self, item) -> None:
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="seq2onnx-parity-")
        self.file.seek(0, os.SEEK_END)
        arrays = [item] if isinstance(item, np.ndarray) else list(item)
        entry = []
        for a in arrays:
            a = np.ascontiguousarray(a)
            entry.append((self.file.tell(), a.dtype, a.shape))
            self.file.write(a.data)
        self.file.flush()                     # __getitem__ reads the file, not this object's buffer
        self.items.append(entry)
        self.single.append(isinstance(item, np.ndarray))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int):
        # positioned reads (no shared file offset): checks of two graphs read the same reference from two threads
        arrays = []
        for offset, dtype, shape in self.items[i]:
            array = np.empty(shape, dtype)
            view, done = memoryview(array.reshape(-1).view(np.uint8)), 0
            while done < array.nbytes:
                got = os.preadv(self.file.fileno(), [view[done:]], offset + done)
                if got <= 0:
                    raise EOFError(f"parity reference file: {array.nbytes - done} bytes missing")
                done += got
            arrays.append(array)
        return arrays[0] if self.single[i] else arrays

    def __iter__(self):
        return (self[i] for i in range(len(self)))


@dataclass
class Chain:
    """A run of chained decoder steps on the PyTorch side: per step the tokens fed in [R, 1], the rows' past lengths
    (ragged steps only), the log-probs [R, V] and the present caches (2L arrays), those two on disk (Spilled)."""
    tokens: List[np.ndarray] = field(default_factory=list)
    lengths: List[np.ndarray] = field(default_factory=list)
    log_probs: Spilled = field(default_factory=Spilled)
    caches: Spilled = field(default_factory=Spilled)


@dataclass
class Reference:
    """What the PyTorch model computes on one parity batch (none of it depends on the ONNX side: both sides are fed
    the PyTorch tokens), kept on the batch so that every graph measured against the same model and batches (fp32, the
    int8 variant's fused fp32 trace, int8, its few-rows step) reuses it: the same numbers as computing them again,
    without the PyTorch time (3/4 of a measure at OPUS-MT's size). `model` is the model it was computed from and
    `versions` its tensors' in-place modification counters: a changed model gets a new reference."""
    model: int
    versions: Tuple[int, ...]
    mask: np.ndarray
    cross: List[np.ndarray]                       # encoder: cross K/V, 2L x [B, H, S, Dh]
    chain: Chain                                  # STEPS steps, one row per sentence, fed the argmax
    beam: Chain                                   # BEAM_STEPS steps, BEAM_SIZE rows per sentence
    cross_kv: Optional[list] = None               # the same as torch tensors, for the ragged steps
    ragged: Optional[Chain] = None                # contract 3: RAGGED_STEPS steps at unequal lengths (on first use)
    ragged_noise: List[np.ndarray] = field(default_factory=list)
    greedy: Optional[List[Hypothesis]] = None     # training/reference.py's greedy_search (not for a left-padded batch)
    beam4: Optional[List[List[Hypothesis]]] = None


def _versions(model: Transformer) -> Tuple[int, ...]:
    return tuple(t._version for t in (*model.parameters(), *model.buffers()))


@torch.no_grad()
def reference(model: Transformer, batch: ParityBatch, ragged: bool = False, steps: int = STEPS) -> Reference:
    """The batch's Reference for `model` (and its ragged steps when `ragged`), computed on first use."""
    ref = batch.reference
    if ref is None or ref.model != id(model) or ref.versions != _versions(model) or len(ref.chain.log_probs) != min(
            steps, model.cfg.max_positions):
        ids, mask = batch_arrays(batch, model.cfg.pad_id)
        cross = model.cross_kv(model.encode(ids, mask))
        ref = Reference(id(model), _versions(model), mask.numpy(), _flat(cross),
                        _reference_chain(model, mask, cross, steps), _reference_beam(model, mask, cross), cross)
        if not batch.left_pad:                       # decoding pads right, as the contract says
            ref.greedy = greedy_search(model, batch.sources, max_length=MAX_LENGTH)
            ref.beam4 = beam_search(model, batch.sources, beam_size=BEAM_SIZE, num_hypotheses=BEAM_SIZE,
                                    max_length=MAX_LENGTH)
        batch.reference = ref
    if ragged and ref.ragged is None:
        ref.ragged, ref.ragged_noise = _reference_ragged(model, torch.from_numpy(ref.mask), ref.cross_kv)
    return ref


def _reference_chain(model: Transformer, mask: torch.Tensor, cross, steps: int) -> Chain:
    """`steps` chained decoder steps, each fed the argmax of the previous log-probs (PAD and BOS excluded)."""
    cfg = model.cfg
    b = mask.shape[0]
    past = model.empty_cache(b)
    tokens = torch.full((b, 1), cfg.start_id, dtype=torch.long)
    chain = Chain()
    for _ in range(min(steps, cfg.max_positions)):
        logp, past = model.decode_step(tokens, mask, past, cross)
        chain.tokens.append(tokens.numpy())
        chain.log_probs.append(logp.numpy())
        chain.caches.append(_flat(past))
        forbidden = logp.clone()
        forbidden[:, [cfg.pad_id, cfg.bos_id]] = -math.inf
        tokens = forbidden.argmax(dim=-1)[:, None]
    chain.tokens.append(tokens.numpy())             # the last step's argmax: what the last comparison agrees with
    return chain


def _reference_beam(model: Transformer, mask: torch.Tensor, cross, g: int = BEAM_SIZE,
                    steps: int = BEAM_STEPS) -> Chain:
    """`steps` chained decoder steps with g rows per sentence (row = sentence * g + j), as beam search runs them:
    row j is fed the j-th best token of its own previous log-probs, so the rows differ; the cross K/V and mask copied
    to every row (an independent computation of what the ONNX graph gets once per sentence)."""
    cfg = model.cfg
    b = mask.shape[0]
    rows_cross = [(k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)) for k, v in cross]
    rows_mask = mask.repeat_interleave(g, 0)
    past = model.empty_cache(b * g)
    tokens = torch.full((b * g, 1), cfg.start_id, dtype=torch.long)
    chain = Chain()
    for _ in range(min(steps, cfg.max_positions)):
        logp, past = model.decode_step(tokens, rows_mask, past, rows_cross)
        chain.tokens.append(tokens.numpy())
        chain.log_probs.append(logp.numpy())
        chain.caches.append(_flat(past))
        ranked = logp.clone()
        ranked[:, [cfg.pad_id, cfg.bos_id]] = -math.inf
        order = ranked.argsort(dim=-1, descending=True, stable=True)              # [R, V]
        tokens = order.gather(1, (torch.arange(b * g) % g)[:, None] % order.shape[1])
    return chain


def _reference_ragged(model: Transformer, mask: torch.Tensor, cross, g: int = BEAM_SIZE,
                      steps: int = RAGGED_STEPS) -> Tuple[Chain, List[np.ndarray]]:
    """Contract 3: `steps` chained steps over g rows per sentence whose past_length differ: row r stays at length 0
    (fed the start token) until step r % RAGGED_SPREAD, then each step writes its next position, fed the argmax of
    its own previous log-probs; decode_step_fixed over a cache of noise -> (the chain, the noise: 2L x [R, H, C, Dh])."""
    cfg = model.cfg
    rows = mask.shape[0] * g
    capacity = min(steps, cfg.max_positions)
    rng = np.random.default_rng(capacity)
    noise = [rng.standard_normal((rows, cfg.n_heads, capacity, cfg.head_dim)).astype(np.float32)
             for _ in range(2 * cfg.decoder_layers)]
    cache = [(torch.from_numpy(noise[2 * i].copy()), torch.from_numpy(noise[2 * i + 1].copy()))
             for i in range(cfg.decoder_layers)]
    joins = np.arange(rows) % RAGGED_SPREAD                                        # [R]: the step each row joins at
    tokens = torch.full((rows, 1), cfg.start_id, dtype=torch.long)
    chain = Chain()
    for t in range(capacity):
        lengths = np.maximum(0, t - joins).astype(np.int64)                        # [R], unequal from step 1 on
        logp, cache, _ = model.decode_step_fixed(tokens, mask, torch.from_numpy(lengths), cache, cross)
        chain.tokens.append(tokens.numpy())
        chain.lengths.append(lengths)
        chain.log_probs.append(logp.numpy())
        chain.caches.append(_flat(cache))
        ranked = logp.clone()
        ranked[:, [cfg.pad_id, cfg.bos_id]] = -math.inf
        tokens = torch.where(torch.from_numpy(t + 1 > joins)[:, None], ranked.argmax(dim=-1, keepdim=True),
                             torch.full_like(tokens, cfg.start_id))
    return chain, noise


# --- the ONNX side against it --------------------------------------------------------------------------
def compare_graphs(model: Transformer, pair: OnnxPair, batch: ParityBatch,
                   steps: int = STEPS) -> Tuple[float, float, float, int, int]:
    """Encoder outputs, then `steps` chained decoder steps (each side feeds back its own cache; both are
    fed the PyTorch argmax token). -> (encoder diff, log-prob diff, cache diff, agreeing argmax, steps*B)"""
    cfg = model.cfg
    ref = reference(model, batch, pair.decoder_format >= 3, steps)
    ids, mask = batch_arrays(batch, cfg.pad_id)
    onnx_cross = pair.encode(ids.numpy(), mask.numpy())
    enc_diff = _max_diff(onnx_cross, ref.cross)
    b = ids.shape[0]
    onnx_past = pair.empty_cache(b)
    logp_diff = cache_diff = 0.0
    agree = 0
    chain = ref.chain
    for t, (tokens, logp, past) in enumerate(zip(chain.tokens, chain.log_probs, chain.caches)):
        onnx_logp, onnx_past = pair.step(tokens, ref.mask, onnx_past, onnx_cross)
        logp_diff = max(logp_diff, _max_diff([onnx_logp], [logp]))
        cache_diff = max(cache_diff, _max_diff(onnx_past, past))
        onnx_masked = onnx_logp.copy()
        onnx_masked[:, [cfg.pad_id, cfg.bos_id]] = -np.inf
        agree += int((onnx_masked.argmax(axis=-1) == chain.tokens[t + 1][:, 0]).sum())
    beam_logp_diff, beam_cache_diff = compare_beam_steps(pair, ref, onnx_cross)
    logp_diff, cache_diff = max(logp_diff, beam_logp_diff), max(cache_diff, beam_cache_diff)
    if pair.decoder_format >= 3:
        ragged_logp_diff, ragged_cache_diff = compare_ragged_steps(pair, ref, onnx_cross)
        logp_diff, cache_diff = max(logp_diff, ragged_logp_diff), max(cache_diff, ragged_cache_diff)
    return enc_diff, logp_diff, cache_diff, agree, b * len(chain.log_probs)


def compare_beam_steps(pair: OnnxPair, ref: Reference, onnx_cross: List[np.ndarray],
                       g: int = BEAM_SIZE) -> Tuple[float, float]:
    """The reference's beam steps (_reference_beam) on the ONNX pair: one cross K/V and mask per sentence when the
    graph takes them so. -> (max diff of log-probs, of present caches; `_max_diff`)"""
    b = ref.mask.shape[0]
    onnx_mask, onnx_cross_in = ref.mask, onnx_cross
    if not pair.cross_per_sentence:
        onnx_mask, onnx_cross_in = np.repeat(ref.mask, g, axis=0), [np.repeat(c, g, axis=0) for c in onnx_cross]
    onnx_past = pair.empty_cache(b * g)
    logp_diff = cache_diff = 0.0
    for tokens, logp, past in zip(ref.beam.tokens, ref.beam.log_probs, ref.beam.caches):
        onnx_logp, onnx_past = pair.step(tokens, onnx_mask, onnx_past, onnx_cross_in)
        logp_diff = max(logp_diff, _max_diff([onnx_logp], [logp]))
        cache_diff = max(cache_diff, _max_diff(onnx_past, past))
    return logp_diff, cache_diff


def compare_ragged_steps(pair: OnnxPair, ref: Reference, onnx_cross: List[np.ndarray],
                         g: int = BEAM_SIZE) -> Tuple[float, float]:
    """Contract 3: the reference's ragged steps (_reference_ragged) on the ONNX pair, from the same noise; each side
    feeds back its own cache. -> (max diff of log-probs, of each row's written cache positions; `_max_diff`)"""
    onnx_mask, onnx_cross_in = ref.mask, onnx_cross
    if not pair.cross_per_sentence:
        onnx_mask, onnx_cross_in = np.repeat(onnx_mask, g, axis=0), [np.repeat(c, g, axis=0) for c in onnx_cross]
    dtype = cache_dtype(pair.decoder, pair.cfg)
    onnx_cache = [n.astype(dtype) for n in ref.ragged_noise]                       # 2L x [R, H, C, Dh]
    logp_diff = cache_diff = 0.0
    chain = ref.ragged
    for tokens, lengths, logp, cache in zip(chain.tokens, chain.lengths, chain.log_probs, chain.caches):
        onnx_logp, onnx_cache = pair.step_fixed(tokens, onnx_mask, lengths, onnx_cache, onnx_cross_in)
        logp_diff = max(logp_diff, _max_diff([onnx_logp], [logp]))
        written = [(r, slice(0, int(n) + 1)) for r, n in enumerate(lengths)]    # row r: positions 0 .. lengths[r]
        cache_diff = max(cache_diff, max(_max_diff([o[r, :, w] for r, w in written], [c[r, :, w] for r, w in written])
                                         for o, c in zip(onnx_cache, cache)))
    return logp_diff, cache_diff


def _token_match(a: List[int], b: List[int]) -> Tuple[int, int]:
    """Position-wise agreement of two token lists -> (agreeing positions, positions of the longer)."""
    return sum(x == y for x, y in zip(a, b)), max(len(a), len(b))


_ONE_THREAD = threading.Lock()
_one_thread_users: List[int] = []       # the torch thread count before the first user, once per user


@contextmanager
def one_torch_thread():
    """The checks run many tiny ops: with several OpenMP threads on a busy machine torch spends its time
    waiting for them (measured 15x slower on 2 shared cores). Checks run side by side on threads: the count
    torch had is restored when the last of them ends."""
    with _ONE_THREAD:
        _one_thread_users.append(_one_thread_users[0] if _one_thread_users else torch.get_num_threads())
        torch.set_num_threads(1)
    try:
        yield
    finally:
        with _ONE_THREAD:
            before = _one_thread_users.pop()
            if not _one_thread_users:
                torch.set_num_threads(before)


def compute_references(model: Transformer, batches: List[ParityBatch], decoder_format: int) -> None:
    """Each batch's Reference, computed now (measure's first call would): what the PyTorch side of every check of
    graphs of `decoder_format` reads."""
    with one_torch_thread():
        for batch in batches:
            reference(model, batch, decoder_format >= 3)


def measure(model: Transformer, pair: OnnxPair, batches: Optional[List[ParityBatch]] = None) -> ParityReport:
    """All figures of one ONNX pair against the PyTorch model (no thresholds applied)."""
    batches = batches if batches is not None else parity_batches(model.cfg)
    return _report(model, pair, batches, [_measure_batch(model, pair, batch) for batch in batches])


def measure_on(pool: Executor, model: Transformer, pair: OnnxPair,
               batches: List[ParityBatch]) -> Callable[[], ParityReport]:
    """measure's figures, each batch a job of `pool` (onnxruntime and numpy release the interpreter: checks of several
    graphs spread over the cores) -> a function that waits for the jobs and returns the report. Compute the batches'
    references first (compute_references), or two graphs' jobs of one batch would each compute it."""
    jobs = [pool.submit(_measure_batch, model, pair, batch) for batch in batches]
    return lambda: _report(model, pair, batches, [job.result() for job in jobs])


@dataclass
class _Tally:
    """One batch's figures, before they are summed over batches into a ParityReport."""
    enc: float = 0.0
    dec: float = 0.0
    cache: float = 0.0
    agree: int = 0
    total: int = 0
    greedy_hits: int = 0
    greedy_positions: int = 0
    greedy_same: int = 0
    beam_same: int = 0
    beam_total: int = 0
    beam_score_diff: float = 0.0


def _measure_batch(model: Transformer, pair: OnnxPair, batch: ParityBatch) -> _Tally:
    cfg = model.cfg
    with one_torch_thread():
        enc, dec, cache, agree, total = compare_graphs(model, pair, batch)
        tally = _Tally(enc, dec, cache, agree, total)
        if batch.left_pad:
            return tally                                # decoding pads right, as the contract says
        expected = reference(model, batch)
        for ref, got in zip(expected.greedy, onnx_greedy(pair, batch.sources)):
            ref_ids, got_ids = ref.tokens + [cfg.eos_id] * ref.finished, got.tokens + [cfg.eos_id] * got.finished
            hits, n = _token_match(ref_ids, got_ids)
            tally.greedy_hits += hits
            tally.greedy_positions += n
            tally.greedy_same += ref_ids == got_ids
        for ref_hyps, got_hyps in zip(expected.beam4, onnx_beam(pair, batch.sources)):
            for r, g in zip(ref_hyps, got_hyps):
                tally.beam_same += r.tokens == g.tokens
                if r.tokens == g.tokens:
                    tally.beam_score_diff = max(tally.beam_score_diff, abs(r.score - g.score))
            tally.beam_total += max(len(ref_hyps), len(got_hyps))
    return tally


def _report(model: Transformer, pair: OnnxPair, batches: List[ParityBatch], tallies: List[_Tally]) -> ParityReport:
    def most(name: str) -> float:
        return max((getattr(t, name) for t in tallies), default=0.0)

    def total(name: str) -> int:
        return sum(getattr(t, name) for t in tallies)
    sentences = sum(len(b.sources) for b in batches if not b.left_pad)
    real_sentences = sum(len(b.sources) for b in batches if b.real and not b.left_pad)
    return ParityReport(
        provider=pair.provider, encoder_max_abs_diff=most("enc"), decoder_max_abs_diff=most("dec"),
        cache_max_abs_diff=most("cache"), top1_agreement=total("agree") / max(1, total("total")),
        greedy_token_match=total("greedy_hits") / max(1, total("greedy_positions")),
        greedy_sentence_match=total("greedy_same") / max(1, sentences),
        beam4_token_match=total("beam_same") / max(1, total("beam_total")),
        beam4_score_max_abs_diff=most("beam_score_diff"), sentences=sentences, real_sentences=real_sentences,
        batch_sizes=[len(b.sources) for b in batches],
        src_lengths=sorted({len(s) for b in batches for s in b.sources}),
        past_lengths=[0, min(STEPS, model.cfg.max_positions) - 1])


# --- the checks ------------------------------------------------------------------------------------
@torch.no_grad()
def float32_noise(model: Transformer, batches: List[ParityBatch]) -> Tuple[float, float]:
    """How far the model's own float32 rounding moves its encoder outputs and log-probs: each batch's reference
    (encoder outputs, then the chained steps teacher-forced on the reference's tokens) computed again with the output
    of every Linear and LayerNorm multiplied by 1 + e, e uniform in +-sqrt(d_model) u (u = 2^-24, seeded): the
    rounding two float32 engines' dot products of d_model terms typically differ by (Higham and Mary, SIAM J. Sci.
    Comput. 41(5), 2019). -> the max _max_diff of each against the reference. A well-conditioned model stays far
    below FP32_TOLERANCE; a wide one with large activations does not, and then an exported graph that lies within a
    small multiple of it is as close to PyTorch as float32 lets any engine be."""
    scale = math.sqrt(model.cfg.d_model) * 2.0 ** -24
    gen = torch.Generator().manual_seed(0)
    with one_torch_thread():
        refs = [reference(model, batch) for batch in batches]          # unjittered: before the hooks

    def jitter(module: torch.nn.Module, inputs: Any, out: torch.Tensor) -> torch.Tensor:
        return out * (1 + scale * (torch.rand(out.shape, generator=gen, dtype=out.dtype) * 2 - 1))
    hooks = [m.register_forward_hook(jitter) for m in model.modules()
             if isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm))]
    enc = dec = 0.0
    try:
        with one_torch_thread():
            for batch, ref in zip(batches, refs):
                ids, mask = batch_arrays(batch, model.cfg.pad_id)
                cross = model.cross_kv(model.encode(ids, mask))
                enc = max(enc, _max_diff(_flat(cross), ref.cross))
                past = model.empty_cache(ids.shape[0])
                for tokens, log_probs in zip(ref.chain.tokens, ref.chain.log_probs):
                    logp, past = model.decode_step(torch.from_numpy(tokens), mask, past, cross)
                    dec = max(dec, _max_diff([logp.numpy()], [log_probs]))
    finally:
        for hook in hooks:
            hook.remove()
    return enc, dec


def check_fp32(report: ParityReport, what: str = "fp32",
               noise: Optional[Callable[[], Tuple[float, float]]] = None) -> ParityReport:
    """fp32 graphs: every difference within its tolerance and identical greedy / beam-4 tokens -> the report, with
    the tolerances it was held to. The encoder outputs and log-probs: FP32_TOLERANCE, or where a diff is above it
    and `noise` is given (float32_noise of the model, called only then), NOISE_FACTOR times the model's own float32
    noise where that is larger."""
    if noise is not None and max(report.encoder_max_abs_diff, report.decoder_max_abs_diff) > FP32_TOLERANCE:
        enc, dec = noise()
        report = replace(report, encoder_tolerance=max(FP32_TOLERANCE, NOISE_FACTOR * enc),
                         decoder_tolerance=max(FP32_TOLERANCE, NOISE_FACTOR * dec))
    for check, figure, tolerance in (("encoder outputs", report.encoder_max_abs_diff, report.encoder_tolerance),
                                     ("decoder log-probs", report.decoder_max_abs_diff, report.decoder_tolerance),
                                     ("decoder caches", report.cache_max_abs_diff, FP32_CACHE_TOLERANCE)):
        if not figure <= tolerance:
            raise ParityError(f"{what} parity check '{check}' failed: max diff {figure:.3g} > "
                              f"{tolerance:.3g} vs PyTorch; the package was not written")
    for check, figure in (("greedy tokens", report.greedy_token_match),
                          ("greedy sentences", report.greedy_sentence_match),
                          ("beam-4 tokens", report.beam4_token_match)):
        if figure < 1.0:
            raise ParityError(f"{what} parity check '{check}' failed: match {figure:.4f} < 1.0 vs the PyTorch "
                              "reference decoding; the package was not written")
    return report


def check_reduced(report: ParityReport, what: str) -> ParityReport:
    """int8 / fp16 graphs: top-1 agreement and greedy token match above the documented thresholds."""
    for check, figure, least in (("top-1 agreement", report.top1_agreement, MIN_TOP1_AGREEMENT),
                                 ("greedy token match", report.greedy_token_match, MIN_GREEDY_TOKEN_MATCH)):
        if not figure >= least:
            hint = "" if report.real_sentences else "pass real sources with --parity-data, or "
            keep = ", or keep it with --skip-int8-validation (its figures recorded)" if what == "int8" else ""
            raise ParityError(f"{what} parity check '{check}' failed: {figure:.4f} < {least} vs PyTorch fp32; "
                              f"the package was not written ({hint}leave out --{what}{keep})")
    return report


def session_loads(path: Path, provider: str = "CPUExecutionProvider",
                  options: Optional[Callable[[Path], ort.SessionOptions]] = None) -> str:
    """Open an InferenceSession (raises on failure) -> the provider it runs on. options: as OnnxPair's."""
    opts = options(path) if options else session_options()
    return ort.InferenceSession(str(path), opts, providers=[provider]).get_providers()[0]
