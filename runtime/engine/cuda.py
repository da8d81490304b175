"""The CUDA engine: IO binding, so that the cross K/V and the self-attention cache stay on the device between steps.

Per step the token ids [R, 1] go up. With search_on_device (on CUDA; an option on the CPU provider) a greedy or beam
search whose filters the search head takes (decoding.head_plan) runs in a graph chained after the step
(step_search: gather_graph.search_head_model_bytes), so only [R] ids and scores, or [sentences, 2K] candidates, come
down; otherwise sampling and the row-specific filters bring the log-probs [R, V] down (the filters and the search run
in numpy), and beam search steps only each row's 2K best (step_top_k: a TopK graph where the log-probs are). The
cache's beam reorder and its growth (format 2) run on the device as small Gather and Pad graphs (gather_graph.py).
The engine also runs on the CPU provider, which is how the tests check it without a GPU.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import onnxruntime as ort

from .cache_memory import append_padded
from ..package.config import ModelConfig
from .gather_graph import gather_model_bytes, pad_model_bytes, search_head_model_bytes, top_k_model_bytes
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

    def _small_session(self, model_bytes, specs: Tuple = ()) -> ort.InferenceSession:
        """A session of a small graph of gather_graph.py (model_bytes: its builder, given `specs` when there are
        any), one per builder and specs, made at first use."""
        key = (model_bytes.__name__,) + specs
        with self._lock:
            if key not in self._graphs:
                if model_bytes is search_head_model_bytes:          # specs: its variant's flags
                    graph = model_bytes(*specs)
                else:
                    graph = model_bytes([(_NUMPY_OF_ORT[t], rank) for t, rank in specs]) if specs else model_bytes()
                self._graphs[key] = ort.InferenceSession(graph, providers=self._providers)
            return self._graphs[key]

    def _on_device(self, model_bytes, second: str, second_value: np.ndarray,
                   values: List[ort.OrtValue]) -> List[ort.OrtValue]:
        """y_i = op(x_i, second) by gather_graph.py's graph `model_bytes` on `values`, which stay on the device."""
        sess = self._small_session(model_bytes, tuple((v.element_type(), len(v.shape())) for v in values))
        io = sess.io_binding()
        io.bind_cpu_input(second, second_value)
        for i, value in enumerate(values):
            io.bind_ortvalue_input(f"x{i}", value)
            io.bind_output(f"y{i}", self.device, self.device_id)
        sess.run_with_iobinding(io)
        return list(io.get_outputs())

    def encode(self, input_ids, attention_mask):
        io = self.encoder.io_binding()
        io.bind_cpu_input("input_ids", input_ids)
        io.bind_cpu_input("attention_mask", attention_mask)
        for name in self.cross_names:
            io.bind_output(name, self.device, self.device_id)
        self.run_bound(self.encoder, io)
        mask = ort.OrtValue.ortvalue_from_numpy(attention_mask, self.device, self.device_id)
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
        io = top_k.io_binding()
        io.bind_ortvalue_input("log_probs", log_probs)
        io.bind_cpu_input("bias", bias)
        io.bind_cpu_input("k", np.array([k], dtype=np.int64))
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
        greedy, (values [A, k], indices [A, k], check [R, 1]) for beam search, numpy."""
        log_probs, present, attention = self._step(input_ids, encoder_mask, past, cross, with_attention, self.device)
        head = self._small_session(search_head_model_bytes, ("cum" in inputs, "forced" in inputs, renormalize))
        io = head.io_binding()
        io.bind_ortvalue_input("log_probs", log_probs)
        for name, value in inputs.items():
            io.bind_cpu_input(name, value)
        for out in head.get_outputs():
            io.bind_output(out.name, "cpu")
        self.run_bound(head, io)
        outputs = tuple(v.numpy() for v in io.get_outputs())
        return (outputs, present) + ((attention,) if with_attention else ())

    def _step(self, input_ids, encoder_mask, past, cross, with_attention: bool, log_probs_on: str):
        """-> (log_probs OrtValue on `log_probs_on`, present, attention numpy or None)"""
        if with_attention and not self.has_attention:
            raise self.no_attention_error()
        rows = len(input_ids)
        io = self.decoder.io_binding()
        io.bind_cpu_input("input_ids", np.ascontiguousarray(input_ids))
        io.bind_ortvalue_input("encoder_attention_mask", encoder_mask)
        if log_probs_on == "cpu":                           # outputs come back in the order they were bound
            io.bind_output("log_probs", "cpu")
        else:
            io.bind_output("log_probs", self.device, self.device_id)
        if self.decoder_format >= 2:
            past = self._fixed_cache(past, rows)
            io.bind_cpu_input(PAST_LENGTH, past.length if self.rows_at_own_positions else past.length[0])
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
            present = _DeviceCache(past, past.length + 1)
        else:
            present = list(out[1:len(self.present_names) + 1])
        return out[0], present, out[-1].numpy() if with_attention else None

    def _fixed_cache(self, past: Optional["_DeviceCache"], rows: int) -> "_DeviceCache":
        """Format 2: the cache this step writes into; a full one is padded on the device into one of larger
        capacity (it happens log2(steps / FIXED_CACHE_START) times a call)."""
        h, dh = self.config.n_heads, self.config.head_dim
        if past is None:            # an array each: on the CPU provider an OrtValue wraps its array, uncopied
            capacity = self.capacity_for(0, 0)
            return _DeviceCache([ort.OrtValue.ortvalue_from_numpy(np.zeros((rows, h, capacity, dh), self.cache_dtype),
                                                                  self.device, self.device_id)
                                 for _ in self.past_names], np.zeros(rows, np.int64))
        capacity = past[0].shape()[2]
        longest = int(past.length.max())
        if longest < capacity:
            return past
        pads = np.zeros(8, np.int64)                        # [begins of the 4 axes, ends of the 4 axes]
        pads[4 + 2] = self.capacity_for(longest, capacity) - capacity
        return _DeviceCache(self._on_device(pad_model_bytes, "pads", pads, past), past.length)

    def row_count(self, value: ort.OrtValue) -> int:
        return int(value.shape()[0])

    def take(self, values, index):
        taken = self._on_device(gather_model_bytes, "indices", np.ascontiguousarray(index, dtype=np.int64), values)
        if isinstance(values, _DeviceCache):
            return _DeviceCache(taken, values.length[index])
        return taken


    def append_rows(self, values, more):
        """decoder_state.py extend: masks and cross K/V of new rows after these, through the host (a join happens
        once per admission, not per step)."""
        joined = append_padded([v.numpy() for v in values], [v.numpy() for v in more])
        return [ort.OrtValue.ortvalue_from_numpy(x, self.device, self.device_id) for x in joined]

    def append_empty_cache(self, cache: "_DeviceCache", n: int) -> "_DeviceCache":
        joined = []
        for value in cache:
            host = value.numpy()
            joined.append(ort.OrtValue.ortvalue_from_numpy(
                np.concatenate([host, np.zeros((n, *host.shape[1:]), host.dtype)]), self.device, self.device_id))
        return _DeviceCache(joined, np.concatenate([cache.length, np.zeros(n, np.int64)]))


class _DeviceCache(list):
    """IoBindingEngine's format-2/3 cache: OrtValues [R, H, capacity, Dh] and the positions each row has written,
    int64 [R]."""

    def __init__(self, values: List[ort.OrtValue], length: np.ndarray):
        super().__init__(values)
        self.length = length


_NUMPY_OF_ORT = {1: np.float32, 7: np.int64, 10: np.float16}     # onnx TensorProto.DataType -> numpy
