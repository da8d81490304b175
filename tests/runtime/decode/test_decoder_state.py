"""DecoderState (runtime/decode/decoder_state.py) and RunningBatch (runtime/decode/decoding.py) over a small engine
of this file: numpy arrays whose values say which row they came from, so that every gather, append and step can be
checked row by row. The decoding loop's searches and filters are the real ones; the engine is the one part that is
not (the real engines' rows are checked against whole translations in runtime/serve/test_serve_invariance.py and
runtime/engine/test_cross_rows.py).

The engine "translates" by copying: at a row's position p its log-probs favour the row's source id at p, then EOS, so
every sentence's best hypothesis is its source, whatever rows it shares a step with."""
from __future__ import annotations

from typing import Any, List, Tuple

import numpy as np
import pytest

from seq2onnx.runtime.decode.decoder_state import DecoderState
from seq2onnx.runtime.decode.decoding import Decoding, RunningBatch, decode
from seq2onnx.runtime.engine.base import Engine
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.package.config import ModelConfig

CONFIG = ModelConfig(vocab_size=16, d_model=8, n_heads=1, d_ff=8, encoder_layers=1, decoder_layers=1,
                     max_positions=32)
EOS = CONFIG.eos_id


class Cache(tuple):
    """(tokens [R, T] int64, -1 where nothing is written; length [R] int64)."""


class CopyEngine(Engine):
    """The cross K/V are the sources' ids as float32 [B, S], the encoder mask the attention mask; the cache is
    each row's fed tokens. Counts its gathers, so that a test sees which keep moved what."""
    rows_at_own_positions = True

    def __init__(self, rows_at_own_positions: bool = True):
        self.rows_at_own_positions = rows_at_own_positions
        self.takes: List[str] = []

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Tuple[Any, List[Any]]:
        return attention_mask.copy(), [input_ids.astype(np.float32)]

    def step(self, input_ids, encoder_mask, past, cross, with_attention: bool = False):
        rows = len(input_ids)
        if past is None:
            past = Cache((np.full((rows, 0), -1, dtype=np.int64), np.zeros(rows, dtype=np.int64)))
        tokens, length = past
        width = max(tokens.shape[1], int(length.max(initial=0)) + 1)
        grown = np.full((rows, width), -1, dtype=np.int64)
        grown[:, :tokens.shape[1]] = tokens
        grown[np.arange(rows), length] = input_ids[:, 0]
        group = rows // len(encoder_mask)                    # rows per cross row
        sources = cross[0][np.arange(rows) // group].astype(np.int64)                # [R, S]
        lengths = encoder_mask[np.arange(rows) // group].sum(axis=1)
        log_probs = np.full((rows, CONFIG.vocab_size), -8.0, dtype=np.float32)
        at = np.minimum(length, lengths - 1)                 # the source id at the row's position, then EOS
        log_probs[np.arange(rows), sources[np.arange(rows), at]] = -0.1
        return log_probs, Cache((grown, length + 1))

    def take(self, values, index):
        index = np.asarray(index)
        if isinstance(values, Cache):
            self.takes.append("cache")
            return Cache((values[0][index], values[1][index]))
        self.takes.append("encoded")
        return [v[index] for v in values]

    def append_rows(self, values, more):
        width = max(values[0].shape[1], more[0].shape[1])

        def pad(v):                                   # masked positions: zeros
            return np.concatenate([v, np.zeros((len(v), width - v.shape[1]), v.dtype)], axis=1)
        return [np.concatenate([pad(a), pad(b)]) for a, b in zip(values, more)]

    def append_empty_cache(self, cache, n):
        tokens, length = cache
        return Cache((np.concatenate([tokens, np.full((n, tokens.shape[1]), -1, dtype=np.int64)]),
                      np.concatenate([length, np.zeros(n, dtype=np.int64)])))

    def capacity_for(self, length: int, capacity: int) -> int:
        return min(max(capacity, length + 1), CONFIG.max_positions)


def encoded(engine: Engine, sources: List[List[int]], group: int = 1) -> DecoderState:
    width = max(len(s) for s in sources)
    ids = np.array([s + [CONFIG.pad_id] * (width - len(s)) for s in sources], dtype=np.int64)
    mask = (np.arange(width) < np.array([len(s) for s in sources])[:, None]).astype(np.int64)
    return DecoderState.encode(engine, ids, mask, group=group)


def fed(state: DecoderState) -> List[List[int]]:
    """Each row's fed tokens, as its cache holds them."""
    tokens, length = state.past
    return [tokens[r, :length[r]].tolist() for r in range(state.rows)]


# --- DecoderState ------------------------------------------------------------------------------------------
def test_keep_gathers_the_cache_of_each_rows_parent():
    engine = CopyEngine()
    state = encoded(engine, [[5, 6, EOS], [7, EOS]])
    state.step(np.array([[4], [9]]))
    engine.takes.clear()
    state.keep(np.array([0, 1]))                      # every row goes on from itself: nothing moves
    assert engine.takes == [] and state.rows == 2
    state.keep(np.array([1, 0]))                      # rows change places: the cache and the cross rows follow
    assert sorted(engine.takes) == ["cache", "encoded"]
    assert fed(state) == [[9], [4]]
    assert state.cross[0].tolist() == [[7, EOS, 0], [5, 6, EOS]]
    assert state.encoder_mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_keep_with_shared_cross_rows_gathers_them_by_sentence():
    """group 2: a sentence's two rows share its cross row. Beams reordering within a sentence gather the cache
    only; a sentence leaving gathers the cross rows by sentence."""
    engine = CopyEngine()
    state = encoded(engine, [[5, 6, EOS], [7, EOS]], group=2)
    assert state.rows == 4 and len(state.encoder_mask) == 2
    state.step(np.array([[10], [11], [12], [13]]))
    engine.takes.clear()
    state.keep(np.array([1, 1, 2, 3]))                # sentence 0's beams both go on from its row 1
    assert engine.takes == ["cache"] and fed(state) == [[11], [11], [12], [13]]
    state.keep(np.array([2, 3]))                      # sentence 0 ends: sentence 1's rows and cross row remain
    assert sorted(engine.takes) == ["cache", "cache", "encoded"]
    assert fed(state) == [[12], [13]] and state.cross[0].tolist() == [[7, EOS, 0]]


def test_keep_no_rows_empties_the_state():
    engine = CopyEngine()
    state = encoded(engine, [[5, EOS]])
    state.step(np.array([[4]]))
    state.keep(np.array([], dtype=np.int64))
    assert state.rows == 0 and state.past is None


def test_extend_adds_rows_that_have_written_nothing():
    engine = CopyEngine()
    state = encoded(engine, [[5, EOS]])
    state.step(np.array([[4]]))
    state.extend(encoded(engine, [[7, 8, 9, EOS]]))   # a longer source: the mask and cross K/V are padded
    assert state.rows == 2
    assert state.encoder_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert state.cross[0].tolist() == [[5, EOS, 0, 0], [7, 8, 9, EOS]]
    assert fed(state) == [[4], []]
    state.step(np.array([[4], [4]]))                  # each row writes at its own position
    assert fed(state) == [[4, 4], [4]]


def test_extend_into_an_empty_state_takes_the_other_rows():
    engine = CopyEngine()
    state = encoded(engine, [[5, EOS]])
    state.keep(np.array([], dtype=np.int64))
    state.extend(encoded(engine, [[7, EOS], [8, EOS]], group=1))
    assert state.rows == 2 and state.past is None and state.cross[0].tolist() == [[7, EOS], [8, EOS]]


def test_extend_refuses_rows_that_stepped_and_a_step_of_one_position():
    engine = CopyEngine()
    state = encoded(engine, [[5, EOS]])
    other = encoded(engine, [[7, EOS]])
    other.step(np.array([[4]]))
    with pytest.raises(ValueError, match="have not stepped"):
        state.extend(other)
    one_position = CopyEngine(rows_at_own_positions=False)
    state = encoded(one_position, [[5, EOS]])
    state.extend(encoded(one_position, [[7, EOS]]))   # before the first step: allowed
    state.step(np.array([[4], [4]]))
    with pytest.raises(ValueError, match="one position for all rows"):
        state.extend(encoded(one_position, [[8, EOS]]))


# --- RunningBatch ------------------------------------------------------------------------------------------
GREEDY = DecodingOptions(beam_size=1)
BEAM = DecodingOptions(beam_size=2)
SOURCES = [[5, 6, 7, EOS], [8, EOS], [9, 10, EOS]]


def best(decoding: Decoding) -> List[List[int]]:
    return [h[0].tokens for h in decoding.hypotheses()]


@pytest.mark.parametrize("options", [GREEDY, BEAM], ids=["greedy", "beam"])
def test_a_decoding_that_joins_a_running_batch_decodes_as_alone(options):
    engine = CopyEngine()
    alone = [[h[0].tokens for h in decode(engine, CONFIG, [s], options)][0] for s in SOURCES]
    assert alone == [s[:-1] for s in SOURCES]                  # the engine copies its source
    first, second = Decoding(CONFIG, SOURCES[:2], options), Decoding(CONFIG, SOURCES[2:], options)
    batch = RunningBatch(engine, CONFIG, key=("beam", 2))
    assert batch.key == ("beam", 2) and not batch.has_stepped and batch.can_add()
    batch.add([first])
    assert batch.decodings == (first,) and batch.rows == first.rows
    assert batch.step() == [] and batch.has_stepped and batch.can_add()
    batch.add([second])                                        # joins after a step
    assert batch.decodings == (first, second) and batch.rows == first.rows + second.rows
    ended: List[Decoding] = []
    while batch.decodings:
        ended += batch.step()
    assert set(map(id, ended)) == {id(first), id(second)} and batch.rows == 0 and not batch.has_stepped
    assert best(first) + best(second) == alone


def test_a_dropped_decoding_leaves_with_its_rows():
    engine = CopyEngine()
    first, second = Decoding(CONFIG, SOURCES[:1], GREEDY), Decoding(CONFIG, SOURCES[1:], GREEDY)
    batch = RunningBatch(engine, CONFIG)
    batch.add([first, second])
    batch.step()
    batch.drop(first)
    assert batch.decodings == (second,) and batch.rows == second.rows and first.done
    while batch.decodings:
        batch.step()
    assert best(second) == [s[:-1] for s in SOURCES[1:]]


def test_rows_join_only_before_the_first_step_of_a_one_position_step():
    batch = RunningBatch(CopyEngine(rows_at_own_positions=False), CONFIG)
    batch.add([Decoding(CONFIG, SOURCES[:1], GREEDY)])
    assert batch.can_add()
    batch.step()
    assert batch.has_stepped and not batch.can_add()


def test_clear_lets_every_decoding_go():
    batch = RunningBatch(CopyEngine(), CONFIG)
    batch.add([Decoding(CONFIG, SOURCES, GREEDY)])
    batch.step()
    batch.clear()
    assert batch.decodings == () and batch.rows == 0 and not batch.has_stepped and batch.can_add()
