"""Logit filters: each edits a step's log-probs [R, V] in place before the next token is chosen.

A filter is called as `f(log_probs, tokens, row_example, step)`:
  log_probs    float32 [R, V]  the decoder's log-softmax for the R active rows
  tokens       int64 [R, step] what each row generated so far (forced prefix included)
  row_example  int64 [R]       the sentence each row belongs to
  step         int             0 for the first generated token

Each derives from LogitFilter and declares what the search head may do with it (decoding.py head_plan,
IoBindingEngine.step_search and step_top_k): an edit the same for every row (`same_for_every_row`) is applied as a
bias [1, V] where the log-probs are, as are forced tokens (`forces_token`: a forced id per row) and `renormalizes`.

Scores are sums of the filtered log-probs (the penalties count; the sampling temperature,
top-k and top-p only shape the sampling distribution, see search.Sampler).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import List, Optional, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ..package.config import ModelConfig
from ..options import DecodingOptions



class LogitFilter(ABC):
    """f(log_probs, tokens, row_example, step) edits log_probs in place; the flags say how the search head takes it."""
    same_for_every_row = False      # the edit is one bias [1, V] for all rows
    forces_token = False            # ForceToken: at a sentence's step only its `token` may come
    renormalizes = False            # log-softmax again (last)

    @abstractmethod
    def __call__(self, log_probs: np.ndarray, tokens: np.ndarray, row_example: np.ndarray, step: int) -> None:
        ...

_RENORMALIZE_FLOATS = 1 << 16            # renormalize's rows at a time (at least one): 256 KiB, and as much scratch


class SuppressTokens(LogitFilter):
    """These ids are never generated (options.suppress_ids; by default PAD and BOS)."""
    same_for_every_row = True

    def __init__(self, token_ids: Sequence[int]):
        self.token_ids = list(token_ids)

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        log_probs[:, self.token_ids] = -np.inf


class SuppressEOSBeforeMin(LogitFilter):
    """EOS is forbidden while fewer than `min_length` tokens have been generated."""
    same_for_every_row = True

    def __init__(self, eos_id: int, min_length: int):
        self.eos_id, self.min_length = eos_id, min_length

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        if step < self.min_length:
            log_probs[:, self.eos_id] = -np.inf


class RepetitionPenalty(LogitFilter):
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


class NoRepeatNGram(LogitFilter):
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


class ForceToken(LogitFilter):
    """transformers' ForcedBOSTokenLogitsProcessor and ForcedEOSTokenLogitsProcessor: at a sentence's step
    `steps[sentence]` only `token` may come, with log-prob 0 (it counts in the length, not in the score).
    It sets the log-probs, so it is no bias (not same_for_every_row): the search head takes it as a forced id per
    row (decoding.head_plan)."""
    forces_token = True

    def __init__(self, token: int, steps: np.ndarray):
        self.token, self.steps = token, steps                                    # steps [B]

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        rows = np.flatnonzero(self.steps[row_example] == step)
        if len(rows):
            log_probs[rows] = -np.inf
            log_probs[rows, self.token] = 0.0


class ForcePrefix(LogitFilter):
    """Force each sentence's target prefix: during its first len(prefix) steps (after `start` steps: a forced
    BOS comes first) only the prefix token keeps its log-prob (which counts in the score); every other token
    gets -inf."""

    def __init__(self, prefixes: Sequence[Sequence[int]], start: int = 0):
        self.start = start
        self.lengths = np.array([len(p) for p in prefixes], dtype=np.int64)     # [B]
        self.ids = np.zeros((len(prefixes), max(1, int(self.lengths.max(initial=0)))), dtype=np.int64)
        for i, p in enumerate(prefixes):
            self.ids[i, :len(p)] = p

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        at = step - self.start
        if at < 0:
            return
        rows = np.flatnonzero(at < self.lengths[row_example])
        if len(rows) == 0:
            return
        forced = self.ids[row_example[rows], at]
        keep = log_probs[rows, forced]
        log_probs[rows] = -np.inf
        log_probs[rows, forced] = keep


class Renormalize(LogitFilter):
    """Log-softmax again after the other filters (transformers' renormalize_logits, its LogitNormalization): the
    surviving tokens' probabilities sum to 1. A row whose filters forbid every token stays all -inf.

    In place, a few rows at a time (_RENORMALIZE_FLOATS floats: they stay in the cache between the max, the shift,
    the exp and the sum), in float32 as (log_probs - max) - log(sum(exp(log_probs - max)))."""
    renormalizes = True

    def __call__(self, log_probs, tokens, row_example, step) -> None:
        rows, v = log_probs.shape
        chunk = max(1, min(rows, _RENORMALIZE_FLOATS // max(1, v)))
        scratch = np.empty((chunk, v), dtype=np.float32)
        for lo in range(0, rows, chunk):
            part = log_probs[lo:lo + chunk]
            best = part.max(axis=1, keepdims=True)                                   # [r, 1]
            if not np.isfinite(best).all():                                          # rare: those rows stay as they are
                finite = np.flatnonzero(np.isfinite(best[:, 0]))
                if len(finite):
                    rest = part[finite]                                              # a copy, renormalized, put back
                    self(rest, tokens, row_example, step)
                    part[finite] = rest
                continue
            np.subtract(part, best, out=part)
            exp = np.exp(part, out=scratch[:len(part)])
            part -= np.log(exp.sum(axis=1, keepdims=True))


renormalize = Renormalize()


def build_filters(options: DecodingOptions, config: ModelConfig, prefixes: Optional[Sequence[Sequence[int]]] = None,
                  limits: Optional[np.ndarray] = None) -> List[LogitFilter]:
    """The filters the options ask for, in the order they apply. limits [B]: each sentence's step limit
    (decoding.step_limits; forced_eos needs it).

    The order is transformers' (generation/utils.py _get_logits_processor: repetition penalty, no-repeat n-grams,
    bad words, min length, forced BOS, forced EOS, suppress tokens, renormalize) where it matters: the -inf masks
    and the penalty commute, the forced tokens override them, the user's target prefix follows a forced BOS,
    and renormalize comes last. (transformers suppresses its suppress_tokens after forcing, ours before: they part
    only when a forced token is also suppressed.)"""
    options.check_vocabulary(config.vocab_size)            # the id-level callers' (decode) check too
    suppress = [config.pad_id, config.bos_id] if options.suppress_ids is None else list(options.suppress_ids)
    filters: List[LogitFilter] = [SuppressTokens(suppress)] if suppress else []
    if options.min_decoding_length > 0:
        filters.append(SuppressEOSBeforeMin(config.eos_id, options.min_decoding_length))
    if options.repetition_penalty != 1.0:
        filters.append(RepetitionPenalty(options.repetition_penalty))
    if options.no_repeat_ngram_size > 0:
        filters.append(NoRepeatNGram(options.no_repeat_ngram_size))
    n = len(limits) if limits is not None else len(prefixes) if prefixes is not None else 1
    if options.forced_bos_id is not None:
        filters.append(ForceToken(options.forced_bos_id, np.zeros(n, dtype=np.int64)))
    if options.forced_eos:
        if limits is None:
            raise ValueError("forced_eos needs the sentences' step limits")
        filters.append(ForceToken(config.eos_id, np.asarray(limits, dtype=np.int64) - 1))
    if prefixes is not None and any(len(p) for p in prefixes):
        filters.append(ForcePrefix(prefixes, start=int(options.forced_bos_id is not None)))
    if options.renormalize:
        filters.append(renormalize)
    return filters
