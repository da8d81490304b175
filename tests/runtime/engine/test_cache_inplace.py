"""The CPU engine's one cache set: the beam reorder, rows joining and a larger capacity done inside the
buffers that hold the cache (runtime/engine/cache_inplace.py), against numpy's copies; and the pool that refits its one set
(runtime/engine/cache_memory.py). No model: the decoding tests run these through the engine."""
from __future__ import annotations

import gc

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2onnx.runtime.engine.cache_inplace import SCRATCH, append_zero_rows, reorder_moves, reorder_rows, widen
from seq2onnx.runtime.engine.cache_memory import CachePool, SpareMemory

H, C, DH = 2, 5, 3                      # heads, capacity, head_dim of the caches below


def cycles(index: np.ndarray) -> int:
    """The cycles of the rows that move (i -> index[i], index[i] != i) that only read each other round."""
    moving = {i: int(s) for i, s in enumerate(index) if s != i}
    seen, count = set(), 0
    for start in moving:
        path = []
        row = start
        while row in moving and row not in seen and row not in path:
            path.append(row)
            row = moving[row]
        if row in path:                                         # the walk came back into itself: a cycle
            count += 1
        seen.update(path)
    return count


def reordered(x: np.ndarray, index: np.ndarray, positions: int) -> np.ndarray:
    """x's buffer after an in-place reorder of its cache [R, H, C, Dh] by index (room for max(R, len(index)) rows)."""
    rows = len(x)
    buffer = np.zeros(max(rows, len(index)) * H * C * DH + 7, dtype=np.float32)     # + 7: a buffer holds more
    buffer[:x.size] = x.ravel()
    reorder_rows(buffer, buffer, x.shape, index, reorder_moves(index), positions)
    return buffer


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12).flatmap(lambda rows: st.tuples(
    st.just(rows), st.lists(st.integers(0, rows - 1), min_size=1, max_size=14), st.integers(0, C))))
def test_in_place_reorder_is_np_take(case):
    """Any index (repeats, rows that leave, more rows than before, cycles): the rows written equal np.take's at
    their first `positions` positions, a row that reads itself is not touched at all, and each row that moves is
    copied once, plus one save in the scratch row per cycle."""
    rows, index, positions = case
    index = np.array(index, dtype=np.int64)
    x = np.random.default_rng(rows).standard_normal((rows, H, C, DH)).astype(np.float32)
    got = reordered(x, index, positions)[:len(index) * H * C * DH].reshape(len(index), H, C, DH)
    np.testing.assert_array_equal(got[:, :, :positions], np.take(x, index, axis=0)[:, :, :positions])
    stays = [i for i in range(min(rows, len(index))) if index[i] == i]
    np.testing.assert_array_equal(got[stays], x[stays])
    moves = reorder_moves(index)
    assert sum(count for dst, _, count in moves if dst != SCRATCH) == int(np.sum(index != np.arange(len(index))))
    assert sum(dst == SCRATCH for dst, _, _ in moves) == cycles(index)


def test_moves_of_a_beam_reorder():
    """Beams that swap go through the scratch row; a row read by two waits for both; consecutive rows that read
    consecutive rows copy as one block."""
    assert reorder_moves([1, 0]) == [(SCRATCH, 0, 1), (0, 1, 1), (1, SCRATCH, 1)]
    assert reorder_moves([1, 0, 0]) == [(2, 0, 1), (SCRATCH, 0, 1), (0, 1, 1), (1, SCRATCH, 1)]
    assert reorder_moves([0, 1, 2, 3]) == []
    assert reorder_moves([2, 3, 2, 3]) == [(0, 2, 2)]                 # rows 2 and 3 stay, 0..1 read them
    assert reorder_moves([0, 3, 4, 5]) == [(1, 3, 2), (3, 5, 1)]     # rows 1, 2 leave: 3 is read, then written


def test_reorder_into_another_buffer_is_np_take():
    """A reorder to more rows than the buffer holds writes into a larger buffer (CachePool.refit): whole rows."""
    x = np.random.default_rng(0).standard_normal((3, H, C, DH)).astype(np.float32)
    index = np.array([2, 2, 0, 1, 1], dtype=np.int64)
    into = np.zeros(len(index) * x[0].size, dtype=np.float32)
    reorder_rows(x.ravel(), into, x.shape, index, reorder_moves(index), 2)
    np.testing.assert_array_equal(into.reshape(len(index), H, C, DH), np.take(x, index, axis=0))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24), st.integers(1, 8), st.integers(1, 17))
def test_widen_in_place_is_the_copy_into_a_larger_cache(blocks, old, more):
    """A cache's capacity grows in place (doubled, or capped at max_positions: any larger) to the layout a copy
    into a new buffer gives: each block's old positions at its new place."""
    new = old + more
    data = np.random.default_rng(blocks).standard_normal(blocks * old).astype(np.float32)
    buffer = np.zeros(blocks * new, dtype=np.float32)
    buffer[:data.size] = data
    widen(buffer, buffer, blocks, old, new)
    into = np.zeros(blocks * new, dtype=np.float32)
    widen(data, into, blocks, old, new)
    want = data.reshape(blocks, old)
    np.testing.assert_array_equal(buffer.reshape(blocks, new)[:, :old], want)
    np.testing.assert_array_equal(into.reshape(blocks, new)[:, :old], want)


def test_rows_join_after_the_cache_with_zeros():
    buffer = np.arange(1, 11, dtype=np.float32)                # 10 floats: a cache of 6 and room for more
    append_zero_rows(buffer, buffer, 6, 3)
    np.testing.assert_array_equal(buffer, [1, 2, 3, 4, 5, 6, 0, 0, 0, 10])
    into = np.full(12, 9, dtype=np.float32)
    append_zero_rows(np.arange(1, 7, dtype=np.float32), into, 6, 4)
    np.testing.assert_array_equal(into, [1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 9, 9])


def test_pool_keeps_one_set_and_refits_it_tensor_by_tensor():
    """sets=1: a buffer that holds the new layout is rewritten in place; one that does not is replaced by a larger
    one (the pool's growth rule), the old let go; the next call gets the one set back from SpareMemory."""
    spare = SpareMemory()
    pool = CachePool(2, spare, sets=1)
    first = pool.views(0, (2, H, C, DH))
    for i, array in enumerate(first):
        array[...] = i + 1
    buffers = list(pool.sets[0])
    seen = []
    assert pool.refit(0, first[0].size, lambda buffer, into: seen.append(into is buffer)) is buffers[0]
    size = 3 * first[0].size
    larger = pool.refit(1, size, lambda buffer, into: into.__setitem__(slice(0, buffer.size), buffer))
    assert seen == [True] and larger is pool.sets[0][1] and larger.size == CachePool.grown(size, buffers[1].size)
    assert np.all(larger[:first[1].size] == 2) and np.all(larger[first[1].size:] == 0)
    kept = pool.sets
    del pool, first
    gc.collect()
    assert spare.set_bytes() == [buffers[0].nbytes + larger.nbytes]
    assert CachePool(2, spare, sets=2).sets[0] == []             # a format-1 pool does not take one set
    spare.give(2, kept)
    again = CachePool(2, spare, sets=1)
    assert again.sets is kept and spare.set_bytes() == []
