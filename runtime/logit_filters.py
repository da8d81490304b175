"""Logit filters: each edits a step's log-probs [R, V] in place before the next token is chosen.

A filter is called as `f(log_probs, tokens, row_example, step)`:
  log_probs    float32 [R, V]  the decoder's log-softmax for the R active rows
  tokens       int64 [R, step] what each row generated so far (forced prefix included)
  row_example  int64 [R]       the sentence each row belongs to
  step         int             0 for the first generated token

A filter whose edit is the same for every row says so (`same_for_every_row`): beam search on a GPU then applies
it as a bias [1, V] where the log-probs are (decoding.py, IoBindingEngine.step_top_k).

Scores are sums of the filtered log-probs (the penalties count; the sampling temperature,
top-k and top-p only shape the sampling distribution, see search.Sampler).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .config import ModelConfig
from .options import DecodingOptions

LogitFilter = Callable[[np.ndarray, np.ndarray, np.ndarray, int], None]


class SuppressTokens:
    """PAD and BOS are never generated."""
    same_for_every_row = True

    def __init__(self, token_ids: Sequence[int]):
        self.token_ids = list(token_ids)

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        log_probs[:, self.token_ids] = -np.inf


class SuppressEOSBeforeMin:
    """EOS is forbidden while fewer than `min_length` tokens have been generated."""
    same_for_every_row = True

    def __init__(self, eos_id: int, min_length: int):
        self.eos_id, self.min_length = eos_id, min_length

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        if step < self.min_length:
            log_probs[:, self.eos_id] = -np.inf


class RepetitionPenalty:
    """CTRL's penalty (Keskar et al., 2019) on log-probs: an already generated token's log-prob
    (<= 0) is multiplied by `penalty`, so penalty > 1 makes repeats less likely."""

    def __init__(self, penalty: float):
        self.penalty = np.float32(penalty)

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        if tokens.shape[1] == 0:
            return
        seen = np.zeros(log_probs.shape, dtype=bool)
        seen[np.arange(len(tokens))[:, None], tokens] = True
        log_probs[seen] *= self.penalty


class NoRepeatNGram:
    """Forbid the token that would repeat an n-gram already in the row (fairseq's no_repeat_ngram_size)."""

    def __init__(self, n: int):
        self.n = n

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        n, t = self.n, tokens.shape[1]
        if t < n:
            return
        windows = sliding_window_view(tokens, n, axis=1)                      # [R, t-n+1, n]
        tail = tokens[:, t - n + 1:]                                          # [R, n-1]: the current (n-1)-gram
        match = (windows[:, :, :-1] == tail[:, None, :]).all(axis=2)          # [R, t-n+1]
        rows, starts = np.nonzero(match)
        log_probs[rows, windows[rows, starts, -1]] = -np.inf


class ForcePrefix:
    """Force each sentence's target prefix: during its first len(prefix) steps only the prefix token
    keeps its log-prob (which counts in the score); every other token gets -inf."""

    def __init__(self, prefixes: Sequence[Sequence[int]]):
        self.lengths = np.array([len(p) for p in prefixes], dtype=np.int64)     # [B]
        self.ids = np.zeros((len(prefixes), max(1, int(self.lengths.max(initial=0)))), dtype=np.int64)
        for i, p in enumerate(prefixes):
            self.ids[i, :len(p)] = p

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        rows = np.flatnonzero(step < self.lengths[row_example])
        if len(rows) == 0:
            return
        forced = self.ids[row_example[rows], step]
        keep = log_probs[rows, forced]
        log_probs[rows] = -np.inf
        log_probs[rows, forced] = keep


def build_filters(options: DecodingOptions, config: ModelConfig,
                  prefixes: Optional[Sequence[Sequence[int]]] = None) -> List[LogitFilter]:
    """The filters the options ask for, in the order they apply (the prefix overrides the rest)."""
    filters: List[LogitFilter] = [SuppressTokens([config.pad_id, config.bos_id])]
    if options.min_decoding_length > 0:
        filters.append(SuppressEOSBeforeMin(config.eos_id, options.min_decoding_length))
    if options.repetition_penalty != 1.0:
        filters.append(RepetitionPenalty(options.repetition_penalty))
    if options.no_repeat_ngram_size > 0:
        filters.append(NoRepeatNGram(options.no_repeat_ngram_size))
    if prefixes is not None and any(len(p) for p in prefixes):
        filters.append(ForcePrefix(prefixes))
    return filters
