"""The CPU engine's cache rewritten inside the buffers that hold it (cpu.py ArrayEngine, cache_memory.py CachePool):
a beam reorder, rows joining, a larger capacity. With these the format-2/3 engine keeps one set of cache buffers, not
a second set to gather into (as large as the cache itself). numpy only. The cross K/V and
mask of a batch (cache_memory.py CrossRows) are rewritten by the same functions, and rows leaving by compact_rows.

A cache tensor [R, H, C, Dh] lives at the start of its flat float32 buffer, rows outermost: row r at r x H x C x Dh.
Each function takes `buffer` (the tensor's memory now) and `into` (where the result goes): `into is buffer` rewrites
it in place; another array (a larger buffer, CachePool.refit) receives a plain copy.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Set, Tuple, Union

import numpy as np

SCRATCH = -1                # a move's row -1: the scratch row beside the cache, which breaks a cycle
Move = Tuple[int, int, int]  # (dst, src, count): rows dst..dst+count-1 = rows src..src+count-1 (SCRATCH: count 1)


def reorder_moves(index: Union[Sequence[int], np.ndarray]) -> List[Move]:
    """The row copies that make x[:len(index)] = x[index] inside x (index: rows of x, repeats allowed; x has
    max(len(index), its rows) rows), in an order that overwrites no row before every row that reads it was written.

    A row i with index[i] == i is not copied. A row waits until each row that reads it has been written; rows that
    read each other round (a cycle: two beams that swap) wait on each other, and one of them is first saved in the
    scratch row, which its reader then reads. The rows ready at the same time (a wave) read none of each other, so
    consecutive rows of a wave that read consecutive rows copy as one block."""
    src: Dict[int, int] = {i: int(s) for i, s in enumerate(index) if int(s) != i}     # the rows to write
    readers: Dict[int, Set[int]] = {}                                                  # row -> rows still to read it
    for i, s in src.items():
        readers.setdefault(s, set()).add(i)
    ready = sorted(i for i in src if i not in readers)
    moves: List[Move] = []
    while src:
        if not ready:       # every row left has one reader left, a row left: only cycles remain
            cycle = min(src)
            moves.append((SCRATCH, cycle, 1))
            (reader,) = readers.pop(cycle)
            src[reader] = SCRATCH
            ready = [cycle]
        wave, ready = ready, []
        run: List[int] = []                      # [dst, src, count] of the block being joined
        for i in wave:
            s = src.pop(i)
            if run and s >= 0 and run[1] >= 0 and run[0] + run[2] == i and run[1] + run[2] == s:
                run[2] += 1
            else:
                if run:
                    moves.append((run[0], run[1], run[2]))
                run = [i, s, 1]
            if s >= 0:
                waiting = readers[s]
                waiting.discard(i)
                if not waiting:
                    del readers[s]
                    if s in src:
                        ready.append(s)
        moves.append((run[0], run[1], run[2]))
        ready.sort()
    return moves


def reorder_rows(buffer: np.ndarray, into: np.ndarray, shape: Tuple[int, ...], index: np.ndarray,
                 moves: List[Move], positions: int) -> None:
    """Rows [len(index), H, C, Dh] of `into` = rows index of the cache [R, H, C, Dh] = `shape` in `buffer`.

    In place (moves: reorder_moves(index)): only the rows that move, only their first `positions` positions (the
    longest row's written length; the rest of a row keeps finite values the mask hides), through one scratch row when
    a cycle needs it. Into another buffer: np.take of whole rows."""
    rows, row = shape[0], shape[1:]
    size = int(np.prod(row))
    if into is not buffer:
        src = buffer[:rows * size].reshape(shape)
        np.take(src, index, axis=0, out=into[:len(index) * size].reshape(len(index), *row), mode="wrap")
        return                                   # "wrap": unbuffered; index is in range
    x = buffer[:max(rows, len(index)) * size].reshape(-1, *row)[:, :, :positions]     # [max(R, R'), H, P, Dh]
    scratch = x[:0]                                                  # a row, once a cycle needs one
    for dst, src_row, count in moves:
        if SCRATCH in (dst, src_row) and not len(scratch):
            scratch = np.empty((1, *x.shape[1:]), dtype=x.dtype)                    # [1, H, P, Dh]
        out = scratch if dst == SCRATCH else x[dst:dst + count]
        out[...] = scratch if src_row == SCRATCH else x[src_row:src_row + count]


def widen(buffer: np.ndarray, into: np.ndarray, blocks: int, old: int, new: int) -> None:
    """A cache [R, H, C, Dh] in `buffer` laid out again as [R, H, C', Dh] in `into` (C' > C): its R x H `blocks` of
    `old` = C x Dh floats go from k x old to k x new (`new` = C' x Dh); positions C.. of each block hold finite values
    (whatever was there, or zeros) that the mask hides.

    In place, from the last block down, in groups whose new places lie above every block not yet moved (a group
    lo..hi-1 with lo x new >= hi x old), so each group is one numpy copy without overlap: ~log2(blocks) copies when the
    capacity doubles. A group of one block may overlap itself, and a 1-d copy then moves like memmove."""
    if into is not buffer:
        into[:blocks * new].reshape(blocks, new)[:, :old] = buffer[:blocks * old].reshape(blocks, old)
        return
    hi = blocks
    while hi > 1:                                # block 0 stays where it is
        lo = min(hi - 1, -(-hi * old // new))
        if hi - lo == 1:
            buffer[lo * new:lo * new + old] = buffer[lo * old:hi * old]
        else:
            buffer[lo * new:hi * new].reshape(hi - lo, new)[:, :old] = buffer[lo * old:hi * old].reshape(hi - lo, old)
        hi = lo


def append_zero_rows(buffer: np.ndarray, into: np.ndarray, size: int, more: int) -> None:
    """`more` rows of zeros (`more` floats) after a cache of `size` floats: into[:size] = buffer[:size], then zeros."""
    if into is not buffer:
        into[:size] = buffer[:size]
    into[size:size + more] = 0


def compact_rows(buffer: np.ndarray, index: np.ndarray, size: int) -> None:
    """Rows `index` (strictly increasing: the rows that stay when others leave) of the rows of `size` values at the
    start of `buffer` moved to rows 0..len(index)-1, in place. Only the rows after the first gap move, each run of
    consecutive rows as one copy; a run that overlaps its new place moves down, and a 1-d copy moves like memmove."""
    if not len(index):
        return
    starts = np.flatnonzero(np.diff(index) != 1) + 1                  # where a run of consecutive rows begins
    for lo, hi in zip([0, *starts.tolist()], [*starts.tolist(), len(index)]):
        src = int(index[lo])
        if src != lo:
            buffer[lo * size:hi * size] = buffer[src * size:(src + hi - lo) * size]
