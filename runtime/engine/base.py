"""The engine interface: what the decoding loop (decode/decoding.py, decode/decoder_state.py) and the server
(serve/continuous.py) call on an engine, and the flags they read, each declared here once. The CPU engine
(cpu.py: numpy arrays, InferenceSession runs) and the CUDA engine (cuda.py: OrtValues that stay on the device,
IO binding) derive from it through session.GraphEngine (the two sessions and the names they bind).

Where tensors live (numpy on CPU, OrtValues on CUDA) and how the cache is kept (format 1: grown by the graph;
format 2 and 3: a fixed-capacity buffer the graph writes in place) is the engine's business: the loop hands back
what the engine gave it. Rows: R = sum over active sentences of their width; with cross_per_sentence the encoder
mask and cross K/V have one row per sentence (R / G, G rows per sentence), else R.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import Seq2OnnxError


class Engine(ABC):
    """Encode sources, step the decoder, gather rows of what it hands back (abstract: every engine has them); the
    rest an engine has where its flags say so (step_top_k, step_search) or where the caller needs it (rows joining a
    batch that stepped: append_rows, append_empty_cache; the server's length classes: capacity_for)."""
    cross_per_sentence = False      # the decoder step takes cross K/V per sentence (R = B x G rows)
    rows_at_own_positions = False   # contract 3: each row its own position, so rows may join a batch that stepped
    picks_top_k = False             # has step_top_k (the CUDA engine: beam search reads [R, 2K], not [R, V])
    searches_on_device = False      # has step_search (the search head graph: [R] or [sentences, 2K] come back)
    has_attention = False           # the decoder step has the cross_attention output (format 2 on)
    decoder_path = "the decoder step graph"

    # --- encoding and stepping -------------------------------------------------------------------------------
    @abstractmethod
    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Tuple[Any, List[Any]]:
        """input_ids, attention_mask [B, S] int64 -> (encoder_mask, cross): cross is 2 per decoder layer."""

    @abstractmethod
    def step(self, input_ids: np.ndarray, encoder_mask: Any, past: Optional[Any], cross: List[Any],
             with_attention: bool = False) -> Tuple[Any, ...]:
        """input_ids [R, 1] -> (log_probs [R, V] numpy, present[, attention [R, S] numpy with with_attention]);
        past None on the first step. A past given to a step is spent: only the present returned is valid."""

    def step_top_k(self, input_ids: np.ndarray, encoder_mask: Any, past: Optional[Any], cross: List[Any],
                   bias: np.ndarray, k: int, with_attention: bool = False) -> Tuple[Any, ...]:
        """With picks_top_k: step, then each row's k best of log_probs + bias [1, V] picked where the log-probs are
        -> (values [R, k], indices [R, k], present[, attention])."""
        raise NotImplementedError(f"{type(self).__name__} has no step_top_k (picks_top_k is False)")

    def step_search(self, input_ids: np.ndarray, encoder_mask: Any, past: Optional[Any], cross: List[Any],
                    inputs: Dict[str, np.ndarray], renormalize: bool, with_attention: bool = False) -> Tuple[Any, ...]:
        """With searches_on_device: step, then the search head (decoding.head_plan) where the log-probs are ->
        (outputs, present[, attention]): greedy's ids and scores [R], or beam search's 2K best candidates [A, 2K]."""
        raise NotImplementedError(f"{type(self).__name__} has no step_search (searches_on_device is False)")

    # --- rows --------------------------------------------------------------------------------------------------
    def hold_encoded(self, encoder_mask: Any, cross: List[Any]) -> List[Any]:
        """[encoder_mask, *cross] as the list this engine's take and append_rows work on (the CPU engine: in memory
        that rows join and leave in place, cache_memory.CrossRows); it may take over the arrays it is given."""
        return [encoder_mask, *cross]

    def row_count(self, value: Any) -> int:
        """The rows of a value this engine handed back (an encoder mask, a cross K/V)."""
        return int(value.shape[0])

    @abstractmethod
    def take(self, values: List[Any], index: np.ndarray) -> List[Any]:
        """values (a cache, or held encoder mask and cross K/V) gathered along their rows: row i is values' index[i]."""

    def append_rows(self, values: List[Any], more: List[Any]) -> List[Any]:
        """Held masks and cross K/V with `more`'s rows after theirs, padded to the longer source
        (DecoderState.extend)."""
        raise NotImplementedError(f"{type(self).__name__} cannot add rows to a batch")

    def append_empty_cache(self, cache: Any, n: int) -> Any:
        """The cache with n rows that have written nothing (length 0) after its own (DecoderState.extend)."""
        raise NotImplementedError(f"{type(self).__name__} cannot add rows to a batch")

    # --- sizes and errors --------------------------------------------------------------------------------------
    def capacity_for(self, length: int, capacity: int) -> int:
        """Format 2: the cache capacity to hold `length` + 1 positions, from `capacity` now."""
        raise NotImplementedError(f"{type(self).__name__} has no cache capacity")

    def decoder_path_for(self, rows: int) -> str:
        """The file of the graph that steps `rows` rows, for errors about its output."""
        return self.decoder_path

    def no_attention_error(self) -> Seq2OnnxError:
        return Seq2OnnxError(f"{self.decoder_path} has no cross-attention output (a format_version 1 package): "
                             f"re-export the model with `seq2onnx export` to get attention and alignments")
