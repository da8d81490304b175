"""onnxruntime sessions and the two engines the decoding loop runs on.

  ArrayEngine      CPU: numpy arrays in, numpy arrays out (InferenceSession.run).
  IoBindingEngine  CUDA (engine/cuda.py): the cross K/V and the self-attention cache stay on the
                   device between steps.

Device choice (cpu, cuda, auto): devices.py; its names are imported here too, where callers find them.
"""
from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import onnxruntime as ort

from .cache_inplace import append_zero_rows, reorder_moves, reorder_rows, widen
from .cache_memory import Cache, CachePool, CrossRows, SpareMemory
from ..package.config import ModelConfig
from ..decode.decoder_state import EngineBase
from ..errors import ModelPackageError, Seq2OnnxError, graph_run_error, onnxruntime_problem
from ..package.external_data import ExternalGraph
from ..package.graph_io import CROSS_ATTENTION, ID_INPUTS, PAST_LENGTH, GraphNames, cache_names
from .devices import DEVICES, cuda_provider_options, cuda_status, onnxruntime_log_severity, resolve_device  # noqa: F401
from ..package.manifest import version_text

log = logging.getLogger("seq2onnx.runtime")

OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# onnxruntime's own log, for the sessions of a package's graphs: fatal only (4). Its C++ logger writes straight to
# stderr, coloured, with the graph's names as they are (an initializer named with escape sequences set the terminal's
# title and cleared the screen at load), out of reach of Python's logging. What its warnings and errors say is either
# noise for these graphs (unused initializers removed, nodes placed on the CPU, CUDA's ScatterND note) or comes back
# as the exception the call raises, which the runtime reports as one line naming the graph (graph_run_error).
ORT_LOG_SEVERITY = 4


@dataclass(frozen=True)
class SessionConfig:
    device: str = "cpu"                 # resolved: "cpu" or "cuda"
    device_id: int = 0
    intra_threads: int = 0              # 0: onnxruntime's default (one per physical core)
    inter_threads: int = 1              # > 1 runs independent nodes in parallel
    optimization: str = "all"           # graph optimisation level: disable | basic | extended | all

    def session_options(self, spinning: str = "in_run") -> ort.SessionOptions:
        """spinning (SPINNING): "off": the session's idle intra-op threads sleep at once; "in_run": they spin within a
        run and sleep between runs; "always": they spin between runs too."""
        so = ort.SessionOptions()
        so.log_severity_level = ORT_LOG_SEVERITY
        so.logid = "seq2onnx"
        so.intra_op_num_threads = self.intra_threads
        so.inter_op_num_threads = self.inter_threads
        so.execution_mode = ort.ExecutionMode.ORT_PARALLEL if self.inter_threads > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = OPTIMIZATION_LEVELS[self.optimization]
        # no CPU arena: its regions grow by powers of two and stay with the session (onnxruntime's memory docs);
        # malloc/free per run costs no speed here (bench/results/memory_profile.md)
        so.enable_cpu_mem_arena = self.device != "cpu"
        if spinning == "off":
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        elif spinning == "in_run":
            so.add_session_config_entry("session.force_spinning_stop", "1")
        return so

    def copy_threads(self) -> int:
        """Threads for the CPU engine's cache copies (beam reorders): as many as the intra-op threads."""
        return self.intra_threads or os.cpu_count() or 1

    def providers(self) -> List[Any]:
        if self.device == "cuda":
            return [("CUDAExecutionProvider", cuda_provider_options(self.device_id)), "CPUExecutionProvider"]
        return ["CPUExecutionProvider"]


# --- sessions --------------------------------------------------------------------------------
def onnxruntime_version(version: str = ort.__version__) -> Tuple[int, ...]:
    """"1.31.1" -> (1, 31, 1); the leading numbers of a development version ("1.22.0.dev20250101" -> (1, 22, 0))."""
    numbers = []
    for part in version.split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def check_onnxruntime(needed: Tuple[int, ...], what: str, version: str = ort.__version__) -> None:
    """A variant whose graphs need a newer onnxruntime (its fused attention ops: graph_io.MIN_ONNXRUNTIME) is refused
    in one line: an older one loads them and computes wrong log-probs."""
    if needed and onnxruntime_version(version) < needed:
        want = version_text(needed)
        raise Seq2OnnxError(f"{what} needs onnxruntime >= {want} (its graphs use onnxruntime's fused attention ops), "
                            f"this is {version}: pip install -U \"onnxruntime>={want}\" (onnxruntime-gpu, where it replaces "
                            f"onnxruntime for a GPU)")


def expected_io(config: ModelConfig, format_version: int) -> Dict[str, Tuple[List[str], List[str]]]:
    """Graph input/output names of docs/CONTRACTS.md (graph_io.py), by graph."""
    names = GraphNames.for_config(config, format_version)
    return {"encoder": (names.encoder_inputs, names.encoder_outputs),
            "decoder_step": (names.decoder_inputs, names.decoder_outputs)}


_CACHE_TYPES = ("tensor(float)", "tensor(float16)")       # cross K/V and caches: [batch, heads, len, head_dim]
# Which sessions' intra-op threads spin while they wait for work (SessionConfig.session_options). Each session has its
# own thread pool; the decoder step runs hundreds of small parallel sections per translation and needs its workers
# awake (without spinning a batch-1 int8 step took 1.07 ms instead of 0.62). The encoder runs once per call, and its
# spinning workers then took a core from the decoder's: on 2 cores one decoder step in ~12 stalled for a scheduler
# tick (4-5 ms), which cost 30% of the batch-1 int8 decoding time (mean step 1.19 -> 0.84 ms with the encoder's
# spinning off; the encoder itself takes 2.7 -> 3.4 ms at batch 1, 27 -> 30 ms at batch 16). The decoder step's
# workers spin only within a run (session.force_spinning_stop): between steps the search's numpy work and the beam
# reorder's copy threads (ArrayEngine.take) have the cores to themselves (spinning on after a run, batch 16 beam 4
# int8 took 7% longer). The few-rows step (at most a few rows: batch 1) spins between runs too: the numpy work
# between its steps is short and its reorders copy on one thread (ArrayEngine.take), and a worker that slept
# after every step is woken at the next step's first parallel section (batch-1 greedy int8 1.03-1.04x in
# bench/ab_code.py over 15 and 25 rounds; 0.94x in a 9-round run: a small gain at this host's noise).
SPINNING = {"encoder": "off", "decoder_step": "in_run", "few_rows": "always"}


def open_session(path: Any, graph: str, config: ModelConfig, sc: SessionConfig,
                 data: Union[bytes, ExternalGraph, None] = None, format_version: Optional[int] = None,
                 spinning: Optional[str] = None) -> ort.InferenceSession:
    """An InferenceSession of the graph file `path` (or of `data`, its bytes as read and checked by the
    package, with its external weights where it has them: then onnxruntime reads no file), its inputs/outputs
    checked against the contract of `format_version` (the package's; None: the decoder contract the graph's inputs
    show). spinning: SPINNING's mode for it (None: the graph's)."""
    options = sc.session_options(spinning or SPINNING[graph])
    weights = data if isinstance(data, ExternalGraph) else None
    if weights is not None:
        data = weights.model
        weights.session_options(options, sc.device)
    # On CUDA, onnxruntime warns at load for each ScatterND without reduction (a format-2 step's cache write, 2 per
    # layer) that repeated indices are unsafe: ours never repeat (one position per row and head).
    try:
        with onnxruntime_log_severity(3) if sc.device == "cuda" else nullcontext():
            sess = ort.InferenceSession(str(path) if data is None else data, providers=sc.providers(),
                                        sess_options=options)
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types for a bad file
        raise ModelPackageError(f"{path}: onnxruntime cannot load it ({onnxruntime_problem(e)}); "
                                f"re-export the model") from e
    if sc.device == "cuda" and "CUDAExecutionProvider" not in sess.get_providers():
        raise Seq2OnnxError(f"{path}: the CUDA provider did not start for this graph; use device 'cpu'")
    check_graph_io(sess, path, graph, config, graph_format(sess) if format_version is None else format_version)
    if data is not None:
        release_model_bytes(sess, data)
    if weights is not None:          # copied into the session, or kept by it (in place: ExternalGraph.release)
        weights.release(sess)
    return sess


def release_model_bytes(sess: ort.InferenceSession, data: bytes) -> None:
    """Let go of the graph's bytes once its session is built. onnxruntime's Python session keeps the bytes it was
    made from (`_model_bytes`, marked "TODO: This is bad as we're holding the memory indefinitely" there) only to
    build the session again when it falls back to other providers after a failed run; the runtime checks its
    providers at load and wants a failed run to fail, so it turns that fallback off and the bytes go (their size
    again in resident memory for every graph: 350 MB for the int8 variant at vocab 32000)."""
    sess.disable_fallback()
    if getattr(sess, "_model_bytes", None) is data:
        sess._model_bytes = None


def return_free_heap() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim; nothing elsewhere). Building a session
    frees onnxruntime's parsed copies of the graph (the protobuf, each initializer's proto) in pieces below glibc's
    mmap threshold, which it has raised by then (it follows the largest block freed, up to 32 MiB): they stay in
    the heap, resident, unless trimmed (bench/results/memory_profile.md: 38 MiB after an int8 load at vocab 32000)."""
    try:
        import ctypes
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):          # not glibc (macOS, Windows, musl): its allocator's own business
        return
    trim(0)


def graph_format(sess: ort.InferenceSession) -> int:
    """The decoder step contract a graph's inputs show (graph_io.py): 3 with a past_length per row ([R]), 2 with one
    past_length (0-d), else 1."""
    past_length = [i for i in sess.get_inputs() if i.name == PAST_LENGTH]
    if not past_length:
        return 1
    return 3 if len(past_length[0].shape or []) == 1 else 2


def check_graph_io(sess: ort.InferenceSession, path: Any, graph: str, config: ModelConfig,
                   format_version: int) -> None:
    """The session's inputs/outputs are the contract's (docs/CONTRACTS.md) for `config`: names (one pair of
    caches per decoder layer), dtypes, ranks, and heads and head_dim in every cross K/V and cache, so that
    a config that does not describe the graph is refused here, not at the first translation."""
    inputs, outputs = expected_io(config, format_version)[graph]      # bounded: config.py caps decoder_layers
    got_in = [i.name for i in sess.get_inputs()]
    got_out = [o.name for o in sess.get_outputs()]
    if sorted(got_in) != sorted(inputs) or sorted(got_out) != sorted(outputs):
        raise ModelPackageError(f"{path}: graph inputs/outputs {got_in} -> {got_out} do not match the "
                                f"{graph} contract of format_version {format_version} for {config.decoder_layers} "
                                f"decoder layers; re-export the model")
    for arg in sess.get_inputs() + sess.get_outputs():
        if arg.name in ID_INPUTS:
            types, want = ("tensor(int64)",), [None, None]
        elif arg.name == PAST_LENGTH:                     # one per row from contract 3 on
            types, want = ("tensor(int64)",), [None] * (format_version >= 3)
        elif arg.name in ("log_probs", CROSS_ATTENTION):   # log_probs' width: Translator._check_graph_vocab
            types, want = ("tensor(float)",), [None, None]
        else:
            types, want = _CACHE_TYPES, [None, config.n_heads, None, config.head_dim]
        dims = list(arg.shape or [])
        if arg.type not in types or len(dims) != len(want) or any(
                isinstance(d, int) and w is not None and d != w for d, w in zip(dims, want)):
            raise ModelPackageError(
                f"{path}: its {arg.name} is {arg.type} {dims}, the contract and the config (n_heads {config.n_heads}, "
                f"d_model {config.d_model}) want {' or '.join(types)} {['*' if w is None else w for w in want]}: the "
                f"graph and the config do not belong together; re-export the model")


def cache_dtype(decoder: ort.InferenceSession, config: ModelConfig) -> type:
    """The dtype of a decoder step graph's self-attention caches: float16 in the fp16 variant, else float32."""
    past = cache_names("past", config.decoder_layers)[0]                  # past_key_0
    types = {i.name: i.type for i in decoder.get_inputs()}
    return np.float16 if types[past] == "tensor(float16)" else np.float32


class _Graphs(EngineBase):
    """The two sessions and the names the engines bind.

    cross_per_sentence: the decoder step takes cross K/V and encoder mask with one row per sentence
    while its other inputs have one per hypothesis (docs/CONTRACTS.md); decoding then shares them
    between a sentence's beams instead of copying them per row (runtime/decode/decoding.py)."""

    def __init__(self, encoder: ort.InferenceSession, decoder: ort.InferenceSession, config: ModelConfig,
                 cross_per_sentence: bool = False, decoder_path: str = "the decoder step graph",
                 encoder_path: str = "the encoder graph"):
        self.format_version = graph_format(decoder)        # 2: fixed-capacity cache written in place; 3: per row
        self.rows_at_own_positions = self.format_version >= 3     # rows of one step may sit at different positions
        io = expected_io(config, self.format_version)
        self.encoder, self.decoder, self.config = encoder, decoder, config
        self.decoder_path = decoder_path                 # the step graph's file, for errors
        self.graph_paths = {id(encoder): encoder_path, id(decoder): decoder_path}  # by session: names it in errors
        self.cross_per_sentence = cross_per_sentence
        self.cross_names = io["encoder"][1]
        self.past_names = cache_names("past", config.decoder_layers)
        self.present_names = cache_names("present", config.decoder_layers)
        self.empty_past_shape = (config.n_heads, 0, config.head_dim)
        self.cache_dtype = cache_dtype(decoder, config)
        self.has_attention = self.format_version >= 2      # the cross_attention output
        self.few_rows: Optional[Tuple[ort.InferenceSession, int]] = None   # ArrayEngine.use_few_rows

    @property
    def decoders(self) -> List[ort.InferenceSession]:
        """The decoder step sessions: the step, and the few-rows step where there is one."""
        return [self.decoder] + ([self.few_rows[0]] if self.few_rows else [])

    def decoder_for(self, rows: int) -> ort.InferenceSession:
        """The session that steps `rows` rows: the few-rows step up to its max_rows, else the step."""
        return self.few_rows[0] if self.few_rows and rows <= self.few_rows[1] else self.decoder

    def decoder_path_for(self, rows: int) -> str:
        """The file of the graph that steps `rows` rows (decoder_for): what an error about a step's output names."""
        return self.graph_paths[id(self.decoder_for(rows))]

    def run_error(self, session: ort.InferenceSession, e: BaseException) -> Seq2OnnxError:
        """The one-line error for `session` failing to run (errors.graph_run_error), naming its graph file."""
        return graph_run_error(self.graph_paths.get(id(session), "a graph of the package"), e)

    def run_bound(self, session: ort.InferenceSession, io: ort.IOBinding) -> None:
        """session.run_with_iobinding(io); a failure is one line naming the graph (run_error), not onnxruntime's."""
        try:
            session.run_with_iobinding(io)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises several types (Fail, InvalidArgument, ...)
            raise self.run_error(session, e) from e

    def no_attention_error(self) -> Seq2OnnxError:
        return Seq2OnnxError(f"{self.decoder_path} has no cross-attention output (a format_version 1 package): "
                             f"re-export the model with `seq2onnx export` to get attention and alignments")

    def capacity_for(self, length: int, capacity: int) -> int:
        """Format 2: the cache capacity to hold `length` + 1 positions, from `capacity` now: doubled when full,
        from FIXED_CACHE_START, at most max_positions (decoding never runs past it)."""
        while capacity <= length:
            capacity = max(FIXED_CACHE_START, 2 * capacity)
        return min(capacity, self.config.max_positions)


FIXED_CACHE_START = 16      # format 2: positions a fresh cache holds; it doubles when full


class ArrayEngine(_Graphs):
    """Decoding engine on numpy arrays (CPU provider).

    The decoder writes its outputs through IO binding into reused memory (CachePool). Format 1: the cache
    arrays a step returns are valid until the step after next, its log-probs until the next step; a reorder
    (take) gathers into the pool's other set. Format 2 and 3 keep one set of cache buffers: the step writes its
    K/V into the cache it was given, in place (present_i bound to past_i's memory), and a reorder, rows joining
    and a full cache moving to twice the capacity rewrite the cache inside the same buffers (cache_inplace.py).
    A cache given to a step, take or append_empty_cache is spent then: only the one returned is valid. A batch's
    cross K/V and encoder mask (hold_encoded) are kept the same way: rows leaving and joining move inside reused
    buffers (cache_memory.CrossRows), not into new arrays.
    """

    def __init__(self, *args, copy_threads: int = 1, **kwargs):
        super().__init__(*args, **kwargs)
        self.spare = SpareMemory()          # the cache memory of the last call, for the next
        self.copy_threads = max(1, copy_threads)
        self._copier = None                 # the other copy threads (a ThreadPoolExecutor starts them at first use)
        if self.copy_threads > 1:
            from concurrent.futures import ThreadPoolExecutor   # here: the runtime's import stays light
            self._copier = ThreadPoolExecutor(self.copy_threads - 1, thread_name_prefix="seq2onnx-copy")

    def use_few_rows(self, session: ort.InferenceSession, max_rows: int, path: Any) -> None:
        """Step with `session` (a format-2 decoder step of the same contract and caches: the variant's few_rows,
        manifest.FewRows) whenever a step has at most max_rows rows."""
        if self.format_version < 2 or cache_dtype(session, self.config) != self.cache_dtype:
            raise ModelPackageError(f"{path}: a few-rows decoder step needs a format_version 2 package and the "
                                    f"caches of its decoder step; re-export the model")
        self.few_rows = (session, max_rows)
        self.graph_paths[id(session)] = str(path)

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Tuple[np.ndarray, List[np.ndarray]]:
        try:
            cross = self.encoder.run(self.cross_names, {"input_ids": input_ids, "attention_mask": attention_mask})
        except Exception as e:  # noqa: BLE001 - onnxruntime raises several types (Fail, InvalidArgument, ...)
            raise self.run_error(self.encoder, e) from e
        return attention_mask, cross

    def step(self, input_ids, encoder_mask, past, cross, with_attention: bool = False):
        """-> (log_probs [R, V], present), and the cross-attention weights [R, S] with with_attention."""
        if with_attention and not self.has_attention:
            raise self.no_attention_error()
        if self.format_version >= 2:
            return self._step_fixed(input_ids, encoder_mask, past, cross, with_attention)
        rows = len(input_ids)
        io = self.decoder.io_binding()
        io.bind_cpu_input("input_ids", np.ascontiguousarray(input_ids))
        io.bind_cpu_input("encoder_attention_mask", encoder_mask)
        if isinstance(past, Cache):
            pool, out = past.pool, 1 - past.which
        else:                                   # first step, or the rows changed: a new pool
            pool, out = CachePool(len(self.past_names), self.spare, sets=2), 0
            if past is None:
                past = [np.zeros((rows, *self.empty_past_shape), dtype=np.float32)] * len(self.past_names)
        h, dh = self.config.n_heads, self.config.head_dim
        present = Cache(pool.views(out, (rows, h, past[0].shape[2] + 1, dh)), pool, out)
        log_probs = pool.log_probs_view(rows, self.config.vocab_size)
        for name, value in zip(self.past_names, past):         # by address: bind_cpu_input copies a view of a pool
            io.bind_input(name, "cpu", 0, np.float32, value.shape, value.ctypes.data)            # buffer
        for name, value in zip(self.cross_names, cross):
            io.bind_cpu_input(name, value)
        for name, value in zip(["log_probs"] + self.present_names, [log_probs] + list(present)):
            io.bind_output(name, "cpu", 0, np.float32, value.shape, value.ctypes.data)
        self.run_bound(self.decoder, io)
        return log_probs, present

    def _step_fixed(self, input_ids, encoder_mask, past, cross, with_attention: bool):
        """Format 2: the step writes its K/V into the cache it is given, in place (present_i bound to past_i's
        memory), through the call's kept binding (Binding)."""
        cache = self._fixed_cache(past, len(input_ids))
        pool = cache.pool
        decoder = self.decoder_for(len(input_ids))
        binding = pool.binding_for(decoder)
        past_length = pool.past_length_view(len(input_ids), self.rows_at_own_positions)
        past_length[...] = cache.length if self.rows_at_own_positions else cache.length[0]
        log_probs = pool.log_probs_view(len(input_ids), self.config.vocab_size)
        inputs = [(PAST_LENGTH, past_length), ("input_ids", np.ascontiguousarray(input_ids, dtype=np.int64)),
                  ("encoder_attention_mask", np.ascontiguousarray(encoder_mask)),
                  *((name, np.ascontiguousarray(value)) for name, value in zip(self.cross_names, cross)),
                  *zip(self.past_names, cache)]
        outputs = [("log_probs", log_probs), *zip(self.present_names, cache)]         # the cache: in place
        attention = None
        if with_attention:
            attention = pool.attention_view(len(input_ids), encoder_mask.shape[1])
            outputs.append((CROSS_ATTENTION, attention))
        for name, value in inputs:
            binding.bind(name, value)
        for name, value in outputs:
            binding.bind(name, value, output=True)
        self.run_bound(decoder, binding.io)
        present = Cache(list(cache), pool, cache.which, cache.length + 1)
        if with_attention:
            return log_probs, present, attention.copy()
        return log_probs, present

    def _fixed_cache(self, past: Optional[Cache], rows: int) -> Cache:
        """Format 2: the cache this step writes into: `past`, moved to a larger capacity when it is full."""
        h, dh = self.config.n_heads, self.config.head_dim
        if not isinstance(past, Cache):                    # first step
            pool = CachePool(len(self.past_names), self.spare, sets=1)
            return Cache(pool.views(0, (rows, h, self.capacity_for(0, 0), dh)), pool, 0, np.zeros(rows, np.int64))
        capacity = past[0].shape[2]
        longest = int(past.length.max())
        if longest < capacity:
            return past
        bigger = self.capacity_for(longest, capacity)
        self._rewrite(past, (rows, h, bigger, dh), rows,
                      lambda buffer, into: widen(buffer, into, rows * h, capacity * dh, bigger * dh))
        return Cache(list(past), past.pool, 0, past.length)

    def hold_encoded(self, encoder_mask: np.ndarray, cross: List[np.ndarray]) -> CrossRows:
        """A batch's mask and cross K/V in memory that rows join and leave in place (CrossRows)."""
        return CrossRows.hold(encoder_mask, cross)

    def take(self, values: List[np.ndarray], index: np.ndarray) -> List[np.ndarray]:
        if isinstance(values, CrossRows):
            return values.take(index, lambda count, work: self._each_tensor(count, work, len(index)))
        if not isinstance(values, Cache):
            return [np.take(v, index, axis=0) for v in values]
        if values.length is None:              # format 1: a beam reorder gathers into the pool's other set
            dst = values.pool.views(1 - values.which, (len(index), *values[0].shape[1:]))

            def gather(part: range) -> None:
                for i in part:
                    np.take(values[i], index, axis=0, out=dst[i], mode="wrap")   # "wrap": unbuffered; in range
            self._each_tensor(len(values), gather, len(index))
            return Cache(dst, values.pool, 1 - values.which)
        shape = values[0].shape                                     # [R, H, C, Dh]
        moves = reorder_moves(index)
        positions = int(values.length[index].max()) if len(index) else 0   # the longest row's written positions
        self._rewrite(values, (len(index), *shape[1:]), len(index),
                      lambda buffer, into: reorder_rows(buffer, into, shape, index, moves, positions))
        return Cache(list(values), values.pool, 0, values.length[index])

    def append_rows(self, values: CrossRows, more: List[np.ndarray]) -> CrossRows:
        """Masks and cross K/V of new rows after these (decoder_state.py extend), in place (CrossRows.append)."""
        return values.append(more, lambda count, work: self._each_tensor(count, work, len(values[0]) + len(more[0])))

    def append_empty_cache(self, cache: Cache, n: int) -> Cache:
        """The cache with n rows that have written nothing (zeros, length 0) after its own, in its own buffers."""
        rows, row = len(cache.length), int(np.prod(cache[0].shape[1:]))
        self._rewrite(cache, (rows + n, *cache[0].shape[1:]), rows + n,
                      lambda buffer, into: append_zero_rows(buffer, into, rows * row, n * row))
        return Cache(list(cache), cache.pool, 0, np.concatenate([cache.length, np.zeros(n, np.int64)]))

    def _rewrite(self, cache: Cache, shape: Tuple[int, ...], rows: int,
                 rewrite: Callable[[np.ndarray, np.ndarray], None]) -> None:
        """Format 2/3: each tensor of `cache` laid out as `shape` in the pool's one set by rewrite(buffer, into), in
        place or into a larger buffer that replaces it (CachePool.refit). `cache` then holds the new arrays (the same
        array objects where the shape and buffer stay, so the step's binding keeps them), and a replaced buffer's
        memory goes tensor by tensor (one tensor's old buffer at a time beside the set, not a second set)."""
        size = int(np.prod(shape))

        def refit(part: range) -> None:
            for i in part:
                buffer = cache.pool.refit(i, size, rewrite)
                if cache[i].base is not buffer or cache[i].shape != shape:
                    cache[i] = buffer[:size].reshape(shape)
        self._each_tensor(len(cache), refit, rows)

    def _each_tensor(self, count: int, work: Callable[[range], None], rows: int) -> None:
        """work(part) for parts of the cache tensors range(count), split between copy_threads threads (numpy copies
        without the GIL). A format-1 reorder copies 12 x [64, 8, 64, 64] float32 at batch 16 beam 4 (96 MiB), which
        one thread copied at 29-43 GB/s, depending on the host; the in-place one only the rows that move, up to the
        longest row's length. One thread where the few-rows step runs `rows` rows: its session's workers spin
        between steps (SPINNING), one core is left."""
        few = self.decoder_for(rows) is not self.decoder
        threads = 1 if few else min(self.copy_threads, count)
        if threads < 2:
            return work(range(count))
        parts = [range(t * count // threads, (t + 1) * count // threads) for t in range(threads)]
        others = [self._copier.submit(work, part) for part in parts[1:]]
        work(parts[0])
        for done in others:
            done.result()


def open_engine(encoder_path: Any, decoder_path: Any, config: ModelConfig, sc: SessionConfig,
                cross_per_sentence: bool = False, read: Optional[Callable[[Any], Union[bytes, ExternalGraph]]] = None,
                format_version: Optional[int] = None, few_rows: Optional[Tuple[Any, int]] = None):
    """The engine for a resolved device: ArrayEngine on CPU, IoBindingEngine on CUDA. read: the package's reader of a
    graph's checked bytes (ModelPackage.read_graph), called for each graph right before its session is built, so that
    one graph's bytes at a time are in memory (open_session lets go of them); None: onnxruntime reads the paths.
    format_version: the package's (the graphs must follow its contract); None: whichever the graph shows.
    few_rows: (path, max_rows) of a decoder step for steps of at most max_rows rows (the variant's few_rows, CPU
    only: ArrayEngine.use_few_rows)."""
    def session(path: Any, graph: str, version: Optional[int], spinning: Optional[str] = None) -> ort.InferenceSession:
        built = open_session(path, graph, config, sc, None if read is None else read(path), version, spinning)
        return_free_heap()                     # the graph's bytes and onnxruntime's parsed copies are free by now
        return built
    encoder = session(encoder_path, "encoder", format_version)
    decoder = session(decoder_path, "decoder_step", format_version)
    if sc.device == "cuda":
        from .cuda import IoBindingEngine     # it builds on _Graphs, from here
        return IoBindingEngine(encoder, decoder, config, "cuda", sc.device_id, sc.providers(), cross_per_sentence,
                               str(decoder_path), encoder_path=str(encoder_path), search_on_device=True)
    engine = ArrayEngine(encoder, decoder, config, cross_per_sentence, str(decoder_path), str(encoder_path),
                         copy_threads=sc.copy_threads())
    if few_rows is not None:
        path, max_rows = few_rows
        few_session = session(path, "decoder_step", engine.format_version, SPINNING["few_rows"])
        engine.use_few_rows(few_session, max_rows, path)
    return engine
