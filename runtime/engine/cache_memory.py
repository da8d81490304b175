"""Reused memory for the CPU engine (cpu.py ArrayEngine): the buffer sets a decoding call writes its self-attention
cache into (one in format 2 and 3, two in format 1), the memory kept from one call for the next, the format-2 step's
IO binding kept across a call's steps, and a batch's cross K/V and encoder mask, which rows join and leave in place
(CrossRows). numpy and onnxruntime only."""
from __future__ import annotations

import threading
import weakref
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnxruntime as ort

from .cache_inplace import compact_rows, reorder_moves, reorder_rows, widen


class CachePool:
    """Reused memory for one decoding call's self-attention cache (CPU).

    Sets of flat float32 buffers, one buffer per cache tensor. Format 1 (sets=2): a step writes its present into
    the set that does not hold its past, and a reorder too, so the sets alternate. Format 2 and 3 (sets=1): a step
    writes in place, and a reorder, rows joining and a larger capacity rewrite the cache inside its buffers
    (cache_inplace.py); a buffer too small for the new layout is replaced by a larger one (refit), tensor by tensor.
    Nothing is allocated once the buffers are big enough. Fresh arrays cost a page fault per 4 KiB every step: for
    the Transformer-base beam-4 cache (12 x [64, 8, P, 64]) np.take into new arrays is several times slower than
    into reused ones (bench/results/design-notes.md). Buffers start as zeros, so every position a format-2 graph reads holds a finite float
    (positions after past_length are masked out, and 0 x a finite value is 0).
    """

    def __init__(self, n: int, spare: Optional["SpareMemory"] = None, sets: int = 2):
        self.sets: List[List[np.ndarray]] = (spare.take(n, sets) if spare else None) or [[] for _ in range(sets)]
        self.n = n
        if spare is not None:                               # this call's memory goes to the next call
            weakref.finalize(self, spare.give, n, self.sets)
        self.log_probs = np.empty((0, 0), dtype=np.float32)      # [rows, vocab], a view of reused memory
        self.attention = np.empty((0, 0), dtype=np.float32)      # [rows, src_len] (format 2, with attention)
        self._memory: Dict[str, np.ndarray] = {}
        self.bindings: Dict[int, "Binding"] = {}       # format 2: the call's IO binding of each decoder session
        self._past_length = np.zeros(0, dtype=np.int64)  # format 2/3: the bound past_length input (past_length_view)
        self._lock = threading.Lock()                  # refit's edits of the bindings, from the copy threads

    @staticmethod
    def grown(size: int, now: int) -> int:
        """The floats of a buffer that must hold `size` and holds `now`: 1.5 x more at least, so that a cache that
        grows a little at a time is not copied at each step (zero pages come on first use)."""
        return max(size, int(now * 1.5))

    def views(self, which: int, shape: Tuple[int, ...]) -> List[np.ndarray]:
        """Set `which`'s buffers as arrays of `shape` (its contents: whatever the buffers held, or zeros)."""
        size = int(np.prod(shape))
        bufs = self.sets[which]
        if not bufs or bufs[0].size < size:
            grown = self.grown(size, bufs[0].size if bufs else 0)
            bufs = self.sets[which] = [np.zeros(grown, dtype=np.float32) for _ in range(self.n)]
        return [b[:size].reshape(shape) for b in bufs]

    def refit(self, i: int, size: int, rewrite: Callable[[np.ndarray, np.ndarray], None]) -> np.ndarray:
        """Set 0's buffer of tensor i rewritten for a layout of `size` floats, returned: rewrite(buffer, buffer) when
        it holds `size` (in place), else rewrite(buffer, larger) into a new buffer (grown), which replaces it. The
        bindings then let go of the old buffer's arrays (they bind the new ones at the next step), so that its
        memory goes as soon as the caller drops its own views: one tensor's old buffer at a time, not a set."""
        buffer = self.sets[0][i]
        if buffer.size >= size:
            rewrite(buffer, buffer)
            return buffer
        larger = np.zeros(self.grown(size, buffer.size), dtype=np.float32)
        rewrite(buffer, larger)
        self.sets[0][i] = larger
        with self._lock:
            for binding in self.bindings.values():
                binding.forget(buffer)
        return larger

    def binding_for(self, session: ort.InferenceSession) -> "Binding":
        """This call's binding of `session` (format 2), kept across its steps."""
        binding = self.bindings.get(id(session))
        if binding is None:
            binding = self.bindings[id(session)] = Binding(session)
        return binding

    def past_length_view(self, rows: int, per_row: bool) -> np.ndarray:
        """The past_length input: int64 [rows] (contract 3: each row's), or 0-d (contract 2); the same array object
        while its shape stays (Binding)."""
        shape = (rows,) if per_row else ()
        if self._past_length.shape != shape:
            self._past_length = np.zeros(shape, dtype=np.int64)
        return self._past_length

    def log_probs_view(self, rows: int, vocab: int) -> np.ndarray:
        """[rows, vocab] float32 in reused memory: the same array object while the shape stays (Binding)."""
        if self.log_probs.shape != (rows, vocab):
            self.log_probs = self._reused("log_probs", (rows, vocab))
        return self.log_probs

    def attention_view(self, rows: int, src_len: int) -> np.ndarray:
        if self.attention.shape != (rows, src_len):
            self.attention = self._reused("attention", (rows, src_len))
        return self.attention

    def _reused(self, name: str, shape: Tuple[int, int]) -> np.ndarray:
        size = shape[0] * shape[1]
        memory = self._memory.get(name)
        if memory is None or memory.size < size:
            memory = self._memory[name] = np.empty(size, dtype=np.float32)
        return memory[:size].reshape(shape)


class SpareMemory:
    """The cache memory of the last decoding call that ended, for the next call of the engine.

    A call's cache set grows to ~100 MB at batch 16 beam 4 (12 x [64, 8, 64, 64] float32: 96 MiB; format 1 has
    two sets), and fresh memory costs a page fault per 4 KiB on its first use, in every call. The pool's finalizer
    hands its sets here when the call's last cache is dropped, and the next pool starts from them (any values they
    hold are finite: K/V a step wrote, or zeros). One call's worth is kept, the latest."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sets: Optional[Tuple[int, List[List[np.ndarray]]]] = None

    def give(self, n: int, sets: List[List[np.ndarray]]) -> None:
        with self._lock:
            self._sets = (n, sets)

    def take(self, n: int, sets: int) -> Optional[List[List[np.ndarray]]]:
        """The kept sets when they are `sets` sets of n buffers, else None."""
        with self._lock:
            kept, self._sets = self._sets, None
        return kept[1] if kept is not None and kept[0] == n and len(kept[1]) == sets else None

    def set_bytes(self) -> List[int]:
        """The bytes of each kept set (format 1: the first set, then the other its steps and reorders write into);
        [] when none is kept."""
        with self._lock:
            kept = self._sets
        return [] if kept is None else [sum(b.nbytes for b in buffers) for buffers in kept[1]]


class Binding:
    """One decoding call's IO binding of the format-2 decoder step (CPU), kept across its steps.

    Every tensor is bound by address; a step binds again only the arrays that are not the ones bound before (its
    token ids, a cache that grew or was reordered, cross K/V after sentences left), so a greedy step re-binds one
    input where a fresh binding makes ~40 bind calls (a measurable part of an int8 batch-1 step:
    bench/results/design-notes.md). It holds each bound array, so that its memory outlives the binding."""

    def __init__(self, session: ort.InferenceSession):
        self.io = session.io_binding()
        self.bound: Dict[str, np.ndarray] = {}

    def bind(self, name: str, array: np.ndarray, output: bool = False) -> None:
        if self.bound.get(name) is not array:
            (self.io.bind_output if output else self.io.bind_input)(name, "cpu", 0, array.dtype, array.shape,
                                                                  array.ctypes.data)
            self.bound[name] = array

    def forget(self, buffer: np.ndarray) -> None:
        """Let go of the bound arrays in `buffer`'s memory (a cache buffer replaced: CachePool.refit); their names
        bind again at the next step, before it runs."""
        for name in [name for name, array in self.bound.items() if array.base is buffer]:
            del self.bound[name]


def source_axis(value: np.ndarray) -> int:
    """The source-length axis of an encoder mask [B, S] (1) or of cross K/V [B, H, S, Dh] (2)."""
    return 1 if value.ndim == 2 else 2


def append_padded(values: List[np.ndarray], more: List[np.ndarray]) -> List[np.ndarray]:
    """values[i] and more[i] ([B, S] masks, [B, H, S, Dh] cross K/V) joined along the rows into new arrays, the shorter
    source axis padded with zeros: a mask's 0 hides the padded positions (the CUDA engine's; the CPU engine appends
    in place: CrossRows)."""
    out = []
    for a, b in zip(values, more):
        axis = source_axis(a)
        length = max(a.shape[axis], b.shape[axis])
        shape = list(a.shape)
        shape[0], shape[axis] = len(a) + len(b), length
        joined = np.zeros(shape, dtype=a.dtype)
        index = [slice(None)] * a.ndim
        index[axis] = slice(0, a.shape[axis])
        joined[(slice(0, len(a)), *index[1:])] = a
        index[axis] = slice(0, b.shape[axis])
        joined[(slice(len(a), None), *index[1:])] = b
        out.append(joined)
    return out


class Cache(list):
    """The self-attention cache of ArrayEngine: the arrays, the pool set they live in, and (format 2 and 3) the
    positions each row has written, int64 [R] (the arrays are [R, H, capacity, Dh]; format 2: all rows alike)."""

    def __init__(self, arrays: List[np.ndarray], pool: CachePool, which: int, length: Optional[np.ndarray] = None):
        super().__init__(arrays)
        self.pool, self.which, self.length = pool, which, length


Each = Callable[[int, Callable[[range], None]], None]     # each(count, work): work(part) over parts of range(count)


class CrossRows(list):
    """The encoder mask [R, S] and cross K/V (2 per layer, [R, H, S, Dh]) of an ArrayEngine batch, in the order the
    decoder step takes them: contiguous views of flat buffers, one per tensor, rows outermost (decoder_state.py
    DecoderState.encoded). In a continuous batch rows join and leave at nearly every step, and copying the whole
    batch each time (np.take and append_padded into new arrays: 126 MB of cross K/V at 64 rows, S 80, the base
    model, with a page fault per fresh 4 KiB) grows as rows^2. Here:
      * rows leaving are compacted in place: only the rows after the first gap move (compact_rows), and a gather
        that repeats or reorders rows moves only the rows that change (reorder_moves);
      * rows joining are written after the rows there, in the spare rows of the buffer: a buffer too small for them
        is replaced by one at least 1.5x larger (CachePool.grown), so the batch's rows are copied a logarithmic number
        of times as it grows, not at every join;
      * S of the views is the longest source the batch holds (as append_padded made it). A view [R, H, S, Dh] over a
        layout with room for longer sources would not be contiguous, and views as long as that room would make
        every step attend over masked positions; so a longer source lays the rows out again at its S (widen, in
        place when the buffer holds them: once per new longest source, not per step), the new positions zeros
        (their mask 0 hides them).
    The encoder's outputs are taken over as they are (no copy: translate_batch pays nothing for this), the mask is
    copied (it is the caller's). A CrossRows given to take or append is spent: only the one returned is valid."""

    def __init__(self, buffers: List[np.ndarray], shapes: Sequence[Tuple[int, ...]]):
        super().__init__(b[:int(np.prod(s))].reshape(s) for b, s in zip(buffers, shapes))
        self.buffers = buffers

    @classmethod
    def hold(cls, encoder_mask: np.ndarray, cross: List[np.ndarray]) -> "CrossRows":
        values = [np.array(encoder_mask, order="C")] + [
            c if c.flags.c_contiguous and c.flags.writeable else np.array(c, order="C") for c in cross]
        return cls([v.reshape(-1) for v in values], [v.shape for v in values])

    def take(self, index: np.ndarray, each: Each) -> "CrossRows":
        """Rows `index` (rows leaving: increasing; any gather: with repeats), in place where the buffer holds them."""
        index = np.asarray(index, dtype=np.int64)
        rows, buffers = len(self[0]), list(self.buffers)
        compact = len(index) <= rows and bool((np.diff(index) > 0).all())
        moves = [] if compact else reorder_moves(index)

        def gather(part: range) -> None:
            for i in part:
                buffer, size = buffers[i], int(np.prod(self[i].shape[1:]))
                if compact:
                    compact_rows(buffer, index, size)
                    continue
                need = max(rows, len(index)) * size
                into = buffer if buffer.size >= need else np.zeros(CachePool.grown(need, buffer.size), buffer.dtype)
                reorder_rows(buffer, into, (rows, 1, size), index, moves, size)
                buffers[i] = into
        each(len(self), gather)
        return CrossRows(buffers, [(len(index), *v.shape[1:]) for v in self])

    def append_rows(self, more: List[np.ndarray], each: Each) -> "CrossRows":
        """more's rows (mask and cross K/V of newly encoded rows, as many tensors) after these; the shorter source axis
        padded with zeros (mask 0)."""
        rows, buffers = len(self[0]), list(self.buffers)
        shapes = []
        for a, b in zip(self, more):
            axis = source_axis(a)
            shape = list(a.shape)
            shape[0], shape[axis] = rows + len(b), max(a.shape[axis], b.shape[axis])
            shapes.append(tuple(shape))

        def join(part: range) -> None:
            for i in part:
                a, b, shape, buffer = self[i], more[i], shapes[i], buffers[i]
                axis, need = source_axis(a), int(np.prod(shapes[i]))
                into = buffer if buffer.size >= need else np.zeros(CachePool.grown(need, buffer.size), buffer.dtype)
                blocks, after = rows * int(np.prod(a.shape[1:axis])), int(np.prod(a.shape[axis + 1:]))
                old, new = a.shape[axis] * after, shape[axis] * after      # values of a block [S, Dh] before, after
                if new > old:                                  # a longer source: each block laid out again
                    widen(buffer, into, blocks, old, new)
                    if into is buffer:
                        into[:blocks * new].reshape(blocks, new)[:, old:] = 0
                elif into is not buffer:
                    into[:blocks * old] = buffer[:blocks * old]
                added = into[blocks * new:need].reshape(len(b), *shape[1:])
                where = [slice(None)] * a.ndim                 # the new rows' source positions, then the rest
                where[axis] = slice(0, b.shape[axis])
                added[tuple(where)] = b
                where[axis] = slice(b.shape[axis], None)
                added[tuple(where)] = 0
                buffers[i] = into
        each(len(self), join)
        return CrossRows(buffers, shapes)
