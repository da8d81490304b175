"""The CUDA engine: IO binding, so that the cross K/V and the self-attention cache stay on the device between steps.

Per step the token ids [R, 1] go up. With search_on_device (on CUDA; an option on the CPU provider) a greedy or beam
search whose filters the search head takes (decoding.head_plan) runs in a graph chained after the step
(step_search: gather_graph.search_head_model_bytes), so only [R] ids and scores, or [sentences, 2K] candidates, come
down; otherwise sampling and the row-specific filters bring the log-probs [R, V] down (the filters and the search run
in numpy), and beam search steps only each row's 2K best (step_top_k: a TopK graph where the log-probs are). The
cache's beam reorder and its growth (format 2) run on the device as small Gather and Pad graphs (gather_graph.py).

What goes up after the first step: the ids, and what the search on the host decided (beam search's scores, the rows
that go on: Gather's indices). The positions (past_length) stay on the device, advanced there (+ 1 in the search
head's run where it follows the step, else in a graph of its own) and gathered with their rows; the small graphs'
other inputs are kept there by content (_DeviceConstants).
The engine also runs on the CPU provider, which is how the tests check it without a GPU.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import onnxruntime as ort

from .cache_memory import append_padded
from ..package.config import ModelConfig
from .gather_graph import (add_one_model_bytes, gather_model_bytes, pad_model_bytes, search_head_model_bytes,
                           top_k_model_bytes)
from ..package.graph_io import CROSS_ATTENTION, PAST_LENGTH
from .session import GraphEngine


class IoBindingEngine(GraphEngine):
    """Decoding engine whose tensors stay on `device` ("cuda", or "cpu" for tests) as OrtValues."""
    picks_top_k = True

    def __init__(self, encoder, decoder, config: ModelConfig, device: str = "cuda", device_id: int = 0,
                 providers: Optional[List[Any]] = None, cross_per_sentence: bool = False,
                 decoder_path: str = "the decoder step graph", encoder_path: str = "the encoder graph",
                 search_on_device: bool = False):
        super().__init__(encoder, decoder, config, cross_per_sentence, decoder_path, encoder_path)
        self.device, self.device_id = device, device_id
        self.searches_on_device = search_on_device          # step_search: the search head where the log-probs are
        self._providers = providers or encoder.get_providers()
        self._graphs: Dict[Tuple, ort.InferenceSession] = {}        # gather_graph.py's, by builder and inputs
        self._lock = threading.Lock()
        self._constants = _DeviceConstants(self._upload)

    def _binding(self, session: ort.InferenceSession) -> ort.IOBinding:
        """An IO binding of `session`: every graph the engine runs is bound here (the tests record what goes up)."""
        return session.io_binding()

    def _upload(self, name: str, value: np.ndarray) -> ort.OrtValue:
        """`value` copied onto the device as the input `name` (on the CPU provider it is wrapped, uncopied)."""
        return ort.OrtValue.ortvalue_from_numpy(value, self.device, self.device_id)

    def _small_session(self, model_bytes, specs: Tuple = ()) -> ort.InferenceSession:
        """A session of a small graph of gather_graph.py (model_bytes: its builder, given `specs` when there are
        any), one per builder and specs, made at first use."""
        key = (model_bytes.__name__,) + specs
        with self._lock:
            if key not in self._graphs:
                if model_bytes in (search_head_model_bytes, add_one_model_bytes):   # specs: its arguments
                    graph = model_bytes(*specs)
                else:
                    graph = model_bytes([(_NUMPY_OF_ORT[t], rank) for t, rank in specs]) if specs else model_bytes()
                self._graphs[key] = ort.InferenceSession(graph, providers=self._providers)
            return self._graphs[key]

    def _on_device(self, model_bytes, second: str, second_value: np.ndarray,
                   values: List[ort.OrtValue]) -> List[ort.OrtValue]:
        """y_i = op(x_i, second) by gather_graph.py's graph `model_bytes` on `values`, which stay on the device.
        Gather's indices (the rows that go on: the search's choice, on the host) go up; Pad's pads, one of a few
        values, are kept there (_DeviceConstants)."""
        sess = self._small_session(model_bytes, tuple((v.element_type(), len(v.shape())) for v in values))
        io = self._binding(sess)
        if model_bytes is pad_model_bytes:
            io.bind_ortvalue_input(second, self._constants.get(second, second_value))
        else:
            io.bind_cpu_input(second, second_value)
        for i, value in enumerate(values):
            io.bind_ortvalue_input(f"x{i}", value)
            io.bind_output(f"y{i}", self.device, self.device_id)
        sess.run_with_iobinding(io)
        return list(io.get_outputs())

    def _add_one(self, length: ort.OrtValue) -> ort.OrtValue:
        """length + 1 on the device (gather_graph.add_one_model_bytes): the positions the next step writes at."""
        sess = self._small_session(add_one_model_bytes, (len(length.shape()),))
        io = self._binding(sess)
        io.bind_ortvalue_input("x", length)
        io.bind_output("y", self.device, self.device_id)
        sess.run_with_iobinding(io)
        return io.get_outputs()[0]

    def encode(self, input_ids, attention_mask):
        io = self._binding(self.encoder)
        io.bind_cpu_input("input_ids", input_ids)
        io.bind_cpu_input("attention_mask", attention_mask)
        for name in self.cross_names:
            io.bind_output(name, self.device, self.device_id)
        self.run_bound(self.encoder, io)
        mask = self._upload("encoder_attention_mask", attention_mask)
        return mask, list(io.get_outputs())

    def step(self, input_ids, encoder_mask, past, cross, with_attention: bool = False):
        log_probs, present, attention = self._step(input_ids, encoder_mask, past, cross, with_attention, "cpu")
        return (log_probs.numpy(), present) + ((attention,) if with_attention else ())

    def step_top_k(self, input_ids, encoder_mask, past, cross, bias: np.ndarray, k: int,
                   with_attention: bool = False):
        """step, with each row's k best of log_probs + bias (bias [1, V] float32: 0, or -inf for a token no row may
        take) picked on the device, so that the log-probs [R, V] stay there: -> (values [R, k] float32,
        indices [R, k] int64, present[, attention [R, S]]), best first, equal values in the order of their ids."""
        log_probs, present, attention = self._step(input_ids, encoder_mask, past, cross, with_attention, self.device)
        top_k = self._small_session(top_k_model_bytes)
        io = self._binding(top_k)
        io.bind_ortvalue_input("log_probs", log_probs)
        io.bind_ortvalue_input("bias", self._constants.get("bias", bias))
        io.bind_ortvalue_input("k", self._constants.get("k", np.array([k], dtype=np.int64)))
        io.bind_output("values", "cpu")
        io.bind_output("indices", "cpu")
        top_k.run_with_iobinding(io)
        values, indices = (v.numpy() for v in io.get_outputs())
        return (values, indices, present) + ((attention,) if with_attention else ())

    def step_search(self, input_ids, encoder_mask, past, cross, inputs: Dict[str, np.ndarray], renormalize: bool,
                    with_attention: bool = False):
        """step, and then the search head (gather_graph.search_head_model_bytes) on the log-probs where they are:
        inputs holds its host inputs (bias, check_id; forced when a row is forced this step; cum, shape and k for
        beam search) -> (outputs, present[, attention [R, S]]): outputs (ids [R], values [R], check [R, 1]) for
        greedy, (values [A, k], indices [A, k], check [R, 1]) for beam search, numpy. Of the inputs only the
        search's own numbers of this step go up (HEAD_STEP_INPUTS); the rest are kept on the device by content."""
        log_probs, present, attention = self._step(input_ids, encoder_mask, past, cross, with_attention, self.device,
                                                   advance=False)
        positions = present.positions if isinstance(present, _DeviceCache) else None
        head = self._small_session(search_head_model_bytes, ("cum" in inputs, "forced" in inputs, renormalize,
                                                             None if positions is None else len(positions.shape())))
        io = self._binding(head)
        io.bind_ortvalue_input("log_probs", log_probs)
        for name, value in inputs.items():
            if name in HEAD_STEP_INPUTS:
                io.bind_cpu_input(name, value)
            else:
                io.bind_ortvalue_input(name, self._constants.get(name, value))
        for out in head.get_outputs():
            if out.name == "next_length":
                io.bind_ortvalue_input(PAST_LENGTH, positions)
                io.bind_output(out.name, self.device, self.device_id)     # last: it stays on the device
            else:
                io.bind_output(out.name, "cpu")
        self.run_bound(head, io)
        values = io.get_outputs()
        if positions is not None:                           # the head advanced the positions: + 1 on the device
            present.positions = values[-1]
            values = values[:-1]
        return (tuple(v.numpy() for v in values), present) + ((attention,) if with_attention else ())

    def _step(self, input_ids, encoder_mask, past, cross, with_attention: bool, log_probs_on: str,
              advance: bool = True):
        """-> (log_probs OrtValue on `log_probs_on`, present, attention numpy or None); advance: present's positions
        are the next step's (+ 1, add_one_model_bytes), else still this step's (the caller advances them)."""
        if with_attention and not self.has_attention:
            raise self.no_attention_error()
        rows = len(input_ids)
        io = self._binding(self.decoder)
        io.bind_cpu_input("input_ids", np.ascontiguousarray(input_ids))
        io.bind_ortvalue_input("encoder_attention_mask", encoder_mask)
        if log_probs_on == "cpu":                           # outputs come back in the order they were bound
            io.bind_output("log_probs", "cpu")
        else:
            io.bind_output("log_probs", self.device, self.device_id)
        if self.decoder_format >= 2:
            past = self._fixed_cache(past, rows)
            io.bind_ortvalue_input(PAST_LENGTH, past.positions)
            for name, value in zip(self.present_names, past):
                io.bind_ortvalue_output(name, value)        # written in place
        else:
            if past is None:
                empty = ort.OrtValue.ortvalue_from_shape_and_type(
                    [rows, *self.empty_past_shape], self.cache_dtype, self.device, self.device_id)
                past = [empty] * len(self.past_names)
            for name in self.present_names:
                io.bind_output(name, self.device, self.device_id)
        for name, value in zip(self.past_names + self.cross_names, list(past) + list(cross)):
            io.bind_ortvalue_input(name, value)
        if with_attention:
            io.bind_output(CROSS_ATTENTION, "cpu")
        self.run_bound(self.decoder, io)
        out = io.get_outputs()
        present: List[Any]
        if self.decoder_format >= 2:
            present = _DeviceCache(past, past.length + 1, self._add_one(past.positions) if advance else past.positions)
        else:
            present = list(out[1:len(self.present_names) + 1])
        return out[0], present, out[-1].numpy() if with_attention else None

    def _fixed_cache(self, past: Optional["_DeviceCache"], rows: int) -> "_DeviceCache":
        """Format 2: the cache this step writes into; a full one is padded on the device into one of larger
        capacity (it happens log2(steps / FIXED_CACHE_START) times a call)."""
        h, dh = self.config.n_heads, self.config.head_dim
        if past is None:            # an array each: on the CPU provider an OrtValue wraps its array, uncopied
            capacity = self.capacity_for(0, 0)
            length = np.zeros(rows, np.int64)
            return _DeviceCache([self._upload(name, np.zeros((rows, h, capacity, dh), self.cache_dtype))
                                 for name in self.past_names], length,
                                self._upload(PAST_LENGTH, self._positions(length)))
        capacity = past[0].shape()[2]
        longest = int(past.length.max())
        if longest < capacity:
            return past
        pads = np.zeros(8, np.int64)                        # [begins of the 4 axes, ends of the 4 axes]
        pads[4 + 2] = self.capacity_for(longest, capacity) - capacity
        return _DeviceCache(self._on_device(pad_model_bytes, "pads", pads, past), past.length, past.positions)

    def _positions(self, length: np.ndarray) -> np.ndarray:
        """The past_length the step graph takes for rows that have written `length` [R]: per row (contract 3), or
        the one all rows share (contract 2: 0-d)."""
        # a copy of its own: on the CPU provider the OrtValue wraps the array
        return np.array(length) if self.rows_at_own_positions else np.array(length[0])

    def row_count(self, value: ort.OrtValue) -> int:
        return int(value.shape()[0])

    def take(self, values, index):
        index = np.ascontiguousarray(index, dtype=np.int64)
        if not isinstance(values, _DeviceCache):
            return self._on_device(gather_model_bytes, "indices", index, values)
        per_row = self.rows_at_own_positions            # contract 3: the positions go with their rows
        taken = self._on_device(gather_model_bytes, "indices", index, list(values) + [values.positions] * per_row)
        if per_row:
            return _DeviceCache(taken[:-1], values.length[index], taken[-1])
        return _DeviceCache(taken, values.length[index], values.positions)


    def append_rows(self, values, more):
        """decoder_state.py extend: masks and cross K/V of new rows after these, through the host (a join happens
        once per admission, not per step)."""
        joined = append_padded([v.numpy() for v in values], [v.numpy() for v in more])
        return [self._upload(name, x) for name, x in zip(["encoder_attention_mask"] + self.cross_names, joined)]

    def append_empty_cache(self, cache: "_DeviceCache", n: int) -> "_DeviceCache":
        joined = []
        for name, value in zip(self.past_names, cache):
            host = value.numpy()
            joined.append(self._upload(name, np.concatenate([host, np.zeros((n, *host.shape[1:]), host.dtype)])))
        length = np.concatenate([cache.length, np.zeros(n, np.int64)])
        return _DeviceCache(joined, length, self._upload(PAST_LENGTH, self._positions(length)))


class _DeviceCache(list):
    """IoBindingEngine's format-2/3 cache: OrtValues [R, H, capacity, Dh]; the positions each row has written,
    int64 [R] on the host (`length`: what capacity decisions read), and the same as the step graph's past_length on
    the device (`positions`: [R], or 0-d for contract 2), advanced there after each step (by the search head, else
    add_one_model_bytes) and gathered with the rows, so that no step copies it up."""

    def __init__(self, values: List[ort.OrtValue], length: np.ndarray, positions: ort.OrtValue):
        super().__init__(values)
        self.length, self.positions = length, positions


# The search head's inputs that change every step, bound from the host: beam search's scores, which the search on
# the host decides (which candidates go on, which beams finished), and the ids a forcing step forces (only on such a
# step: the first for forced BOS, a row's last for forced EOS). Keeping the scores on the device would need the
# chosen candidates' places to go up instead, the same [R] numbers. The other inputs (bias, check_id, shape, k) are
# the same from step to step but where a filter's step comes (min length) or sentences end: _DeviceConstants.
HEAD_STEP_INPUTS = frozenset({"cum", "forced"})


class _DeviceConstants:
    """Device copies of the small graphs' inputs that seldom change (the search head's and TopK's bias, check id,
    shape and k; Pad's pads), found by content: a step binds the copy it made the first time it met a value, so
    the bias [1, V] goes up once per distinct value, not once a step. Per input name, the LAST most recently used
    values are kept (a call meets one or two biases: before and after its min length); a copy is never written, so
    one a caller holds stays valid after it leaves the cache."""
    LAST = 8

    def __init__(self, upload: Callable[[str, np.ndarray], ort.OrtValue]):
        self._upload = upload
        self._kept: Dict[str, List[Tuple[np.ndarray, ort.OrtValue]]] = {}
        self._lock = threading.Lock()

    def get(self, name: str, value: np.ndarray) -> ort.OrtValue:
        with self._lock:
            kept = self._kept.setdefault(name, [])
            for i, (host, device) in enumerate(kept):
                if host.dtype == value.dtype and host.shape == value.shape and np.array_equal(host, value):
                    kept.insert(0, kept.pop(i))
                    return device
            host = np.array(value, copy=True)           # its own copy: the caller may reuse its array
            kept.insert(0, (host, self._upload(name, host)))
            del kept[self.LAST:]
            return kept[0][1]


_NUMPY_OF_ORT = {1: np.float32, 7: np.int64, 10: np.float16}     # onnx TensorProto.DataType -> numpy
