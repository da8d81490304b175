"""The decoder's state between steps, owned in one place: the self-attention cache (with each row's written length),
the cross K/V and the encoder mask, and how rows map onto them. The decoding loop (decoding.py) steps it, keeps the
rows it goes on with, and, in a continuous batch (serve/continuous.py), adds newly encoded rows to it.

The anchors: openai/whisper's `rearrange_kv_cache`, fairseq's `reorder_incremental_state`, CTranslate2's
`DecoderState`. It is written over the engine's methods (engine/base.py: encode, hold_encoded, step, step_top_k,
step_search, take, and append_rows to extend), so the CPU and CUDA engines share it; where the cross K/V and mask live, and
whether rows joining and leaving copy them or move them in place (the CPU engine: cache_memory.CrossRows), is the
engine's business.

Rows and cross rows: with `group` G > 1 the G rows of a sentence share its one cross K/V row (a beam search's K
rows, when the decoder graph takes cross K/V per sentence: engine.cross_per_sentence); with G = 1 every row has its
own copy. `keep(parents)` takes, for the rows that go on, each one's parent row; a parent is always a row of the
same sentence (a beam search reorders within a sentence; a row that ends leaves), so the cross rows stay right when
only the cache is gathered, and the cross K/V are gathered only when rows leave or sentences change places
(place_rows).

Rows at different positions: `extend` adds rows that have written nothing (length 0) to rows that have; the decoder
step of contract 3 (graph_io.py) takes each row's position, older contracts one for all (engine
.rows_at_own_positions): extend needs the first, or a state that has not stepped yet.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np

from ..engine.base import Engine


class DecoderState:
    """encoder_mask [B, S] and cross (2 per layer, [B, H, S, Dh]) for R = B x group rows, held together as the
    engine keeps them (`encoded`: engine.hold_encoded, which takes the arrays over); past: the cache (None before the
    first step)."""

    def __init__(self, engine: Engine, encoder_mask: Any, cross: List[Any], group: int = 1):
        self.engine, self.group = engine, group
        self.encoded = engine.hold_encoded(encoder_mask, cross)         # [encoder_mask, *cross]
        self.past: Optional[Any] = None
        self.rows = engine.row_count(encoder_mask) * group

    @property
    def encoder_mask(self) -> Any:
        return self.encoded[0]

    @property
    def cross(self) -> List[Any]:
        return self.encoded[1:]

    @classmethod
    def encode(cls, engine: Engine, input_ids: np.ndarray, attention_mask: np.ndarray,
               row_example: Optional[np.ndarray] = None, group: int = 1) -> "DecoderState":
        """Run the encoder on the sources [B, S] once; rows: row_example[r] is row r's source (None: one row each),
        or with group G > 1 the G rows of each source share its cross row (row_example then is unused)."""
        encoder_mask, cross = engine.encode(input_ids, attention_mask)
        if group == 1 and row_example is not None and not np.array_equal(row_example, np.arange(len(input_ids))):
            encoder_mask, *cross = engine.take([encoder_mask, *cross], row_example)   # each source -> its rows
        return cls(engine, encoder_mask, cross, group)

    # --- a step --------------------------------------------------------------------------------------------
    def step(self, last: np.ndarray, with_attention: bool = False) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """last [R, 1] int64 -> (log_probs [R, V] numpy, attention [R, S] numpy or None); the cache advances."""
        if with_attention:
            log_probs, self.past, attention = self.engine.step(last, self.encoder_mask, self.past, self.cross,
                                                               with_attention=True)
            return log_probs, attention
        log_probs, self.past = self.engine.step(last, self.encoder_mask, self.past, self.cross)
        return log_probs, None

    def step_top_k(self, last: np.ndarray, bias: np.ndarray, k: int, with_attention: bool = False):
        """engine.step_top_k: -> (values [R, k], indices [R, k], attention or None)."""
        values, indices, self.past, *att = self.engine.step_top_k(last, self.encoder_mask, self.past, self.cross,
                                                                  bias, k, with_attention=with_attention)
        return values, indices, att[0] if att else None

    def step_search(self, last: np.ndarray, inputs: dict, renormalize: bool, with_attention: bool = False):
        """engine.step_search: -> (the search head's outputs, attention or None)."""
        outputs, self.past, *att = self.engine.step_search(last, self.encoder_mask, self.past, self.cross, inputs,
                                                           renormalize, with_attention=with_attention)
        return outputs, att[0] if att else None

    # --- the rows ------------------------------------------------------------------------------------------
    def keep(self, parents: np.ndarray) -> None:
        """Go on with len(parents) rows, row i continuing parents[i] (a row of the same sentence): one gather of
        the cache when beams reorder; the cross K/V and mask too when rows leave (by sentence when shared)."""
        parents = np.asarray(parents, dtype=np.int64)
        if len(parents) == self.rows and np.array_equal(parents, np.arange(self.rows)):
            return
        if len(parents) == 0:
            self.past, self.rows = None, 0
            return
        by = parents[::self.group] // self.group if self.group > 1 else parents
        if len(parents) < self.rows or not np.array_equal(by, np.arange(len(by))):   # rows left, or moved
            self.encoded = self.engine.take(self.encoded, by)
        if self.past is not None:
            self.past = self.engine.take(self.past, parents)
        self.rows = len(parents)

    def extend(self, other: "DecoderState") -> None:
        """Append `other`'s rows (newly encoded: it has not stepped, with as many rows per cross row) after this
        state's: their cache is empty (length 0), their cross K/V and mask are padded to the longer source with
        masked positions. With G > 1 rows per cross row, every Decoding of the batch keeps G rows per sentence (beam
        searches of beam size G), so that keep gathers the cross K/V by sentence."""
        if other.past is not None or (self.rows and other.group != self.group):
            raise ValueError("extend adds rows that have not stepped, of this state's rows per cross row")
        if self.rows == 0:
            self.encoded, self.group, self.past, self.rows = other.encoded, other.group, None, other.rows
            return
        if self.past is not None and not self.engine.rows_at_own_positions:
            raise ValueError("this decoder step takes one position for all rows (a package before manifest format 4): "
                             "rows cannot join a batch that has stepped")
        self.encoded = self.engine.append_rows(self.encoded, other.encoded)
        if self.past is not None:
            self.past = self.engine.append_empty_cache(self.past, other.rows)
        self.rows += other.rows


def place_rows(sources: np.ndarray, group: int = 1) -> Tuple[np.ndarray, np.ndarray]:
    """Where the rows that go on sit in a batch after a step: sources[k] is the batch row that new row k goes on from
    (RunningBatch: the rows of its Decodings that go on, each Decoding's in its own order; RowSearch: its own rows
    that go on) -> (places, index): new row k sits at places[k], a permutation of 0..n-1, and index[places] =
    sources is keep's parents. A row keeps its place where it can (its source lies within the first n rows, and no
    earlier row took it); the others take the places left free, in order. So the cache and cross K/V (keep: a row
    that keeps its place is not copied) move about as many rows as ended, wherever in the batch they ended: in a
    continuous batch a few rows end at nearly every step, anywhere. With group G > 1 the rows go G at a time (a
    sentence's G beams share its cross row), placed by their first row."""
    n = len(sources) // group
    units = np.asarray(sources, dtype=np.int64)[::group] // group
    places = np.full(n, -1, dtype=np.int64)
    _, first = np.unique(units, return_index=True)        # the first row to go on from each unit
    first = first[units[first] < n]
    places[first] = units[first]
    free = np.ones(n, dtype=bool)
    free[units[first]] = False
    places[places < 0] = np.flatnonzero(free)
    places = (places[:, None] * group + np.arange(group)).ravel()
    index = np.empty(len(places), dtype=np.int64)
    index[places] = sources
    return places, index

