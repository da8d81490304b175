"""The decoding loop in numpy: encode once, then one decoder step per generated token.

Shaped like openai/whisper's decoding.py: small parts and a short main loop.
  * logit filters (logit_filters.py) edit the step's log-probs in place: suppressed ids (PAD/BOS by default),
    EOS before the minimum length, repetition penalty, no-repeat-ngram, forced BOS and EOS, forced target prefix,
    renormalization;
  * a search (search.py) turns them into the next tokens: `RowSearch` (greedy or sampling) or `BeamSearch`,
    and ranks the finished hypotheses; its docstring gives the semantics, those of training/reference.py.

Rows: the engine works on `rows` = sum over active sentences of their width (K for beam search,
num_hypotheses for sampling). A sentence that stops leaves the active rows at once, so a batch
pays for its longest member only with that member's rows. After each step the cache is reordered
with one gather along the rows axis (`engine.take(values, parents)`).

Cross K/V and encoder mask: when the engine's decoder graph takes them once per sentence
(`engine.cross_per_sentence`, from the package manifest), beam search keeps one copy per active
sentence, shared by its K rows (row = sentence * K + beam); when sentences stop, they are shrunk
by sentence and the cache by row. Otherwise (packages of the earlier contract, and RowSearch,
whose rows end one by one) they are copied to every row and gathered with the cache.

The engine (session.py) hides where tensors live (numpy on CPU, OrtValues on CUDA) and how the cache is kept
(format 1: grown by the graph; format 2: a fixed-capacity buffer the graph writes in place):
    encode(input_ids [B, S], attention_mask [B, S]) -> (encoder_mask, cross)   cross: 2 per layer
    step(input_ids [R, 1], encoder_mask, past | None, cross[, with_attention=True])
        -> (log_probs [R, V] numpy, present[, attention [R, S] numpy])
        encoder_mask and cross have R rows, or with cross_per_sentence R / G (G rows per sentence)
    take(values, index [R']) -> values gathered along axis 0
    step_top_k(..., bias [1, V], k[, with_attention]), optional (the CUDA engine): step with each row's k best of
        log_probs + bias picked where the log-probs are -> (values [R, k], indices [R, k], present[, attention]);
        beam search then reads [R, 2K] per step instead of [R, V] (picks_on_device says when)
    cross_per_sentence: bool (an engine without it gets a copy per row, which every graph accepts)
    decoder_path_for(rows) -> str, optional: names the graph that stepped `rows` rows when it returns NaN
        log-probs (a ModelPackageError); else decoder_path: str, optional
"""
from __future__ import annotations

from functools import partial
from typing import Any, Generator, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from .config import ModelConfig
from .constraints import Constraints, Phrases, check_batch_work, require_beam
from .errors import ModelPackageError
from .logit_filters import build_filters
from .options import DecodingOptions
from .search import BeamSearch, Hypothesis, NonFiniteScores, RowSearch, Sampler, rank


class Engine(Protocol):
    cross_per_sentence: bool

    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Tuple[Any, List[Any]]: ...

    def step(self, input_ids: np.ndarray, encoder_mask: Any, past: Optional[List[Any]],
             cross: List[Any], with_attention: bool = False) -> Tuple[Any, ...]: ...

    def take(self, values: List[Any], index: np.ndarray) -> List[Any]: ...


def _broken_graph(engine: Engine, rows: int) -> ModelPackageError:
    """The error for a step of `rows` rows whose log-probs hold NaN or +inf, naming the graph that ran it (the
    few-rows step's file for few rows: engine.decoder_path_for)."""
    path = engine.decoder_path_for(rows) if hasattr(engine, "decoder_path_for") else \
        getattr(engine, "decoder_path", "the decoder step graph")
    return ModelPackageError(f"{path} returned NaN or infinite "
                             f"log-probs: the model package is broken; re-export the model")


# --- streaming ---------------------------------------------------------------------------------
def common_prefix(seqs: Sequence[Sequence[int]]) -> List[int]:
    if not seqs:
        return []
    first = list(seqs[0])
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return first[:n]


# --- the main loop ------------------------------------------------------------------------------
def pad_sources(sources: Sequence[Sequence[int]], pad_id: int) -> Tuple[np.ndarray, np.ndarray]:
    """Id lists -> (input_ids [B, S] int64 right-padded, attention_mask [B, S] int64, 1 = token)."""
    s = max(1, max(len(x) for x in sources))
    ids = np.full((len(sources), s), pad_id, dtype=np.int64)
    mask = np.zeros((len(sources), s), dtype=np.int64)
    for i, x in enumerate(sources):
        ids[i, :len(x)] = x
        mask[i, :len(x)] = 1
    return ids, mask


def step_limits(sources: Sequence[Sequence[int]], options: DecodingOptions, config: ModelConfig) -> np.ndarray:
    """Max decoding steps per sentence: max_decoding_length, max_length_a * src_len + max_length_b
    (src_len counts the source ids, EOS included), and the model's max_positions."""
    limit = min(options.max_decoding_length, config.max_positions)
    limits = np.full(len(sources), limit, dtype=np.int64)
    if options.max_length_a > 0 or options.max_length_b is not None:
        rel = [int(options.max_length_a * len(s) + (options.max_length_b or 0)) for s in sources]
        limits = np.minimum(limits, np.array(rel, dtype=np.int64))
    return limits


def picks_on_device(engine: Engine, search: Any, filters: List[Any], vocab_size: int) -> bool:
    """Whether beam search picks its candidates where the engine keeps the log-probs (engine.step_top_k, on a GPU):
    no constraints (their banks need every candidate), and every filter edits all rows alike (one bias [1, V])."""
    return (isinstance(search, BeamSearch) and search.constraints is None and hasattr(engine, "step_top_k")
            and 2 * search.k <= vocab_size and all(getattr(f, "same_for_every_row", False) for f in filters))


def decode_steps(engine: Engine, config: ModelConfig, sources: Sequence[Sequence[int]], options: DecodingOptions,
                 prefixes: Optional[Sequence[Sequence[int]]] = None, strategy: Optional[str] = None,
                 constraints: Optional[Sequence[Optional[Phrases]]] = None,
                 ) -> Generator[Any, None, List[List[Hypothesis]]]:
    """Decode `sources` (id lists ending with EOS); yields the search after every step (streaming)
    and returns, per source, up to num_hypotheses hypotheses, best first.

    strategy: None picks greedy/sampling for beam_size 1 and beam search above; "beam" forces beam
    search even for beam_size 1 (tests compare it with greedy).
    constraints: per source its phrases (non-empty id lists, or None): beam search with dynamic beam allocation
    (constraints.py); the hypotheses that hold every phrase rank first (Hypothesis.missing_constraints).
    """
    n = len(sources)
    phrases = [list(p or []) for p in constraints] if constraints is not None and any(constraints) else None
    if phrases is not None and strategy != "beam":
        require_beam(options.beam_size)
    if phrases is not None:
        check_batch_work(phrases, options.beam_size)
    limits = step_limits(sources, options, config)
    results: List[List[Hypothesis]] = [[] for _ in range(n)]
    todo = np.flatnonzero(limits > 0)                       # a limit of 0 steps: the empty hypothesis
    for i in np.flatnonzero(limits <= 0):
        results[i] = [Hypothesis([], 0.0, 0.0, False, missing_constraints=len(phrases[i]) if phrases else 0)]
    if len(todo) == 0:
        return results
    srcs = [sources[i] for i in todo]
    if options.beam_size > 1 or strategy == "beam":
        tracker = None if phrases is None else Constraints([phrases[i] for i in todo], options.beam_size,
                                                           config.vocab_size)
        search: Any = BeamSearch(len(srcs), options.beam_size, limits[todo], config.eos_id, options.length_penalty,
                                 options.num_hypotheses, tracker, options.beam_rules, options.early_stopping)
    else:
        width = options.num_hypotheses if options.sampling else 1
        sampler = Sampler(options, srcs, width) if options.sampling else None
        search = RowSearch(len(srcs), width, limits[todo], config.eos_id, options.length_penalty, sampler)
    filters = build_filters(options, config, None if prefixes is None else [prefixes[i] for i in todo], limits[todo])

    ids, mask = pad_sources(srcs, config.pad_id)
    encoder_mask, cross = engine.encode(ids, mask)
    # cross K/V and encoder mask: one row per sentence shared by its K beam rows when the decoder graph
    # takes them so (a beam search's sentences keep exactly K rows); else one copy per row
    shared = isinstance(search, BeamSearch) and getattr(engine, "cross_per_sentence", False)
    if not shared and len(search.row_example) > len(srcs):                  # each sentence -> its K rows
        encoder_mask, *cross = engine.take([encoder_mask, *cross], search.row_example)
    past = None
    last = np.full((len(search.row_example), 1), config.start_id, dtype=np.int64)
    attention = None
    on_device = picks_on_device(engine, search, filters, config.vocab_size)
    for step in range(int(limits[todo].max())):
        if on_device:                                   # the log-probs stay on the GPU; [R, 2K] best come back
            bias = np.zeros((1, config.vocab_size), dtype=np.float32)
            for apply_filter in filters:                # each edits every row alike: once, on the bias
                apply_filter(bias, search.tokens[:1], search.row_example[:1], step)
            values, indices, past, *att = engine.step_top_k(last, encoder_mask, past, cross, bias, 2 * search.k,
                                                            with_attention=options.return_attention)
            attention = att[0] if att else None
            # a NaN or +inf logit makes its whole log-softmax row NaN, and so its best value
            if not (values[:, 0] < np.inf).all():
                raise _broken_graph(engine, len(last))
            advance = partial(search.advance_top_k, values, indices)
        else:
            if options.return_attention:                                        # [R, V], [R, S]
                log_probs, past, attention = engine.step(last, encoder_mask, past, cross, with_attention=True)
            else:
                log_probs, past = engine.step(last, encoder_mask, past, cross)  # [R, V]
            # a NaN or +inf logit makes its whole log-softmax row NaN: one column tells, without a pass over [R, V]
            if not (log_probs[:, config.eos_id] < np.inf).all():
                raise _broken_graph(engine, len(last))
            for apply_filter in filters:
                apply_filter(log_probs, search.tokens, search.row_example, step)
            advance = partial(search.advance, log_probs)
        try:
            parents = advance(step, attention)                                  # [R']
        except NonFiniteScores:
            raise _broken_graph(engine, len(last)) from None
        yield search
        if len(parents) == 0:
            break
        if len(parents) < len(last) and shared:            # sentences left: cross by sentence, past by row
            k = search.k
            encoder_mask, *cross = engine.take([encoder_mask, *cross], parents[::k] // k)
            past = engine.take(past, parents)
        elif len(parents) < len(last):                                       # rows left: shrink all
            encoder_mask, *cross = engine.take([encoder_mask, *cross], parents)
            past = engine.take(past, parents)
        elif not np.array_equal(parents, np.arange(len(parents))):
            past = engine.take(past, parents)                               # beam reorder: one gather
        last = search.tokens[:, -1:]
    for j, i in enumerate(todo):
        results[i] = rank(search.finished[j], options.num_hypotheses)
        for h in results[i]:                                   # the sentence's own source columns, no padding
            if h.attention is not None:
                h.attention = h.attention[:, :len(srcs[j])]
    return results


def decode(engine: Engine, config: ModelConfig, sources: Sequence[Sequence[int]], options: DecodingOptions,
           prefixes: Optional[Sequence[Sequence[int]]] = None, strategy: Optional[str] = None,
           constraints: Optional[Sequence[Optional[Phrases]]] = None) -> List[List[Hypothesis]]:
    """decode_steps run to the end."""
    steps = decode_steps(engine, config, sources, options, prefixes, strategy, constraints)
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return stop.value


def score(engine: Engine, config: ModelConfig, sources: Sequence[Sequence[int]],
          targets: Sequence[Sequence[int]]) -> List[List[float]]:
    """Teacher forcing: per pair, the log-prob of each target id and then of EOS, given the source and the ids
    before it -> one list of len(target) + 1 floats per pair.

    The decoder runs as in decode_steps (BOS first, one token a step, the same cache), and each log-prob is read
    where the search would read the token it picks, before any filter: so the sum over a hypothesis's tokens
    (EOS included) is the score decoding reports for it.
    """
    n = len(sources)
    labels = [list(t) + [config.eos_id] for t in targets]
    forced, _ = pad_sources(labels, config.pad_id)                # [n, T]; after its EOS a row reads PAD: ignored
    ids, mask = pad_sources(sources, config.pad_id)
    encoder_mask, cross = engine.encode(ids, mask)
    out = np.zeros(forced.shape, dtype=np.float64)
    past, last, rows = None, np.full((n, 1), config.start_id, dtype=np.int64), np.arange(n)
    for t in range(forced.shape[1]):
        log_probs, past = engine.step(last, encoder_mask, past, cross)      # [n, V]
        if not (log_probs[:, config.eos_id] < np.inf).all():
            raise _broken_graph(engine, len(last))
        out[:, t] = log_probs[rows, forced[:, t]]
        last = forced[:, t:t + 1]
    return [out[i, :len(x)].tolist() for i, x in enumerate(labels)]
