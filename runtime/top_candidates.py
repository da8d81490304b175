"""The m best candidates of each row, best first, ties to the lower index: beam search's selection step
(decoding.py BeamSearch), kept apart because its speed trick needs a page of its own. numpy only."""
from __future__ import annotations

import numpy as np


def top_candidates(scores: np.ndarray, m: int) -> np.ndarray:
    """Flat indices of the m best scores per row, best first, ties to the lower index.

    Exactly the first m of a stable descending sort: scores [N, C] -> [N, m]. Beam search calls it
    on [sentences, K x vocab] every step, so it avoids a pass of selection over every score: the
    m-th best of a strided sample of a row is a lower bound of the row's m-th best, so the scores
    at or above it hold the row's m best and every score tied with the m-th; only those few are
    sorted (value descending, then index). Rows where the bound lets too many through (e.g. -inf
    bounds at the first beam step), or too few (NaN), take the argpartition path.
    """
    n, c = scores.shape
    if m >= c:
        return np.argsort(-scores, axis=1, kind="stable")[:, :m]
    stride = int(np.sqrt(c / m) / 4)                  # sample ~4 sqrt(c m) scores; ~m * stride pass the bound
    if stride < 2 or c // stride < m:
        return _top_candidates_partition(scores, m)
    bound = -np.partition(-scores[:, ::stride], m - 1, axis=1)[:, m - 1]    # [N], <= the row's m-th best
    keep = scores >= bound[:, None]
    counts = np.count_nonzero(keep, axis=1)
    bad = (counts < m) | (counts > 16 * m * stride)
    if bad.any():
        order = np.empty((n, m), dtype=np.int64)
        order[bad] = _top_candidates_partition(scores[bad], m)
        good = np.flatnonzero(~bad)
        if len(good):
            order[good] = _sorted_survivors(scores[good], keep[good], counts[good], m)
        return order
    return _sorted_survivors(scores, keep, counts, m)


def _sorted_survivors(scores: np.ndarray, keep: np.ndarray, counts: np.ndarray, m: int) -> np.ndarray:
    """The first m of each row's kept scores in stable descending order (every row keeps >= m)."""
    flat = np.flatnonzero(keep)                                                # ascending
    row, col = np.divmod(flat, keep.shape[1])
    order = np.lexsort((-scores[row, col], row))           # stable: equal scores keep the lower index first
    starts = np.cumsum(counts) - counts
    return col[order[starts[:, None] + np.arange(m)]]


def _top_candidates_partition(scores: np.ndarray, m: int) -> np.ndarray:
    """top_candidates through an argpartition of every row; rows where the m-th value is tied
    beyond m fall back to the full stable sort."""
    neg = -scores
    part = np.argpartition(neg, m - 1, axis=1)[:, :m]                        # the m best, unordered
    vals = np.take_along_axis(neg, part, axis=1)
    order = np.take_along_axis(part, np.lexsort((part, vals), axis=1), axis=1)
    threshold = vals.max(axis=1, keepdims=True)
    ambiguous = (neg <= threshold).sum(axis=1) > m                            # a tie straddles the cut
    if ambiguous.any():
        order[ambiguous] = np.argsort(neg[ambiguous], axis=1, kind="stable")[:, :m]
    return order
