"""The CPU engine: numpy arrays in, numpy arrays out, the decoder's outputs written through IO binding into reused
memory (cache_memory.py), the cache rewritten in place (cache_inplace.py)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

import numpy as np
import onnxruntime as ort

from ..errors import ModelPackageError
from ..package.graph_io import CROSS_ATTENTION, PAST_LENGTH
from .cache_inplace import append_zero_rows, reorder_moves, reorder_rows, widen
from .cache_memory import Cache, CachePool, CrossRows, SpareMemory
from .session import GraphEngine, cache_dtype

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor


class ArrayEngine(GraphEngine):
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
        # the other copy threads (a ThreadPoolExecutor starts them at first use)
        self._copier: Optional[ThreadPoolExecutor] = None
        if self.copy_threads > 1:
            from concurrent.futures import ThreadPoolExecutor   # here: the runtime's import stays light
            self._copier = ThreadPoolExecutor(self.copy_threads - 1, thread_name_prefix="seq2onnx-copy")

    def use_few_rows(self, session: ort.InferenceSession, max_rows: int, path: Path) -> None:
        """Step with `session` (a format-2 decoder step of the same contract and caches: the variant's few_rows,
        manifest.FewRows) whenever a step has at most max_rows rows."""
        if self.decoder_format < 2 or cache_dtype(session, self.config) != self.cache_dtype:
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
        if self.decoder_format >= 2:
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
        length = cache.length
        assert length is not None                      # format 2: a cache holds its rows' lengths
        pool = cache.pool
        decoder = self.decoder_for(len(input_ids))
        binding = pool.binding_for(decoder)
        past_length = pool.past_length_view(len(input_ids), self.rows_at_own_positions)
        past_length[...] = length if self.rows_at_own_positions else length[0]
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
        present = Cache(list(cache), pool, cache.which, length + 1)
        if attention is not None:
            return log_probs, present, attention.copy()
        return log_probs, present

    def _fixed_cache(self, past: Optional[Cache], rows: int) -> Cache:
        """Format 2: the cache this step writes into: `past`, moved to a larger capacity when it is full."""
        h, dh = self.config.n_heads, self.config.head_dim
        if not isinstance(past, Cache):                    # first step
            pool = CachePool(len(self.past_names), self.spare, sets=1)
            return Cache(pool.views(0, (rows, h, self.capacity_for(0, 0), dh)), pool, 0, np.zeros(rows, np.int64))
        capacity = past[0].shape[2]
        assert past.length is not None                 # format 2: a cache holds its rows' lengths
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

    def append_rows(self, values: List[np.ndarray], more: List[np.ndarray]) -> CrossRows:
        """Masks and cross K/V of new rows after these (decoder_state.py extend), in place (CrossRows.append_rows)."""
        assert isinstance(values, CrossRows)                    # hold_encoded made them
        rows = len(values[0]) + len(more[0])
        return values.append_rows(more, lambda count, work: self._each_tensor(count, work, rows))

    def append_empty_cache(self, cache: Cache, n: int) -> Cache:
        """The cache with n rows that have written nothing (zeros, length 0) after its own, in its own buffers."""
        assert cache.length is not None                # format 2 and 3: a cache holds its rows' lengths
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
        without the GIL). A format-1 reorder copies 12 x [64, 8, 64, 64] float32 at batch 16 beam 4 (96 MiB), where
        one thread's copy speed shows (bench/results/design-notes.md); the in-place one only the rows that move, up to the
        longest row's length. One thread where the few-rows step runs `rows` rows: its session's workers spin
        between steps (SPINNING), one core is left."""
        few = self.decoder_for(rows) is not self.decoder
        threads = 1 if few else min(self.copy_threads, count)
        copier = self._copier                   # there with copy_threads > 1
        if threads < 2 or copier is None:
            return work(range(count))
        parts = [range(t * count // threads, (t + 1) * count // threads) for t in range(threads)]
        others = [copier.submit(work, part) for part in parts[1:]]
        work(parts[0])
        for done in others:
            done.result()
