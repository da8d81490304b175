"""The m best candidates of each row, best first, ties to the lower index: beam search's selection step
(search.py BeamSearch), kept apart because its speed trick needs a page of its own. numpy only."""
from __future__ import annotations

import numpy as np


def top_candidates(scores: np.ndarray, m: int) -> np.ndarray:
    """Flat indices of the m best scores per row, best first, ties to the lower index.

    Exactly the first m of a stable descending sort: scores [N, C] -> [N, m]. Beam search calls it
    on [sentences, K x vocab] every step, so it avoids a pass of selection over every score. A row is cut
    into blocks and each block's maximum taken (one reduction, the only pass over every score); the m-th
    largest of those maxima is a lower bound of the row's m-th best score (m blocks hold a score at least as
    large), so the blocks whose maximum reaches it hold the row's m best and every score tied with the m-th.
    Only their scores at or above the bound are sorted (value descending, then index). Rows where that
    leaves fewer than m (NaN) or too many (e.g. a -inf bound) take the argpartition path.
    """
    n, c = scores.shape
    if m >= c:
        return np.argsort(-scores, axis=1, kind="stable")[:, :m]
    block = int(2 * np.sqrt(c / m))      # ~sqrt(c m) / 2 maxima; 2x beat 1x and 4x on [16, 4 x 32000], m 8
    if block < 2 or c // block < m:
        return _top_candidates_partition(scores, m)
    starts = np.arange(0, c, block)
    maxima = np.maximum.reduceat(scores, starts, axis=1)                      # [N, blocks]
    bound = np.partition(maxima, len(starts) - m, axis=1)[:, len(starts) - m]   # m-th largest (NaN: largest)
    brow, bcol = np.nonzero(~(maxima < bound[:, None]))              # the blocks that reach it (or hold a NaN)
    cols = bcol[:, None] * block + np.arange(block)                           # [blocks read, block]
    inside = cols < c                                                         # the last block may be short
    cols = np.where(inside, cols, c - 1)
    keep = inside & (scores[brow[:, None], cols] >= bound[brow, None])
    row, col = np.broadcast_to(brow[:, None], cols.shape)[keep], cols[keep]   # row, then col, ascending
    counts = np.bincount(row, minlength=n)
    bad = (counts < m) | (counts > 16 * m * block)
    if not bad.any():
        return _sorted_survivors(scores, row, col, counts, m)
    order = np.empty((n, m), dtype=np.int64)
    order[bad] = _top_candidates_partition(scores[bad], m)
    good = ~bad[row]
    if good.any():
        order[~bad] = _sorted_survivors(scores, row[good], col[good], counts[~bad], m)
    return order


def _sorted_survivors(scores: np.ndarray, row: np.ndarray, col: np.ndarray, counts: np.ndarray, m: int) -> np.ndarray:
    """The first m of each row's survivors (row, col: ascending; counts: per row that has any, >= m each) in
    stable descending order of their scores."""
    return _sorted_values(row, col, scores[row, col], counts, m)


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


def top_beam_candidates(cum: np.ndarray, log_probs: np.ndarray, m: int) -> np.ndarray:
    """top_candidates(cand, m) of the beam candidates cand [A, K*V] = cum[:, :, None] + log_probs.reshape(A, K, V)
    (float32), without writing cand: cum [A, K], log_probs [A*K, V] -> flat ids b * V + v [A, m].

    Float32 rounding is monotone, so a block of one beam's log-probs has as its largest candidate cum + the block's
    largest log-prob: the block maxima come from one reduction over the log-probs, and cand is computed only where
    the blocks that reach the bound are (as in top_candidates). Rows that top_candidates would send to its
    argpartition path write their cand and take it."""
    a, k = cum.shape
    v = log_probs.shape[1]
    block = int(2 * np.sqrt(k * v / m))
    if m >= k * v or block < 2 or v // block < 1 or k * (v // block) < m:
        return top_candidates(_beam_candidates(cum, log_probs), m)
    starts = np.arange(0, v, block)
    nb = len(starts)
    maxima = (cum[:, :, None] + np.maximum.reduceat(log_probs, starts, axis=1).reshape(a, k, nb)).reshape(a, k * nb)
    bound = np.partition(maxima, k * nb - m, axis=1)[:, k * nb - m]         # m-th largest (NaN: largest)
    reach = ~(maxima < bound[:, None])                                        # the blocks that reach it
    # fewer than m candidates above -inf (every row forced, as at forced EOS's step): every block reaches -inf, so
    # such a row takes its finite candidates and then the lowest ids of -inf (_few_finite), reading no more
    few = np.flatnonzero((bound == -np.inf) & ~np.isnan(maxima).any(axis=1))
    if len(few):
        reach[few] = False
    brow, bflat = np.nonzero(reach)                                           # by row, then id
    beam, bcol = np.divmod(bflat, nb)
    cols = bcol[:, None] * block + np.arange(block)                           # [blocks read, block] within a beam
    inside = cols < v
    cols = np.where(inside, cols, v - 1)
    values = cum[brow, beam][:, None] + log_probs[(brow * k + beam)[:, None], cols]   # cand where it is read
    keep = inside & (values >= bound[brow, None])
    row = np.broadcast_to(brow[:, None], cols.shape)[keep]
    flat = (beam[:, None] * v + cols)[keep]                                   # row, then flat id, ascending
    values = values[keep]
    counts = np.bincount(row, minlength=a)
    bad = (counts < m) | (counts > 16 * m * block)
    bad[few] = False
    if not (bad.any() or len(few)):
        return _sorted_values(row, flat, values, counts, m)
    order = np.empty((a, m), dtype=np.int64)
    if bad.any():
        order[bad] = top_candidates(_beam_candidates(cum[bad], log_probs.reshape(a, k, v)[bad].reshape(-1, v)), m)
    for i in few.tolist():
        order[i] = _few_finite(cum[i], log_probs[i * k:(i + 1) * k], maxima[i].reshape(k, nb), block, m)
    good = ~bad[row]                                                        # rows of `few` have no survivors
    if good.any():
        rest = ~bad
        rest[few] = False
        order[rest] = _sorted_values(row[good], flat[good], values[good], counts[rest], m)
    return order


def _few_finite(cum: np.ndarray, log_probs: np.ndarray, maxima: np.ndarray, block: int, m: int) -> np.ndarray:
    """One sentence's m best candidates when fewer than m are above -inf (none NaN): those, best first (equal ones by
    id), then the lowest flat ids among the -inf. cum [K], log_probs [K, V], maxima [K, blocks] of the candidates."""
    k, v = log_probs.shape
    flat, values = [], []
    for b, c in zip(*np.nonzero(maxima > -np.inf)):                          # the blocks that hold a finite one
        cand = cum[b] + log_probs[b, c * block:(c + 1) * block]
        at = np.flatnonzero(cand > -np.inf)
        flat.append(b * v + c * block + at)
        values.append(cand[at])
    flat_ids, vals = (np.concatenate(x) if x else np.zeros(0) for x in (flat, values))
    best = flat_ids[np.lexsort((flat_ids, -vals))].astype(np.int64)
    rest = [best]
    need = m - len(best)
    for b in range(k):                                                        # the -inf ones, by flat id
        if need <= 0:
            break
        ids = np.flatnonzero(~(cum[b] + log_probs[b] > -np.inf))[:need]
        rest.append(b * v + ids)
        need -= len(ids)
    return np.concatenate(rest)[:m]


def _beam_candidates(cum: np.ndarray, log_probs: np.ndarray) -> np.ndarray:
    a, k = cum.shape
    return (cum[:, :, None] + log_probs.reshape(a, k, -1)).reshape(a, -1)


def _sorted_values(row: np.ndarray, col: np.ndarray, values: np.ndarray, counts: np.ndarray, m: int) -> np.ndarray:
    """_sorted_survivors, given the survivors' values."""
    order = np.lexsort((-values, row))                     # stable: equal scores keep the lower index first
    starts = np.cumsum(counts) - counts
    return col[order[starts[:, None] + np.arange(m)]]
