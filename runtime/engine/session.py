"""onnxruntime sessions of a package's graphs, and GraphEngine, the part both engines share (base.py: the interface):

  ArrayEngine      CPU (cpu.py): numpy arrays in, numpy arrays out (InferenceSession.run).
  IoBindingEngine  CUDA (cuda.py): the cross K/V and the self-attention cache stay on the
                   device between steps.
loader.py opens the engine for a device.

Device choice (cpu, cuda, auto): devices.py; its names are imported here too, where callers find them.
"""
from __future__ import annotations

import logging
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import onnxruntime as ort

from ..package.config import ModelConfig
from .base import Engine
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


def expected_io(config: ModelConfig, decoder_format: int) -> Dict[str, Tuple[List[str], List[str]]]:
    """Graph input/output names of docs/CONTRACTS.md (graph_io.py), by graph."""
    names = GraphNames.for_config(config, decoder_format)
    return {"encoder": (names.encoder_inputs, names.encoder_outputs),
            "decoder_step": (names.decoder_inputs, names.decoder_outputs)}


_CACHE_TYPES = ("tensor(float)", "tensor(float16)")       # cross K/V and caches: [batch, heads, len, head_dim]
# Which sessions' intra-op threads spin while they wait for work (SessionConfig.session_options). Each session has its
# own thread pool; the decoder step runs hundreds of small parallel sections per translation and needs its workers
# awake (a step whose workers sleep takes much longer). The encoder runs once per call, and its spinning workers
# then took a core from the decoder's: a decoder step now and then stalled for a scheduler tick, which cost more
# than the encoder's own spinning saves it. The decoder step's workers spin only within a run
# (session.force_spinning_stop): between steps the search's numpy work and the beam reorder's copy threads
# (ArrayEngine.take) have the cores to themselves. The few-rows step (at most a few rows: batch 1) spins between
# runs too: the numpy work between its steps is short and its reorders copy on one thread (ArrayEngine.take), and
# a worker that slept after every step is woken at the next step's first parallel section (a small gain, near the
# host's noise). The figures of each choice: bench/results/design-notes.md.
SPINNING = {"encoder": "off", "decoder_step": "in_run", "few_rows": "always"}


def open_session(path: Path, graph: str, config: ModelConfig, sc: SessionConfig,
                 data: Union[bytes, ExternalGraph, None] = None, decoder_format: Optional[int] = None,
                 spinning: Optional[str] = None) -> ort.InferenceSession:
    """An InferenceSession of the graph file `path` (or of `data`, its bytes as read and checked by the
    package, with its external weights where it has them: then onnxruntime reads no file), its inputs/outputs
    checked against the decoder contract `decoder_format` (the package's; None: the one the graph's inputs
    show). spinning: SPINNING's mode for it (None: the graph's)."""
    options = sc.session_options(spinning or SPINNING[graph])
    weights: Optional[ExternalGraph] = None
    if isinstance(data, ExternalGraph):
        weights, data = data, data.model
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
    check_graph_io(sess, path, graph, config, graph_format(sess) if decoder_format is None else decoder_format)
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
    the heap, resident, unless trimmed (bench/results/memory_profile.md measures what trimming gives back)."""
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


def check_graph_io(sess: ort.InferenceSession, path: Path, graph: str, config: ModelConfig,
                   decoder_format: int) -> None:
    """The session's inputs/outputs are the contract's (docs/CONTRACTS.md) for `config`: names (one pair of
    caches per decoder layer), dtypes, ranks, and heads and head_dim in every cross K/V and cache, so that
    a config that does not describe the graph is refused here, not at the first translation."""
    inputs, outputs = expected_io(config, decoder_format)[graph]      # bounded: config.py caps decoder_layers
    got_in = [i.name for i in sess.get_inputs()]
    got_out = [o.name for o in sess.get_outputs()]
    if sorted(got_in) != sorted(inputs) or sorted(got_out) != sorted(outputs):
        raise ModelPackageError(f"{path}: graph inputs/outputs {got_in} -> {got_out} do not match the "
                                f"{graph} contract of decoder format {decoder_format} for {config.decoder_layers} "
                                f"decoder layers; re-export the model")
    types: Tuple[str, ...]
    want: List[Optional[int]]
    for arg in sess.get_inputs() + sess.get_outputs():
        if arg.name in ID_INPUTS:
            types, want = ("tensor(int64)",), [None, None]
        elif arg.name == PAST_LENGTH:                     # one per row from contract 3 on
            types, want = ("tensor(int64)",), [None] * (decoder_format >= 3)
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


FIXED_CACHE_START = 16      # format 2: positions a fresh cache holds; it doubles when full


class GraphEngine(Engine):
    """An engine over a package's two sessions: the sessions, the names the engines bind, and what both engines
    (cpu.py, cuda.py) read of them.

    cross_per_sentence: the decoder step takes cross K/V and encoder mask with one row per sentence
    while its other inputs have one per hypothesis (docs/CONTRACTS.md); decoding then shares them
    between a sentence's beams instead of copying them per row (runtime/decode/decoding.py)."""

    def __init__(self, encoder: ort.InferenceSession, decoder: ort.InferenceSession, config: ModelConfig,
                 cross_per_sentence: bool = False, decoder_path: str = "the decoder step graph",
                 encoder_path: str = "the encoder graph"):
        self.decoder_format = graph_format(decoder)        # 2: fixed-capacity cache written in place; 3: per row
        self.rows_at_own_positions = self.decoder_format >= 3     # rows of one step may sit at different positions
        io = expected_io(config, self.decoder_format)
        self.encoder, self.decoder, self.config = encoder, decoder, config
        self.decoder_path = decoder_path                 # the step graph's file, for errors
        self.graph_paths = {id(encoder): encoder_path, id(decoder): decoder_path}  # by session: names it in errors
        self.cross_per_sentence = cross_per_sentence
        self.cross_names = io["encoder"][1]
        self.past_names = cache_names("past", config.decoder_layers)
        self.present_names = cache_names("present", config.decoder_layers)
        self.empty_past_shape = (config.n_heads, 0, config.head_dim)
        self.cache_dtype = cache_dtype(decoder, config)
        self.has_attention = self.decoder_format >= 2      # the cross_attention output
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

    def capacity_for(self, length: int, capacity: int) -> int:
        """Format 2: the cache capacity to hold `length` + 1 positions, from `capacity` now: doubled when full,
        from FIXED_CACHE_START, at most max_positions (decoding never runs past it)."""
        while capacity <= length:
            capacity = max(FIXED_CACHE_START, 2 * capacity)
        return min(capacity, self.config.max_positions)

