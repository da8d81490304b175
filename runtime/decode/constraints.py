"""Terminology constraints: phrases that every returned hypothesis must hold, for beam search.

Lexically constrained beam search with dynamic beam allocation (DBA; Post & Vilar, 2018, as in Sockeye and
fairseq), in search.BeamSearch's terms:
  * a phrase is a list of target ids; it is **met** once they appear contiguously in the hypothesis. Each beam
    row follows each phrase with a Knuth-Morris-Pratt automaton (its state: how much of the phrase the
    hypothesis ends with), so "met" is exactly "the ids are a contiguous run of the hypothesis";
  * EOS is forbidden while a row has a phrase unmet;
  * a step's candidates are the best 2K of the K x V (as without constraints), each beam's best token, and
    for each beam the token that advances each of its unmet phrases;
  * a candidate's **bank** is how many constraint ids it has met: the ids of its met phrases plus the progress
    of its furthest unmet one. The token that advances that phrase takes a beam up a bank, so the top bank
    climbs one bank a step: a hypothesis that holds every phrase is there after (sum of phrase lengths) steps;
  * `Constraints.order` deals the candidates out bank by bank, the bank furthest along first, each bank's
    best (score, then the lower flat index) per turn: with every bank full, each of the B banks gets K // B of
    the first K places and the furthest K mod B banks one more; a bank short of candidates leaves its turns to
    the others. The search then does with that order what it does with the score order without constraints:
    the EOS candidates among the first K finish, the first K others continue.
A sentence without phrases has one bank and its order is the score order: it decodes as without constraints.

Phrases come in as text (Translator.translate_batch) and are tokenized alone as target text
(`normalize_phrases`): the package's Metaspace tokenizer marks the first piece a word start
("Datei" -> "▁Datei"), as it tokenizes a word anywhere in a sentence; so a phrase matches where its first
word starts a word of the translation ("Datei" is met by "die Datei", not by "Textdatei").
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..options import Arg, OptionError, OptionTypeError, check_ids, check_text

Phrases = Sequence[Sequence[int]]          # one sentence's phrases, id lists


# The work of a constrained beam step is bounded: each of a sentence's beam_size x (phrases + 3) candidates (the best
# 2K, each beam's best token, each beam's next token of each phrase) carries a state per phrase (Constraints.order),
# and each phrase has its automaton's table. MAX_CONSTRAINT_WORK bounds these states and table entries for the
# sentences decoded at once: translate_ids decodes fewer sentences at a time where they would pass it, and refuses
# a sentence that passes it alone (beam 256 with 256 phrases a sentence took gigabytes and minutes without it).
MAX_CONSTRAINT_WORK = 2 ** 22


def require_beam(beam_size: int) -> None:
    """Constraints need beam search: greedy decoding and sampling cannot make room for a phrase."""
    if beam_size < 2:
        raise OptionError(Arg("beam_size"), " must be >= 2 for ", Arg("constraints"),
                          f" (beam search; 4 is the default), got {beam_size}")


def _check_list(arg: Arg, value: Any, what: str, most: Optional[int]) -> None:
    """`value` a list or tuple of at most `most` entries (a phrase has a token at least: more cannot fit)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise OptionTypeError(arg, f" must be a list of {what}, got {type(value).__name__}"
                              + (": wrap it in a list" if isinstance(value, str) else ""))
    if most is not None and len(value) > most:
        raise OptionError(arg, f" holds {len(value)} phrases; a translation holds at most {most} tokens (the model's "
                          "max_positions), so at most as many phrases: drop some")


def normalize_phrases(constraints: Any, n: int, max_tokens: Optional[int] = None,
                      max_chars: Optional[int] = None) -> List[List[str]]:
    """The API's `constraints` (one list of phrases, or None, per input) -> per input its phrases, each with
    its whitespace runs made one space, without repeats (a phrase asked for twice need appear once).
    Sizes are refused before any work: more than max_tokens phrases, a phrase of more than max_chars characters
    (None: not checked, e.g. by the CLI before the model is loaded)."""
    if isinstance(constraints, (str, bytes)) or not isinstance(constraints, (list, tuple)) or len(constraints) != n:
        raise OptionError(Arg("constraints"), f" must be a list of {n} phrase lists (or None entries), one per input")
    out: List[List[str]] = []
    for i, phrases in enumerate(constraints):
        _check_list(Arg("constraints", f"[{i}]"), [] if phrases is None else phrases, "phrases (str)", max_tokens)
        texts: Dict[str, None] = {}
        for j, phrase in enumerate(phrases or []):
            check_text(Arg("constraints", f"[{i}][{j}]"), phrase)
            if max_chars is not None and len(phrase) > max_chars:
                raise OptionError(Arg("constraints", f"[{i}][{j}]", phrase), f" is longer than a translation can be "
                                  f"(the model's max_positions, {max_tokens} tokens)")
            text = " ".join(phrase.split())
            if not text:
                raise OptionError(Arg("constraints", f"[{i}][{j}]", phrase),
                                  " is empty: a constraint phrase needs at least one word")
            texts[text] = None
        out.append(list(texts))
    return out


def check_phrase_ids(name: str, constraint_ids: Any, n: int, vocab_size: int, never: Sequence[int],
                     max_tokens: int) -> List[List[List[int]]]:
    """Id-level constraints (translate_ids): per source a list of non-empty id lists (or None), ids in the
    vocabulary and none of `never` (PAD, BOS, EOS: no translation holds them), at most max_tokens ids per
    source (a translation holds no more). -> the phrases as lists, repeats dropped."""
    if isinstance(constraint_ids, (str, bytes)) or not isinstance(constraint_ids, (list, tuple)) \
            or len(constraint_ids) != n:
        raise OptionError(Arg(name), f" must be a list of {n} lists of id lists (or None entries), one per source")
    out: List[List[List[int]]] = []
    for i, phrases in enumerate(constraint_ids):
        _check_list(Arg(name, f"[{i}]"), [] if phrases is None else phrases, "id lists (or None)", max_tokens)
        kept: Dict[Tuple[int, ...], None] = {}
        for j, phrase in enumerate(phrases or []):
            kept[tuple(check_ids(Arg(name, f"[{i}][{j}]"), phrase, vocab_size, max_tokens, 1, never))] = None
        total = sum(len(p) for p in kept)
        if total > max_tokens:
            raise OptionError(Arg(name, f"[{i}]"), f": its phrases hold {total} tokens in all; a translation holds at "
                              f"most {max_tokens} (the model's max_positions): drop some phrases")
        out.append([list(p) for p in kept])
    return out


def _sizes(sentence: Phrases) -> Tuple[int, int, int, int]:
    """(1 sentence, its phrases, its tokens x table columns, its table columns (its alphabet + 1)): what `work`
    adds up over sentences (the phrases by their maximum)."""
    columns = len({t for x in sentence for t in x}) + 1
    return 1, len(sentence), sum(len(x) for x in sentence) * columns, columns


def _add(a: Tuple[int, int, int, int], b: Tuple[int, int, int, int]) -> Tuple[int, int, int, int]:
    return a[0] + b[0], max(a[1], b[1]), a[2] + b[2], a[3] + b[3]


def _work(sizes: Tuple[int, int, int, int], beam_size: int) -> int:
    """Constraints pads each sentence to the most phrases among them, W: per sentence, beam_size x (W + 3)
    candidates with W states each, and its tables, (its tokens + W) x its columns entries."""
    sentences, width, tables, columns = sizes
    return sentences * beam_size * (width + 3) * width + tables + width * columns if width else 0


def work(phrases: Sequence[Phrases], beam_size: int) -> int:
    """The automaton states and table entries of one constrained step of these sentences decoded together
    (0 without phrases: no automata). Bounded by MAX_CONSTRAINT_WORK."""
    total = (0, 0, 0, 0)
    for sentence in phrases:
        total = _add(total, _sizes(sentence))
    return _work(total, beam_size)


def check_work(name: str, phrases: Sequence[Phrases], beam_size: int) -> None:
    """Refuse a sentence whose constrained step alone is more work than MAX_CONSTRAINT_WORK (before any work)."""
    for i, sentence in enumerate(phrases):
        if work([sentence], beam_size) > MAX_CONSTRAINT_WORK:
            raise OptionError(Arg(name, f"[{i}]"), f": {len(sentence)} phrases at ", Arg("beam_size"), f" {beam_size} "
                              f"make {work([sentence], beam_size):,} automaton states a step, more than the "
                              f"{MAX_CONSTRAINT_WORK:,} allowed (MAX_CONSTRAINT_WORK): give fewer phrases or a "
                              "smaller ", Arg("beam_size"))


def check_batch_work(phrases: Sequence[Phrases], beam_size: int) -> None:
    """Refuse a batch (decoded at once: decoding.decode_steps) whose constrained step is more work than
    MAX_CONSTRAINT_WORK, naming a sentence that is so alone, else the batch (Translator.translate_ids splits its
    batches with split_work, so it never sees this)."""
    check_work("constraints", phrases, beam_size)
    if work(phrases, beam_size) > MAX_CONSTRAINT_WORK:
        raise OptionError(f"{len(phrases)} sentences with ", Arg("constraints"), " at ", Arg("beam_size"),
                          f" {beam_size} make {work(phrases, beam_size):,} automaton states a step, more than the "
                          f"{MAX_CONSTRAINT_WORK:,} allowed (MAX_CONSTRAINT_WORK): decode fewer sentences at once")


def split_work(batch: Sequence[int], phrases: Sequence[Phrases], beam_size: int) -> List[List[int]]:
    """The batch's sentences (indices into phrases) in groups decoded at once, each within MAX_CONSTRAINT_WORK
    (check_work has refused a sentence over it alone), in order."""
    groups: List[List[int]] = []
    last = (0, 0, 0, 0)                                     # the last group's sizes
    for i in batch:
        grown = _add(last, _sizes(phrases[i]))
        if groups and _work(grown, beam_size) <= MAX_CONSTRAINT_WORK:
            groups[-1].append(i)
            last = grown
        else:
            groups.append([i])
            last = _sizes(phrases[i])
    return groups


def kmp_table(phrase: Sequence[int], alphabet: Sequence[int]) -> np.ndarray:
    """The phrase's Knuth-Morris-Pratt automaton over `alphabet` (sorted ids; column len(alphabet): any other id):
    table[s, c] is the state after the id of column c in state s, a state being the length of the longest prefix
    of the phrase that the hypothesis ends with. State len(phrase) (met) stays."""
    column = {t: c for c, t in enumerate(alphabet)}
    n = len(phrase)
    table = np.zeros((n + 1, len(alphabet) + 1), dtype=np.int64)
    table[n] = n
    if n == 0:
        return table
    table[0, column[phrase[0]]] = 1
    restart = 0                                     # the state the phrase's own longest border leads to
    for s in range(1, n):
        table[s] = table[restart]
        table[s, column[phrase[s]]] = s + 1
        restart = table[restart, column[phrase[s]]]
    return table


class Constraints:
    """A batch's phrases (per sentence, padded to P with empty ones, met from the start) and each beam row's
    state in each of its sentence's phrases: `state` [rows, P], reordered and shrunk with the beam's rows."""

    def __init__(self, phrases: Sequence[Phrases], beam_size: int, vocab_size: int):
        n, self.v = len(phrases), vocab_size
        width = max(1, max(len(p) for p in phrases))
        longest = max([1] + [len(x) for p in phrases for x in p])
        self.length = np.zeros((n, width), dtype=np.int64)                # [B, P]
        self.ids = np.zeros((n, width, longest), dtype=np.int64)          # [B, P, L]: the phrases' ids
        self.offset = np.zeros((n, width), dtype=np.int64)                # each phrase's table in self.table
        self.columns = np.zeros(n, dtype=np.int64)                        # per sentence: its ids + 1 (other)
        self.first = np.zeros(n, dtype=np.int64)                          # where its ids start in self.keys
        keys: List[int] = []
        tables: List[np.ndarray] = []
        size = 0
        for b, sentence in enumerate(phrases):
            alphabet = sorted({t for x in sentence for t in x})
            self.first[b], self.columns[b] = len(keys), len(alphabet) + 1
            keys.extend(b * vocab_size + t for t in alphabet)
            for p in range(width):
                x = list(sentence[p]) if p < len(sentence) else []
                self.length[b, p] = len(x)
                self.ids[b, p, :len(x)] = x
                self.offset[b, p] = size
                tables.append(kmp_table(x, alphabet).ravel())
                size += tables[-1].size
        self.keys = np.array(keys + [n * vocab_size], dtype=np.int64)      # sorted; a sentinel past the last
        self.table = np.concatenate(tables)
        self.state = np.zeros((n * beam_size, width), dtype=np.int64)     # [rows, P]

    # --- the automata, vectorised over rows -----------------------------------------------------------------
    def step(self, state: np.ndarray, sentence: np.ndarray, token: np.ndarray) -> np.ndarray:
        """States [N, P] of rows of `sentence` [N] -> their states after `token` [N]."""
        key = sentence * self.v + token
        i = np.searchsorted(self.keys, key)                                # < len(keys): the sentinel is larger
        column = np.where(self.keys[i] == key, i - self.first[sentence], self.columns[sentence] - 1)
        flat = self.offset[sentence] + state * self.columns[sentence][:, None] + column[:, None]
        return self.table[flat]

    def bank(self, state: np.ndarray, sentence: np.ndarray) -> np.ndarray:
        """Constraint ids met: those of the met phrases plus the progress of the furthest unmet one. [N]"""
        met = state == self.length[sentence]
        return np.where(met, state, 0).sum(axis=1) + np.where(met, 0, state).max(axis=1)

    def missing(self, rows: np.ndarray, sentence: np.ndarray) -> np.ndarray:
        """How many phrases each row does not hold yet. [N]"""
        return (self.state[rows] < self.length[sentence]).sum(axis=1)

    # --- what BeamSearch.advance asks ----------------------------------------------------------------------
    def forbid_eos(self, log_probs: np.ndarray, row_example: np.ndarray, eos: int) -> None:
        """EOS only once every phrase is met: -inf in the rows with one unmet (in place)."""
        log_probs[(self.state < self.length[row_example]).any(axis=1), eos] = -np.inf

    def order(self, cand: np.ndarray, top: np.ndarray, examples: np.ndarray, k: int) -> np.ndarray:
        """The step's candidates in DBA's order: cand [A, K*V] cumulative scores (EOS forbidden where a phrase
        is unmet), top [A, 2K] their best 2K flat ids -> [A, 2K] flat ids: the best 2K, each beam's best token
        and each beam's next phrase ids, without repeats, dealt out bank by bank (the module docstring); then
        the candidates with score -inf, which only fill dead beams."""
        a_n, v = len(examples), self.v
        rows = np.arange(a_n * k)
        sentence = np.repeat(examples, k)
        unmet = self.state < self.length[sentence]                                       # [A*K, P]
        at = np.minimum(self.state, self.length[sentence] - 1).clip(0)
        upcoming = self.ids[sentence[:, None], np.arange(unmet.shape[1]), at]             # [A*K, P]
        upcoming = np.where(unmet, (rows % k)[:, None] * v + upcoming, top[rows // k, :1])   # met: a repeat
        best = cand.reshape(a_n, k, v).argmax(axis=2) + np.arange(k) * v                # [A, K]
        flat = np.concatenate([top, best, upcoming.reshape(a_n, -1)], axis=1)            # [A, M]
        m = flat.shape[1]
        # repeats: all but the first copy of each flat id in a row
        by_id = np.argsort(flat, axis=1, kind="stable")
        ids = np.take_along_axis(flat, by_id, axis=1)
        repeat = np.zeros_like(flat, dtype=bool)
        np.put_along_axis(repeat, by_id, np.pad(ids[:, 1:] == ids[:, :-1], ((0, 0), (1, 0))), axis=1)
        score = np.take_along_axis(cand, flat, axis=1)
        # each candidate's bank: its parent row's states after its token
        parent = (np.arange(a_n)[:, None] * k + flat // v).reshape(-1)
        state = self.step(self.state[parent], sentence[parent], (flat % v).reshape(-1))
        bank = self.bank(state, sentence[parent]).reshape(a_n, m)
        tier = np.where(repeat, 2, np.where(score > -np.inf, 0, 1))                      # 0 live, 1 -inf, 2 repeat
        row = np.repeat(np.arange(a_n), m)
        # rank of each candidate within its bank (score down, flat id up) ...
        keys = (flat.ravel(), -score.ravel(), -bank.ravel(), tier.ravel(), row)
        ranked = np.lexsort(keys)
        group = np.stack([key[ranked] for key in keys[2:]])                             # bank, tier, row
        starts = np.concatenate([[True], (group[:, 1:] != group[:, :-1]).any(axis=0)])
        start = np.maximum.accumulate(np.where(starts, np.arange(len(ranked)), 0))
        rank = np.empty(len(ranked), dtype=np.int64)
        rank[ranked] = np.arange(len(ranked)) - start
        # ... then turn by turn, the bank furthest along first
        dealt = np.lexsort((flat.ravel(), -bank.ravel(), rank, tier.ravel(), row)).reshape(a_n, m)
        return flat.ravel()[dealt[:, :2 * k]]

    def advance(self, parents: np.ndarray, tokens: np.ndarray, row_example: np.ndarray) -> None:
        """The rows' states after the step: parents [R] (the row each continues), tokens [R] (its new token)."""
        self.state = self.step(self.state[parents], row_example, tokens)

    def keep(self, rows: np.ndarray) -> None:
        """Only these rows go on (their sentences are still decoding)."""
        self.state = self.state[rows]
