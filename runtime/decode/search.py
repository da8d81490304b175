"""The searches: how a step's log-probs become the next tokens, and how finished hypotheses rank.

  * `RowSearch`: greedy argmax or sampling (`Sampler`), one row per hypothesis;
  * `BeamSearch`: vectorised, fairseq-style, from every candidate (`advance`) or from each row's best ones picked
    where the log-probs are (`advance_top_k`, the CUDA engine's step_top_k);
  * a ranker sorts finished hypotheses by score / length ** length_penalty (`normalize`, `rank`).
decoding.py runs them in its loop; the logit filters (logit_filters.py) edit the log-probs before they choose.

The semantics are those of training/reference.py (docstring there), token for token:
  * at most `limit` steps per sentence (max_decoding_length, fairseq's max_length_a * src_len +
    max_length_b, and max_positions); a step appends one token, EOS included;
  * PAD and BOS are never generated; EOS is forbidden while fewer than min_decoding_length
    tokens were generated; score = sum of the log-probs of the generated tokens (EOS included);
  * beam search ranks the K*V candidates, takes the best 2K (ties to the lower flat index
    beam * V + token), finishes EOS candidates among the best K, continues the first K non-EOS.
    **When it stops** (`beam_done`): a sentence stops once K hypotheses have finished and none of
    its live beams scores better now (normalized) than the num_hypotheses-th best finished one, or
    after its `limit` steps, when its live beams are finished as they are (without EOS).
  * beam_rules="transformers" (options.beam_rules; a converted HF model's default) keeps the candidates and the
    live beams as above and changes what finishes and when a sentence stops, as transformers 5.23's _beam_search:
    the finished set keeps the best K (`normalize32`: its float32 division); at the limit's step every one of the
    best K candidates finishes, EOS or not (the live beams do not); a sentence with K finished stops by
    `transformers_done` (early_stopping True / False / "never"), comparing with the worst of the K finished.

Terminology constraints (decode's `constraints`, translate_batch's): `BeamSearch` takes a constraints.Constraints,
which follows each row's progress through its sentence's phrases; EOS waits until a row holds them all, and the
step's candidates are dealt out bank by bank (dynamic beam allocation) in place of the score order. Hypotheses
that hold every phrase rank first. Without constraints none of this runs.

Attention (options.return_attention): the engine's step also returns the cross-attention rows [R, S], and
the search keeps them per row beside the tokens (`extend_rows`), reordered and finished with them, so a
Hypothesis carries one row per token it chose.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

import numpy as np

from .constraints import Constraints
from .decoder_state import place_rows
from ..options import DecodingOptions
from .top_candidates import top_beam_candidates, top_candidates


@dataclass
class Hypothesis:
    tokens: List[int]           # generated ids, without EOS
    score: float                # sum of log-probs (EOS included when generated)
    normalized_score: float     # score / length ** length_penalty; hypotheses rank by it
    finished: bool = True       # ended with EOS (False: stopped by the length limit)
    attention: Optional[np.ndarray] = None   # return_attention: [len(tokens), source ids] cross-attention rows
    missing_constraints: int = 0            # constraint phrases it does not hold (0: all, or none were asked for)


class NonFiniteScores(Exception):
    """A search met a NaN or +inf log-prob where it chooses (decode_steps names the graph)."""


# --- ranking ---------------------------------------------------------------------------------
def normalize(score: float, length: int, length_penalty: float) -> float:
    """score / length ** length_penalty (score itself for length 0); Python floats, as the reference."""
    return score / (length ** length_penalty) if length > 0 else score


def beam_done(finished: Sequence[float], beam_size: int, num_hypotheses: int, best_live: float) -> bool:
    """When beam search stops a sentence: once `beam_size` hypotheses have finished (fairseq's rule) AND
    the `num_hypotheses`-th best finished normalized score is at least the best live beam's normalized
    score now (`best_live`, -inf when no beam is alive): no live beam leads any hypothesis to be returned.
    fairseq's rule alone loses to greedy search: a beam that will end well is dropped because K short,
    worse hypotheses finished first. Comparing with the K-th best finished instead (transformers'
    early_stopping=False) decodes on for hypotheses nobody asked for, for the same answers (the figures of both:
    bench/results/design-notes.md)."""
    if len(finished) < beam_size:
        return False
    return sorted(finished, reverse=True)[num_hypotheses - 1] >= best_live


def normalize32(score: float, length: int, length_penalty: float) -> float:
    """normalize as transformers computes it (beam_rules="transformers"): the float32 score over the float32 of
    length ** length_penalty, rounded to float32, so that its comparisons (the finished set, the stop) tie and
    part where its own do."""
    return float(np.float32(score) / np.float32(length ** length_penalty)) if length > 0 else score


def transformers_done(finished: Sequence[float], best_live: float, length: int, limit: int, length_penalty: float,
                      early_stopping: Union[bool, str]) -> bool:
    """When transformers 5.23's beam search stops a sentence whose K finished slots are full (`finished`: their
    normalized scores; generation/utils.py _check_early_stop_heuristic, _beam_search_has_unfinished_sequences):
      * early_stopping True: at once;
      * False: when the best live beam's raw score `best_live` over the current generated `length` ** lp is not
        above the worst finished one (a heuristic: with lp > 0 a live beam may still end better);
      * "never": the same, over the longest length the limit allows when lp > 0 (a bound, for lp > 0)."""
    if early_stopping is True:
        return True
    best_length = limit if early_stopping == "never" and length_penalty > 0 else length
    return not normalize32(best_live, best_length, length_penalty) > min(finished)


def rank(hypotheses: List[Hypothesis], n: int) -> List[Hypothesis]:
    """Best n by normalized score, those that hold every constraint phrase first (then those missing fewest);
    a stable sort keeps the earlier-finished first on ties."""
    hyps = sorted(hypotheses, key=lambda h: (h.missing_constraints, -h.normalized_score))
    return hyps[:n] if hyps else [Hypothesis([], 0.0, 0.0, finished=False)]


# --- token selection --------------------------------------------------------------------------
def softmax(x: np.ndarray) -> np.ndarray:
    """Row softmax of [R, V] logits that may hold -inf (at least one finite per row)."""
    z = np.exp(x - x.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


class Sampler:
    """Random sampling with temperature, top-k and top-p (nucleus), one generator per row.

    Each row's generator is seeded from (seed, the sentence's source ids, hypothesis index), so a
    sentence's samples do not depend on the batch it is decoded in. seed None: fresh entropy.
    """

    def __init__(self, options: DecodingOptions, sources: Sequence[Sequence[int]], width: int):
        self.topk, self.topp, self.temperature = options.sampling_topk, options.sampling_topp, options.sampling_temperature
        self.generators = []
        for src in sources:
            key = zlib.crc32(np.asarray(src, dtype=np.int64).tobytes())
            for j in range(width):
                seed = None if options.seed is None else [options.seed, key, j]
                self.generators.append(np.random.default_rng(seed))

    def __call__(self, log_probs: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
        """log_probs [R, V], row_ids [R] (initial row of each active row) -> tokens [R]"""
        if self.temperature == 0:
            return log_probs.argmax(axis=1)
        logits = log_probs / np.float32(self.temperature)
        v = logits.shape[1]
        if 1 < self.topk < v:
            kth = np.partition(logits, v - self.topk, axis=1)[:, v - self.topk, None]   # k-th largest
            logits[logits < kth] = -np.inf
        if self.topp < 1.0:
            order = np.argsort(-logits, axis=1, kind="stable")
            probs = softmax(np.take_along_axis(logits, order, axis=1))
            before = np.cumsum(probs, axis=1) - probs                   # mass of the better tokens
            drop = np.zeros_like(logits, dtype=bool)
            np.put_along_axis(drop, order, before >= self.topp, axis=1)   # the best token is always kept
            logits[drop] = -np.inf
        cdf = np.cumsum(softmax(logits), axis=1)                          # [R, V]
        u = np.array([1.0 - self.generators[r].random() for r in row_ids])   # (0, 1]
        tokens = (cdf < (u * cdf[:, -1])[:, None]).sum(axis=1)              # first token with cdf >= u
        return np.minimum(tokens, v - 1)


# --- searches ----------------------------------------------------------------------------------
def extend_rows(history: Optional[np.ndarray], rows: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """The per-row attention history [R, step, S] with this step's rows [R, S] appended (None: not kept)."""
    if rows is None:
        return history
    rows = rows[:, None, :].astype(np.float32)
    return rows if history is None else np.concatenate([history, rows], axis=1)


def _row(history: Optional[np.ndarray], row: int) -> Optional[np.ndarray]:
    return None if history is None else history[row]


class RowSearch:
    """Greedy (argmax, lowest id on ties) or sampling: each row is one independent hypothesis. Its rows keep no
    order: when rows end, the last rows take their places (place_rows), so a cache gathered by the parents moves
    those alone, not every row after the first that ended (translate_batch sorts by length: the first rows end
    first); row_ids holds each one's initial row."""

    def __init__(self, n_examples: int, width: int, limits: np.ndarray, eos: int, length_penalty: float,
                 sampler: Optional[Sampler] = None):
        self.width, self.eos, self.length_penalty, self.sampler = width, eos, length_penalty, sampler
        self.limits = limits                                              # [n_examples] max steps
        self.row_ids = np.arange(n_examples * width)                     # initial row of each active row
        self.row_example = self.row_ids // width                          # [R]
        self.tokens = np.zeros((len(self.row_ids), 0), dtype=np.int64)   # [R, step]
        self.scores = np.zeros(len(self.row_ids), dtype=np.float64)     # [R] (float64 as the reference)
        self.attention: Optional[np.ndarray] = None                      # [R, step, S] with return_attention
        self.finished: List[List[Hypothesis]] = [[] for _ in range(n_examples)]

    def _finish(self, rows: np.ndarray, lengths: int, ended: bool, drop_last: bool) -> None:
        """The rows' hypotheses, in the order of their initial rows (a sentence's n-best ties rank in that order)."""
        for r in rows[np.argsort(self.row_ids[rows], kind="stable")].tolist():
            score = float(self.scores[r])
            tokens = self.tokens[r, :-1] if drop_last else self.tokens[r]
            attention = None if self.attention is None else self.attention[r, :len(tokens)]
            self.finished[self.row_example[r]].append(
                Hypothesis(tokens.tolist(), score, normalize(score, lengths, self.length_penalty), ended, attention))

    def advance(self, log_probs: np.ndarray, step: int, attention: Optional[np.ndarray] = None) -> np.ndarray:
        """Pick each row's next token; return the parents (current rows that go on) [R'].
        attention [R, S]: this step's cross-attention rows, kept with the tokens they chose."""
        rows = np.arange(len(log_probs))
        first = log_probs.argmax(axis=1)             # the lowest id of the best, or of the first NaN
        best = log_probs[rows, first]                # the row's max: NaN when the row holds one
        if self.sampler is None:
            return self.advance_picks(first, best, step, attention)
        if not (best < np.inf).all():
            raise NonFiniteScores
        stuck = ~(best > -np.inf)
        log_probs[stuck, self.eos] = 0.0              # a placeholder pick, dropped in _extend
        tokens = self.sampler(log_probs, self.row_ids)
        return self._extend(tokens, log_probs[rows, tokens], stuck, step, attention)

    def advance_picks(self, first: np.ndarray, best: np.ndarray, step: int,
                      attention: Optional[np.ndarray] = None) -> np.ndarray:
        """Greedy, from each row's best id (the lowest on ties) and its log-prob [R] (advance's argmax, or the search
        head's on the device) -> the parents [R']."""
        if not (best < np.inf).all():
            raise NonFiniteScores
        stuck = ~(best > -np.inf)
        if not stuck.any():
            return self._extend(first, best, stuck, step, attention)
        return self._extend(np.where(stuck, self.eos, first), np.where(stuck, np.float32(0), best), stuck, step,
                            attention)

    def _extend(self, tokens: np.ndarray, gained: np.ndarray, stuck: np.ndarray, step: int,
                attention: Optional[np.ndarray]) -> np.ndarray:
        """Append each row's token (its log-prob `gained` counts in the score) and finish the rows that end: with
        EOS, at their limit, or stuck: a row whose filters forbid every token (e.g. no_repeat_ngram_size=1 with
        min_decoding_length past the vocabulary) ends unfinished with the tokens it had (its placeholder EOS, of
        log-prob 0, dropped)."""
        rows = np.arange(len(tokens))
        any_stuck = stuck.any()
        self.scores += gained.astype(np.float64)
        self.tokens = np.concatenate([self.tokens, tokens[:, None]], axis=1)
        self.attention = extend_rows(self.attention, attention)
        ended = (tokens == self.eos) & ~stuck
        at_limit = ~ended & ~stuck & (step + 1 >= self.limits[self.row_example])
        if not (any_stuck or ended.any() or at_limit.any()):      # most steps: every row goes on
            return rows
        self._finish(np.flatnonzero(ended), step + 1, ended=True, drop_last=True)
        self._finish(np.flatnonzero(at_limit), step + 1, ended=False, drop_last=False)
        self._finish(np.flatnonzero(stuck), step, ended=False, drop_last=True)
        _, parents = place_rows(np.flatnonzero(~ended & ~at_limit & ~stuck))
        if len(parents) < len(rows):
            self.row_ids, self.row_example = self.row_ids[parents], self.row_example[parents]
            self.tokens, self.scores = self.tokens[parents], self.scores[parents]
            self.attention = None if self.attention is None else self.attention[parents]
        return parents

    def candidates(self, example: int) -> List[List[int]]:
        """Every sequence the example's final answer may still extend (streaming)."""
        live = self.tokens[(self.row_example == example) & np.isfinite(self.scores)].tolist()
        return live + [h.tokens for h in self.finished[example]]


class BeamSearch:
    """fairseq-style beam search over [A sentences, K beams], vectorised over sentences and beams.
    constraints: the phrases each sentence's hypotheses must hold (constraints.py: dynamic beam allocation)."""

    def __init__(self, n_examples: int, beam_size: int, limits: np.ndarray, eos: int, length_penalty: float,
                 num_hypotheses: int = 1, constraints: Optional[Constraints] = None, rules: str = "seq2onnx",
                 early_stopping: Union[bool, str] = False):
        k = beam_size
        self.n = num_hypotheses                                            # returned per sentence
        self.k, self.eos, self.length_penalty, self.limits = k, eos, length_penalty, limits
        self.rules, self.early_stopping = rules, early_stopping             # options.beam_rules, early_stopping
        self.examples = np.arange(n_examples)                              # [A] active sentences
        self.cum = np.full((n_examples, k), -np.inf, dtype=np.float32)    # [A, K]; the K beams start
        self.cum[:, 0] = 0.0                                               # identical: expand beam 0 only
        self.tokens = np.zeros((n_examples * k, 0), dtype=np.int64)       # [A*K, step]
        self.attention: Optional[np.ndarray] = None                        # [A*K, step, S] with return_attention
        self.finished: List[List[Hypothesis]] = [[] for _ in range(n_examples)]
        self.n_finished = np.zeros(n_examples, dtype=np.int64)             # [n_examples]
        self.constraints = constraints                                     # with its row states [A*K, phrases]

    @property
    def row_example(self) -> np.ndarray:                                   # [A*K]
        return np.repeat(self.examples, self.k)

    def _add(self, a: int, tokens: np.ndarray, score: float, length: int, ended: bool,
             attention: Optional[np.ndarray] = None, row: int = 0) -> None:
        """Sentence a's hypothesis `tokens`, which row `row` holds (its constraint states)."""
        missing = 0 if self.constraints is None else int(self.constraints.missing(np.array([row]),
                                                                                  self.examples[a:a + 1])[0])
        finished = self.finished[self.examples[a]]
        if self.rules == "transformers":           # its float32 division; the finished set keeps the best K
            finished.append(Hypothesis(tokens.tolist(), score, normalize32(score, length, self.length_penalty),
                                       ended, None if attention is None else attention[:len(tokens)], missing))
            if len(finished) > self.k:             # stable: on ties the earlier-finished stays
                finished.sort(key=lambda h: -h.normalized_score)
                del finished[self.k:]
            self.n_finished[self.examples[a]] = len(finished)
            return
        self.n_finished[self.examples[a]] += 1
        finished.append(Hypothesis(
            tokens.tolist(), score, normalize(score, length, self.length_penalty), ended,
            None if attention is None else attention[:len(tokens)], missing))

    def advance(self, log_probs: np.ndarray, step: int, attention: Optional[np.ndarray] = None) -> np.ndarray:
        """log_probs [A*K, V] -> parents [A'*K]: the current row each next row continues.
        attention [A*K, S]: this step's cross-attention rows, kept with the tokens they chose."""
        k, n_act, v = self.k, len(self.examples), log_probs.shape[1]
        if self.constraints is not None:                                   # EOS once every phrase is met
            self.constraints.forbid_eos(log_probs, self.row_example, self.eos)
        if self.constraints is None:                  # cand = cum + log-probs, computed only where it is read
            order = top_beam_candidates(self.cum, log_probs, 2 * k)       # [A, 2K] flat ids, best first
            beam, token = np.divmod(order, v)
            score = self.cum[np.arange(n_act)[:, None], beam] + log_probs[np.arange(n_act)[:, None] * k + beam, token]
            return self._choose(score, beam, token, step, attention)
        cand = (self.cum[:, :, None] + log_probs.reshape(n_act, k, v)).reshape(n_act, k * v)   # float32
        order = self.constraints.order(cand, top_candidates(cand, 2 * k), self.examples, k)   # bank by bank
        beam, token = np.divmod(order, v)
        return self._choose(np.take_along_axis(cand, order, axis=1), beam, token, step, attention)

    def advance_top_k(self, values: np.ndarray, indices: np.ndarray, step: int,
                      attention: Optional[np.ndarray] = None) -> np.ndarray:
        """advance, from each row's W >= 2K best log-probs (values [A*K, W]) and their token ids (indices), best
        first with equal values in the order of their ids: a sentence's 2K best candidates are among its rows'
        2K best, and ranking the K*W by score, ties to the lower position (beam, then id), is ranking the K*V
        by score, ties to the lower flat id. No constraints (their banks need every candidate)."""
        k, n_act, w = self.k, len(self.examples), values.shape[1]
        cand = (self.cum[:, :, None] + values.reshape(n_act, k, w)).reshape(n_act, k * w)   # float32
        pick = top_candidates(cand, 2 * k)                                # [A, 2K] positions, best first
        token = np.take_along_axis(indices.reshape(n_act, k * w), pick, axis=1)
        return self._choose(np.take_along_axis(cand, pick, axis=1), pick // w, token, step, attention)

    def advance_candidates(self, score: np.ndarray, flat: np.ndarray, vocab_size: int, step: int,
                           attention: Optional[np.ndarray] = None) -> np.ndarray:
        """advance, from each sentence's 2K best candidates already ranked (the search head's TopK of cum + the
        filtered log-probs over K x V on the device): score [A, 2K] float32 and flat ids beam x V + token. No
        constraints."""
        beam, token = np.divmod(flat, vocab_size)
        return self._choose(score, beam, token, step, attention)

    def _choose(self, score: np.ndarray, beam: np.ndarray, token: np.ndarray, step: int,
                attention: Optional[np.ndarray]) -> np.ndarray:
        """The 2K best candidates of each sentence, best first (score, their beam and token [A, 2K]) -> parents."""
        k, n_act = self.k, len(self.examples)
        if not (score < np.inf).all():                # NaN or +inf among the best (NaN ranks below -inf)
            raise NonFiniteScores
        before = self.attention                                            # [A*K, step, S]: the rows' history
        history = extend_rows(before, attention)                           # ... and this step's row
        is_eos = token == self.eos
        last = step + 1 >= self.limits[self.examples]                      # [A]: the limit's step
        transformers = self.rules == "transformers"
        # EOS among the best K with a finite score: a finished hypothesis (it leaves the beam); transformers' rules:
        # at the limit's step every one of the best K (its stopping criteria end them all)
        ends = (is_eos | (last[:, None] & transformers)) & (np.arange(2 * k) < k) & (score > -np.inf)
        for a, j in zip(*np.nonzero(ends)):
            row = a * k + beam[a, j]
            if is_eos[a, j]:
                self._add(a, self.tokens[row], float(score[a, j]), step + 1, True, _row(history, row), row)
            else:
                self._add(a, np.append(self.tokens[row], token[a, j]), float(score[a, j]), step + 1, False,
                          _row(history, row), row)
        # the first K non-EOS candidates continue (at most K of the 2K are EOS: one per beam)
        keep = ~is_eos & (np.cumsum(~is_eos, axis=1) <= k)
        cols = np.nonzero(keep)[1].reshape(n_act, k)
        new_cum = np.take_along_axis(score, cols, axis=1)                   # [A, K]
        parents = (np.arange(n_act)[:, None] * k + np.take_along_axis(beam, cols, axis=1)).reshape(-1)
        new_tokens = np.take_along_axis(token, cols, axis=1).reshape(-1, 1)
        # a sentence whose filters forbid every continuation ends here: its live beams, unfinished
        stuck = ~(new_cum > -np.inf).any(axis=1) & (self.n_finished[self.examples] < k)
        for a in np.flatnonzero(stuck).tolist():
            for b in np.flatnonzero(self.cum[a] > -np.inf).tolist():
                self._add(a, self.tokens[a * k + b], float(self.cum[a, b]), step, False, _row(before, a * k + b),
                          a * k + b)
        self.tokens = np.concatenate([self.tokens[parents], new_tokens], axis=1)
        if self.constraints is not None:
            self.constraints.advance(parents, new_tokens[:, 0], self.row_example)
        self.attention = None if history is None else history[parents]
        done = stuck.copy()
        for a in np.flatnonzero(~stuck & (self.n_finished[self.examples] >= k)):
            finished = [h.normalized_score for h in self.finished[self.examples[a]]]
            if transformers:
                done[a] = transformers_done(finished, float(new_cum[a].max()), step + 1,
                                            int(self.limits[self.examples[a]]), self.length_penalty,
                                            self.early_stopping)
            else:
                done[a] = beam_done(finished, k, self.n, normalize(float(new_cum[a].max()), step + 1,
                                                                   self.length_penalty))
        at_limit = ~done & last
        if transformers:                                                   # its best K have finished above
            done, at_limit = done | at_limit, np.zeros_like(at_limit)
        for a in np.flatnonzero(at_limit).tolist():                        # live beams end without EOS
            for b in np.flatnonzero(new_cum[a] > -np.inf).tolist():
                self._add(a, self.tokens[a * k + b], float(new_cum[a, b]), step + 1, False,
                          _row(self.attention, a * k + b), a * k + b)
        stay = ~done & ~at_limit
        self.cum = new_cum
        if not stay.all():
            keep_rows = (np.flatnonzero(stay)[:, None] * k + np.arange(k)).reshape(-1)
            parents, self.tokens = parents[keep_rows], self.tokens[keep_rows]
            self.cum, self.examples = new_cum[stay], self.examples[stay]
            self.attention = None if self.attention is None else self.attention[keep_rows]
            if self.constraints is not None:
                self.constraints.keep(keep_rows)
        return parents

    def candidates(self, example: int) -> List[List[int]]:
        rows = np.flatnonzero((self.row_example == example) & (self.cum.reshape(-1) > -np.inf))
        return self.tokens[rows].tolist() + [h.tokens for h in self.finished[example]]
