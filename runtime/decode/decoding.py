"""The decoding loop in numpy: encode once, then one decoder step per generated token.

Shaped like openai/whisper's decoding.py: small parts and a short main loop.
  * logit filters (logit_filters.py) edit the step's log-probs in place: suppressed ids (PAD/BOS by default),
    EOS before the minimum length, repetition penalty, no-repeat-ngram, forced BOS and EOS, forced target prefix,
    renormalization;
  * a search (search.py) turns them into the next tokens: `RowSearch` (greedy or sampling) or `BeamSearch`,
    and ranks the finished hypotheses; its docstring gives the semantics, those of training/reference.py.

Rows: the engine works on `rows` = sum over active sentences of their width (K for beam search,
num_hypotheses for sampling). A sentence that stops leaves the active rows at once, so a batch
pays for its longest member only with that member's rows.

The loop: a `Decoding` is one call's sentences (their search, filters, limits and own step count); a `RunningBatch`
steps the rows of one or more Decodings at once over one DecoderState (decoder_state.py: the cache, the cross K/V and
mask, keep(parents) after each step, extend(new rows) when rows join). translate_batch runs one Decoding
(decode_steps); the server's continuous batching (serve/continuous.py) adds Decodings to a running batch at any step
(decoder step contract 3, where each row has its own position).

Cross K/V and encoder mask: when the engine's decoder graph takes them once per sentence
(`engine.cross_per_sentence`, from the package manifest), a lone beam search keeps one copy per active
sentence, shared by its K rows (row = sentence * K + beam); when sentences stop, they are shrunk
by sentence and the cache by row. Otherwise (packages of the earlier contract, RowSearch, whose rows end one by one,
and a batch that rows may join) they are copied to every row and gathered with the cache.

The engine (engine/base.py: Engine, the methods and flags this loop reads) hides where tensors live (numpy on CPU,
OrtValues on CUDA) and how the cache is kept; DecoderState calls it.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..engine.base import Engine
from ..package.config import ModelConfig
from .decoder_state import DecoderState, place_rows
from .constraints import Constraints, Phrases, check_batch_work, require_beam
from ..errors import ModelPackageError
from .logit_filters import LogitFilter, build_filters
from ..options import DecodingOptions
from .search import BeamSearch, Hypothesis, NonFiniteScores, RowSearch, Sampler, rank

Search = Union[BeamSearch, RowSearch]       # a Decoding's: beam search, or greedy / sampling rows
Broken = Callable[[], Exception]            # the error for a step whose log-probs are not finite (_broken_graph's)


def _broken_graph(engine: Engine, rows: int) -> ModelPackageError:
    """The error for a step of `rows` rows whose log-probs hold NaN or +inf, naming the graph that ran it (the
    few-rows step's file for few rows: engine.decoder_path_for)."""
    return ModelPackageError(f"{engine.decoder_path_for(rows)} returned NaN or infinite "
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


class TextStream:
    """One hypothesis streamed as text pieces (Translator.generate_tokens, the server's streams): after each step
    the text every live row and finished hypothesis of sentence 0 share (no later step can change it), held back
    while it ends inside a character or a later token rewrote it; at the end the rest of the best hypothesis."""

    def __init__(self, detokenize: Callable[[Sequence[int]], str]):
        self.detokenize, self.emitted = detokenize, ""

    def update(self, search: Search) -> str:
        shown = self.detokenize(common_prefix(search.candidates(0)))
        if len(shown) > len(self.emitted) and shown.startswith(self.emitted) and not shown.endswith("\ufffd"):
            piece, self.emitted = shown[len(self.emitted):], shown
            return piece
        return ""

    def final(self, tokens: Sequence[int]) -> str:
        final = self.detokenize(tokens)
        if final.startswith(self.emitted) and len(final) > len(self.emitted):
            piece, self.emitted = final[len(self.emitted):], final
            return piece
        return ""


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


def picks_on_device(engine: Engine, search: Search, filters: List[LogitFilter], vocab_size: int) -> bool:
    """Whether beam search picks its candidates where the engine keeps the log-probs (engine.step_top_k, on a GPU):
    no constraints (their banks need every candidate), and every filter edits all rows alike (one bias [1, V])."""
    return (isinstance(search, BeamSearch) and search.constraints is None and engine.picks_top_k
            and 2 * search.k <= vocab_size and all(f.same_for_every_row for f in filters))


# head_plan's: the bias filters, the forcing filters (forces_token: ForceToken's steps and token), renormalize or not
HeadPlan = Tuple[List[LogitFilter], List[Any], bool]


def head_plan(search: Search, filters: List[LogitFilter]) -> Optional[HeadPlan]:
    """How the search head (gather_graph.search_head_model_bytes, engine.step_search) runs this search and filters,
    or None when it cannot: greedy (not sampling) or beam search without constraints, whose filters are, in this
    order, ones that edit every row alike (a bias [1, V]), forced tokens (ForceToken: a forced id per row), and
    renormalize -> (the bias filters, the forcing filters, renormalize or not). The row-specific ones (repetition
    penalty, no-repeat n-grams, a target prefix) need the log-probs on the host."""
    if isinstance(search, BeamSearch) and search.constraints is not None:
        return None
    if isinstance(search, RowSearch) and search.sampler is not None:
        return None
    phases: List[List[LogitFilter]] = [[], [], []]
    phase = 0
    for f in filters:
        at = 0 if f.same_for_every_row else 1 if f.forces_token else 2 if f.renormalizes else None
        if at is None or at < phase or (at == 2 and phases[2]):
            return None
        phase = at
        phases[at].append(f)
    return phases[0], phases[1], bool(phases[2])


class Decoding:
    """One call's sentences decoding together: their search, logit filters, step limits and own step count. A
    RunningBatch steps the rows of one or more of them at once (translate_batch: one; the server: many)."""

    def __init__(self, config: ModelConfig, sources: Sequence[Sequence[int]], options: DecodingOptions,
                 prefixes: Optional[Sequence[Sequence[int]]] = None, strategy: Optional[str] = None,
                 constraints: Optional[Sequence[Optional[Phrases]]] = None):
        n = len(sources)
        phrases = [list(p or []) for p in constraints] if constraints is not None and any(constraints) else None
        if phrases is not None and strategy != "beam":
            require_beam(options.beam_size)
        if phrases is not None:
            check_batch_work(phrases, options.beam_size)
        limits = step_limits(sources, options, config)
        self.options, self.step = options, 0
        self._active: Tuple[int, set] = (-1, set())      # active(): the step it was computed at, and its sources
        self.results: List[List[Hypothesis]] = [[] for _ in range(n)]
        self.todo = np.flatnonzero(limits > 0)                   # a limit of 0 steps: the empty hypothesis
        for i in np.flatnonzero(limits <= 0):
            self.results[i] = [Hypothesis([], 0.0, 0.0, False, missing_constraints=len(phrases[i]) if phrases else 0)]
        self.sources = [sources[i] for i in self.todo.tolist()]
        self.max_steps = int(limits[self.todo].max()) if len(self.todo) else 0
        self.done = not len(self.todo)
        if self.done:
            self.search: Any = None
            return
        if options.beam_size > 1 or strategy == "beam":
            tracker = None if phrases is None else Constraints([phrases[i] for i in self.todo], options.beam_size,
                                                               config.vocab_size)
            self.search = BeamSearch(len(self.todo), options.beam_size, limits[self.todo], config.eos_id,
                                     options.length_penalty, options.num_hypotheses, tracker, options.beam_rules,
                                     options.early_stopping)
        else:
            width = options.num_hypotheses if options.sampling else 1
            sampler = Sampler(options, self.sources, width) if options.sampling else None
            self.search = RowSearch(len(self.todo), width, limits[self.todo], config.eos_id, options.length_penalty,
                                    sampler)
        self.filters = build_filters(options, config,
                                     None if prefixes is None else [prefixes[i] for i in self.todo.tolist()],
                                     limits[self.todo])
        self.head = head_plan(self.search, self.filters)          # how the search head runs it, or None
        self.last = np.full((self.rows, 1), config.start_id, dtype=np.int64)     # [R, 1] the tokens to feed
        self.done = False

    @property
    def rows(self) -> int:
        return len(self.search.row_example)

    def advance(self, log_probs: np.ndarray, attention: Optional[np.ndarray], broken: Broken) -> np.ndarray:
        """This call's rows' log-probs [R, V] (a view: the filters edit it in place) -> the parents of the rows that
        go on [R'] (empty: the call is done)."""
        for apply_filter in self.filters:
            apply_filter(log_probs, self.search.tokens, self.search.row_example, self.step)
        return self._advance(partial(self.search.advance, log_probs), attention, broken)

    def advance_top_k(self, values: np.ndarray, indices: np.ndarray, attention: Optional[np.ndarray],
                      broken: Broken) -> np.ndarray:
        return self._advance(partial(self.search.advance_top_k, values, indices), attention, broken)

    def top_k_bias(self, vocab_size: int) -> np.ndarray:
        """picks_on_device: every filter edits every row alike, once, on a bias [1, V]."""
        bias = np.zeros((1, vocab_size), dtype=np.float32)
        for apply_filter in self.filters:
            apply_filter(bias, self.search.tokens[:1], self.search.row_example[:1], self.step)
        return bias

    def head_inputs(self, head: HeadPlan, vocab_size: int, eos_id: int) -> Dict[str, np.ndarray]:
        """The search head's host inputs this step (head: this Decoding's head_plan): the bias of the filters that
        edit every row alike, the forced id of each row (only on a step that forces one), and for beam search each
        row's beam score and the candidates' shape [-1 (A), K x V] and count 2K."""
        bias_filters, forcing, _ = head
        tokens, row_example = self.search.tokens, self.search.row_example
        bias = np.zeros((1, vocab_size), dtype=np.float32)
        for apply_filter in bias_filters:
            apply_filter(bias, tokens[:1], row_example[:1], self.step)
        inputs: Dict[str, np.ndarray] = {"bias": bias, "check_id": np.array([eos_id], dtype=np.int64)}
        forced = np.full((len(row_example), 1), -1, dtype=np.int64)
        for force in forcing:                         # in order: a later one overrides
            forced[force.steps[row_example] == self.step] = force.token
        if (forced >= 0).any():
            inputs["forced"] = forced
        if isinstance(self.search, BeamSearch):
            k = self.search.k
            inputs["cum"] = np.ascontiguousarray(self.search.cum.reshape(-1, 1))
            inputs["shape"] = np.array([-1, k * vocab_size], dtype=np.int64)     # -1: the sentences, the same each step
            inputs["k"] = np.array([2 * k], dtype=np.int64)
        return inputs

    def advance_head(self, outputs: Tuple[np.ndarray, ...], vocab_size: int, attention: Optional[np.ndarray],
                     broken: Broken) -> np.ndarray:
        """Advance from the search head's outputs (engine.step_search)."""
        if isinstance(self.search, BeamSearch):
            values, flat = outputs[:2]
            return self._advance(partial(self.search.advance_candidates, values, flat, vocab_size), attention, broken)
        ids, values = outputs[:2]
        return self._advance(partial(self.search.advance_picks, ids, values), attention, broken)

    def _advance(self, advance: Callable[[int, Optional[np.ndarray]], np.ndarray], attention: Optional[np.ndarray],
                 broken: Broken) -> np.ndarray:
        try:
            parents = advance(self.step, attention)                              # [R']
        except NonFiniteScores:
            raise broken() from None
        self.step += 1
        self.done = len(parents) == 0 or self.step >= self.max_steps
        if not self.done:
            self.last = self.search.tokens[:, -1:]
        return parents

    def active(self) -> set:
        """The sources (indices into this Decoding's sources) still decoding: a caller whose sources all left may
        take their hypotheses (hypotheses_of) before the others end."""
        if self.done:
            return set()
        if self._active[0] != self.step:                  # once a step, however many callers ask
            examples = self.search.examples if isinstance(self.search, BeamSearch) else self.search.row_example
            self._active = (self.step, {int(self.todo[j]) for j in np.unique(examples)})
        return self._active[1]

    def hypotheses_of(self, i: int) -> List[Hypothesis]:
        """Source i's hypotheses, best first (once it is not active)."""
        where = np.searchsorted(self.todo, i)
        if where == len(self.todo) or self.todo[where] != i:             # a 0-step limit: the empty hypothesis
            return self.results[i]
        hyps = rank(self.search.finished[where], self.options.num_hypotheses)
        for h in hyps:                                   # the sentence's own source columns, no padding
            if h.attention is not None:
                h.attention = h.attention[:, :len(self.sources[where])]
        return hyps

    def hypotheses(self) -> List[List[Hypothesis]]:
        """Per source, up to num_hypotheses hypotheses, best first (once done)."""
        return [self.hypotheses_of(i) for i in range(len(self.results))]


# what an encoder run costs beyond its padded tokens, in tokens: the base model's encoder's fixed cost a run over its
# cost a token (bench/results/design-notes.md)
ENCODER_RUN_TOKENS = 12


def encoder_runs(widths: Sequence[int], counts: Sequence[int], run_tokens: int = ENCODER_RUN_TOKENS) -> List[int]:
    """Groups of sources in descending order of `widths` (a group's longest source), `counts` sources each, cut into
    encoder runs at the least cost, a run costing run_tokens plus its padded tokens (its first width x its sources):
    -> the first group of each run. A run of every newcomer pads a 3-token text to a 60-token one's length."""
    n = len(widths)
    if n < 2:
        return [0][:n]
    width, before = np.asarray(widths, dtype=np.int64), np.concatenate([[0], np.cumsum(counts)])
    cost, start = np.zeros(n + 1), np.zeros(n + 1, dtype=np.int64)
    for end in range(1, n + 1):               # the cheapest cut of groups :end, its last run starting at start[end]
        ways = cost[:end] + run_tokens + width[:end] * (before[end] - before[:end])
        start[end] = int(np.argmin(ways))
        cost[end] = ways[start[end]]
    starts, end = [], n
    while end > 0:
        end = int(start[end])
        starts.append(end)
    return starts[::-1]


def _rows_of(places: np.ndarray) -> Union[slice, np.ndarray]:
    """A Decoding's batch rows as a slice when they are consecutive (a view of the log-probs), else the index."""
    if len(places) and int(places[-1]) - int(places[0]) + 1 == len(places) and (np.diff(places) == 1).all():
        return slice(int(places[0]), int(places[-1]) + 1)
    return places


def _longest_source(d: "Decoding") -> int:
    return max(len(s) for s in d.sources)


class RunningBatch:
    """The rows of one or more Decodings stepped at once over one DecoderState. `add` encodes newcomers' sources
    (encoder runs of similar lengths) and appends their rows (decoder contract 3: at any step; older contracts only
    before the first); `step` runs one decoder step for every row, advances each Decoding on its own rows, and keeps
    the rows that go on, each where it was when it can (place_rows): a Decoding's rows need not be consecutive
    (`places`). translate_batch runs one Decoding, whose rows stay in its own order; the server's continuous
    batching, many. Its caller adds, steps, drops and clears; what it holds it owns."""

    def __init__(self, engine: Engine, config: ModelConfig, key: Any = None):
        self.engine, self.config = engine, config
        self._key = key
        self._decodings: List[Decoding] = []
        self._places: List[np.ndarray] = []   # per Decoding, the batch rows of its rows, in its own order
        self._state: Optional[DecoderState] = None

    @property
    def key(self) -> Any:
        """The caller's label (the server's: which jobs this batch takes)."""
        return self._key

    @property
    def decodings(self) -> Tuple[Decoding, ...]:
        """The Decodings whose rows the batch holds, in their order in the batch."""
        return tuple(self._decodings)

    @property
    def rows(self) -> int:
        return sum(d.rows for d in self._decodings)

    @property
    def has_stepped(self) -> bool:
        """Its rows have stepped since they were encoded (rows joining now join a running batch)."""
        return self._state is not None and self._state.past is not None

    def can_add(self) -> bool:
        """Rows can join now: the batch has not stepped, or its decoder step takes each row's position."""
        return not self.has_stepped or self.engine.rows_at_own_positions

    def add(self, decodings: Sequence[Decoding], share_cross: bool = False) -> None:
        """Encode the newcomers' sources and append their rows: the Decodings by their longest source, longest
        first, in the encoder runs that pad least for what the runs cost (encoder_runs). share_cross: beam searches
        of one beam size K whose graph takes cross K/V per sentence keep one cross row per sentence for its K rows
        (rows_per_cross); every Decoding of such a batch must be one (a batch that greedy rows join holds a cross
        row per row)."""
        decodings = sorted((d for d in decodings if d.search is not None), key=_longest_source, reverse=True)
        starts = encoder_runs([_longest_source(d) for d in decodings], [len(d.sources) for d in decodings])
        for first, end in zip(starts, [*starts[1:], len(decodings)]):
            self._add_encoded(decodings[first:end], share_cross)

    def _add_encoded(self, decodings: Sequence[Decoding], share_cross: bool) -> None:
        """One encoder run over the Decodings' sources; their rows after the batch's."""
        sources = [s for d in decodings for s in d.sources]
        ids, mask = pad_sources(sources, self.config.pad_id)
        first = 0
        examples = []
        for d in decodings:
            examples.append(first + d.search.row_example)
            first += len(d.sources)
        group = decodings[0].search.k if share_cross else 1
        row = self.rows
        for d in decodings:
            self._places.append(np.arange(row, row + d.rows))
            row += d.rows
        new = DecoderState.encode(self.engine, ids, mask, np.concatenate(examples), group)
        if self._state is None:
            self._state = new
        else:
            self._state.extend(new)
        self._decodings.extend(decodings)

    def drop(self, decoding: Decoding) -> None:
        """A Decoding whose caller went away: its rows leave now."""
        decoding.done = True
        self._keep([None if d is decoding else np.arange(d.rows) for d in self._decodings])

    def clear(self) -> None:
        """Every Decoding leaves (done), with its rows: the batch holds nothing."""
        for d in self._decodings:
            d.done = True
        self._decodings, self._places, self._state = [], [], None

    def step(self) -> List[Decoding]:
        """One decoder step for every row; each Decoding advances on its own rows -> the Decodings that ended (done,
        or dropped), which leave the batch with their rows."""
        rows = sum(d.rows for d in self._decodings)                # before the step
        broken = partial(_broken_graph, self.engine, rows)
        state = self._state
        assert state is not None, "step() on a batch that holds no rows"     # add() makes it
        head = self._decodings[0].head if len(self._decodings) == 1 else None
        kept: List[Optional[np.ndarray]]
        if head is not None and self.engine.searches_on_device:
            d = self._decodings[0]             # the log-probs stay where the step left them; the search runs there
            outputs, attention = state.step_search(d.last, d.head_inputs(head, self.config.vocab_size,
                                                                         self.config.eos_id),
                                                   head[2], d.options.return_attention)
            if not (outputs[-1] < np.inf).all():            # a NaN or +inf logit makes its whole row NaN
                raise broken()
            kept = [d.advance_head(outputs, self.config.vocab_size, attention, broken)]
        elif len(self._decodings) == 1 and self._on_device(self._decodings[0]):
            d = self._decodings[0]             # the log-probs stay on the GPU; [R, 2K] best come back
            values, indices, attention = state.step_top_k(d.last, d.top_k_bias(self.config.vocab_size),
                                                          2 * d.search.k, d.options.return_attention)
            if not (values[:, 0] < np.inf).all():           # a NaN or +inf logit makes its whole row NaN
                raise broken()
            kept = [d.advance_top_k(values, indices, attention, broken)]
        else:
            places = [_rows_of(p) for p in self._places]
            if len(self._decodings) == 1 and isinstance(places[0], slice) and places[0] == slice(0, rows):
                last = self._decodings[0].last
            else:
                last = np.empty((rows, 1), dtype=np.int64)
                for d, at in zip(self._decodings, places):
                    last[at] = d.last
            log_probs, attention = state.step(last, any(d.options.return_attention for d in self._decodings))
            # a NaN or +inf logit makes its whole log-softmax row NaN: one column tells, without a pass over [R, V]
            if not (log_probs[:, self.config.eos_id] < np.inf).all():
                raise broken()
            kept = []
            for d, at in zip(self._decodings, places):
                if d.done:                                           # dropped before this step
                    kept.append(None)
                    continue
                mine = None                                          # its own sources' columns
                if attention is not None and d.options.return_attention:
                    mine = attention[at][:, :max(len(x) for x in d.sources)]
                kept.append(d.advance(log_probs[at], mine, broken))     # a slice: a view; an index: a copy
        ended = [d for d in self._decodings if d.done]
        self._keep([None if d.done else p for d, p in zip(self._decodings, kept)])
        return ended

    def _keep(self, kept: List[Optional[np.ndarray]]) -> None:
        """The rows that go on, kept[i] Decoding i's (its parents; None: it leaves): placed by place_rows among
        several Decodings, in its own order for one (translate_batch's rows move as its search orders them)."""
        alive = [i for i, p in enumerate(kept) if p is not None]
        if not alive:
            self.clear()
            return
        state = self._state
        assert state is not None, "rows kept in a batch that holds none"   # add() makes it
        self._decodings = [self._decodings[i] for i in alive]
        sources = np.concatenate([self._places[i][kept[i]] for i in alive])
        if len(alive) > 1:
            places, index = place_rows(sources, state.group)
        else:
            places, index = np.arange(len(sources)), sources
        state.keep(index)
        bounds = np.cumsum([0, *(len(p) for p in kept if p is not None)])
        self._places = [places[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]

    def _on_device(self, d: Decoding) -> bool:
        return picks_on_device(self.engine, d.search, d.filters, self.config.vocab_size)


def decode_steps(engine: Engine, config: ModelConfig, sources: Sequence[Sequence[int]], options: DecodingOptions,
                 prefixes: Optional[Sequence[Sequence[int]]] = None, strategy: Optional[str] = None,
                 constraints: Optional[Sequence[Optional[Phrases]]] = None,
                 ) -> Generator[Search, None, List[List[Hypothesis]]]:
    """Decode `sources` (id lists ending with EOS); yields the search after every step (streaming)
    and returns, per source, up to num_hypotheses hypotheses, best first.

    strategy: None picks greedy/sampling for beam_size 1 and beam search above; "beam" forces beam
    search even for beam_size 1 (tests compare it with greedy).
    constraints: per source its phrases (non-empty id lists, or None): beam search with dynamic beam allocation
    (constraints.py); the hypotheses that hold every phrase rank first (Hypothesis.missing_constraints).
    """
    d = Decoding(config, sources, options, prefixes, strategy, constraints)
    if d.search is None:
        return d.results
    batch = RunningBatch(engine, config)
    batch.add([d], share_cross=isinstance(d.search, BeamSearch) and engine.cross_per_sentence)
    while not d.done:
        batch.step()
        yield d.search
    return d.hypotheses()


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
    state = DecoderState.encode(engine, ids, mask)
    out = np.zeros(forced.shape, dtype=np.float64)
    last, rows = np.full((n, 1), config.start_id, dtype=np.int64), np.arange(n)
    for t in range(forced.shape[1]):
        log_probs, _ = state.step(last)                                     # [n, V]
        if not (log_probs[:, config.eos_id] < np.inf).all():
            raise _broken_graph(engine, len(last))
        out[:, t] = log_probs[rows, forced[:, t]]
        last = forced[:, t:t + 1]
    return [out[i, :len(x)].tolist() for i, x in enumerate(labels)]
