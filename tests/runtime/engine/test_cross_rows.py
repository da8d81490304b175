"""A continuous batch's cross K/V and encoder mask with rows joining and leaving in place
(runtime/engine/cache_memory.py CrossRows, over runtime/engine/cache_inplace.py), against the copying version (np.take, and
append_padded, which the CUDA engine still uses). No model: test_serve_invariance runs them through the engine."""
from __future__ import annotations

import threading
import tracemalloc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2onnx.runtime.engine.cache_inplace import compact_rows
from seq2onnx.runtime.engine.cache_memory import CrossRows, append_padded

H, DH = 2, 3                            # heads, head_dim of the cross K/V below


def one_thread(count, work):
    work(range(count))


def two_threads(count, work):
    """Like ArrayEngine._each_tensor: the tensors in two parts, one on another thread."""
    other = threading.Thread(target=work, args=(range(count // 2, count),))
    other.start()
    work(range(count // 2))
    other.join()


def encoded(rng: np.random.Generator, rows: int, length: int):
    """An encoder's outputs for `rows` sources padded to `length`: mask int64 [R, S] (each row 1..S ones), and two
    layers of cross K/V [R, H, S, Dh], one of them float16 (the fp16 variant's)."""
    lengths = rng.integers(1, length + 1, rows)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    cross = [rng.standard_normal((rows, H, length, DH)).astype(dtype)
             for dtype in (np.float32, np.float32, np.float16, np.float16)]
    return mask, cross


def check(got: CrossRows, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.flags.c_contiguous and g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


step = st.one_of(
    st.tuples(st.just("leave"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("gather"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("join"), st.integers(1, 5), st.integers(1, 9)))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.lists(step, min_size=1, max_size=12), st.booleans(), st.integers(0, 99))
def test_rows_join_and_leave_as_the_copies_make_them(rows, length, steps, threads, seed):
    """Any sequence of rows leaving (increasing rows: compacted), gathers (repeats, any order: beam rows of group 1)
    and rows joining (a source shorter or longer than the batch's) gives the arrays np.take and append_padded give."""
    rng = np.random.default_rng(seed)
    each = two_threads if threads else one_thread
    mask, cross = encoded(rng, rows, length)
    want = [mask, *(c.copy() for c in cross)]          # hold takes the K/V arrays over
    held = CrossRows.hold(mask, cross)
    check(held, want)
    for kind, *args in steps:
        r = len(want[0])
        if kind == "leave":
            keep = np.flatnonzero(np.random.default_rng(args[0]).random(r) < 0.6)
            if not len(keep):
                continue
            index = keep
        elif kind == "gather":
            index = np.random.default_rng(args[0]).integers(0, r, r + int(args[0] % 3) - 1)
            if not len(index):
                continue
        if kind == "join":
            new = list(encoded(rng, args[0], args[1]))
            new = [new[0], *new[1]]
            held = held.append_rows(CrossRows.hold(new[0], new[1:]), each)
            want = append_padded(want, new)
        else:
            held = held.take(index, each)
            want = [np.take(w, index, axis=0) for w in want]
        check(held, want)


def test_rows_leaving_move_in_place_and_allocate_nothing():
    """Rows leaving a batch of 64 (a continuous batch at high concurrency) move inside the buffers: no new array
    (np.take made one per tensor, each page of it a page fault), the same memory, and the rows before the first
    gap are not written."""
    rng = np.random.default_rng(0)
    mask, cross = encoded(rng, 64, 400)
    want = [np.take(w, keep := np.delete(np.arange(64), [20, 21, 40, 63]), axis=0) for w in [mask, *cross]]
    held = CrossRows.hold(mask, cross)
    before = [b.copy() for b in held.buffers]
    buffers = list(held.buffers)
    tracemalloc.start()
    taken = held.take(keep, one_thread)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert all(a is b for a, b in zip(taken.buffers, buffers))
    assert all(np.shares_memory(v, b) for v, b in zip(taken, buffers))
    assert peak < H * 400 * DH * 4, peak              # less than one K/V row: only bookkeeping
    for b, old, v in zip(taken.buffers, before, taken):
        row = int(np.prod(v.shape[1:]))
        np.testing.assert_array_equal(b[:20 * row], old[:20 * row])
    check(taken, want)


def test_rows_joining_write_only_theirs_and_grow_by_a_factor():
    """Rows joining one or two at a time, each with a source no longer than the batch's, land in the buffers' spare
    rows: the buffers are replaced only when full, by ones at least 1.5x larger, so the 100 joins that take the batch
    from 2 to 152 rows replace them 11 times (1.5^11 > 76), where append_padded copied the whole batch 100 times."""
    rng = np.random.default_rng(1)
    mask, cross = encoded(rng, 2, 12)
    want = [mask, *(c.copy() for c in cross)]
    held = CrossRows.hold(mask, cross)
    replaced = 0
    for i in range(100):
        new = list(encoded(rng, 1 + i % 2, 12 - i % 5))
        new = [new[0], *new[1]]
        buffers = list(held.buffers)
        held = held.append_rows(CrossRows.hold(new[0], new[1:]), one_thread)
        want = append_padded(want, new)
        replaced += held.buffers[0] is not buffers[0]
        for b, old in zip(held.buffers, buffers):
            assert b is old or b.size >= old.size * 3 // 2
    assert replaced <= 11, replaced
    check(held, want)


def test_a_longer_source_lays_the_rows_out_again_in_place():
    """A joining row with a longer source widens every row's source axis inside the buffer when it has room (rows
    left earlier): the views stay contiguous at the new S, the new positions hold zeros and mask 0."""
    rng = np.random.default_rng(2)
    mask, cross = encoded(rng, 8, 5)
    new_mask, new_cross = encoded(rng, 1, 9)
    want = append_padded([np.take(w, [1, 4], axis=0) for w in [mask, *cross]], [new_mask, *new_cross])
    held = CrossRows.hold(mask, cross).take(np.array([1, 4]), one_thread)     # room: 8 rows of S 5
    buffers = list(held.buffers)
    joined = held.append_rows(CrossRows.hold(new_mask, new_cross), one_thread)   # 3 rows of S 9: 27 <= 40 positions
    assert all(a is b for a, b in zip(joined.buffers, buffers))
    check(joined, want)
    assert not joined[0][:2, 5:].any() and not joined[1][:2, :, 5:].any()


def test_the_encoders_outputs_are_taken_over_and_the_mask_is_copied():
    """translate_batch pays nothing to hold its cross K/V: the encoder's arrays are the buffers (no copy); the mask is
    the caller's (pad_sources), so it is copied and a compaction leaves the caller's array as it was."""
    rng = np.random.default_rng(3)
    mask, cross = encoded(rng, 5, 6)
    kept_mask = mask.copy()
    held = CrossRows.hold(mask, cross)
    assert all(np.shares_memory(v, c) for v, c in zip(held[1:], cross))
    assert not np.shares_memory(held[0], mask)
    held.take(np.array([0, 3]), one_thread)
    np.testing.assert_array_equal(mask, kept_mask)


def test_compact_rows_moves_runs_like_the_gather():
    rng = np.random.default_rng(4)
    for _ in range(200):
        rows, size = int(rng.integers(1, 12)), int(rng.integers(1, 5))
        x = rng.standard_normal(rows * size + 3)
        index = np.flatnonzero(rng.random(rows) < 0.5)
        want = x[:rows * size].reshape(rows, size)[index].ravel()
        compact_rows(x, index, size)
        np.testing.assert_array_equal(x[:len(index) * size], want)
