"""Reference decoding in PyTorch: greedy and beam search over encode() / decode_step().

This is the definition the ONNX runtime (runtime/decode/decoding.py and search.py) matches token for token.

Conventions (shared with the runtime, see docs/CONTRACTS.md):
  * a source is its subword ids followed by EOS; decoding starts from BOS.
  * a "step" runs the decoder once and appends one token. At most `max_length` steps run,
    so a hypothesis holds at most `max_length` tokens (EOS included while it is being decided).
    `max_length` is one number for every source, or one per source (the runtime's relative limit,
    max_length_a * src_len + max_length_b, gives each sentence its own).
  * PAD and BOS are never generated (their log-probs are set to -inf before selection).
  * EOS is forbidden (log-prob -inf) while fewer than `min_length` tokens have been generated.
  * score = sum of the log-probs of the generated tokens, EOS included when it was generated.
    length = number of generated tokens, EOS included. normalized_score = score / length**length_penalty
    (score itself when length is 0). Hypotheses are ranked by normalized_score.
  * Ties between equal scores go to the lower index: the lower beam, then the lower token id
    (a stable descending sort of the flattened [beam, vocab] candidates).

Beam search (per sentence, K = beam_size), as in fairseq:
  * step 0 expands beam 0 only (the K beams start identical).
  * each step ranks the K*V candidates cum_score[beam] + log_prob[beam, token] and takes the best 2K.
    An EOS candidate among the best K is finished (it leaves the beam); the first K non-EOS
    candidates of the 2K continue.
  * the sentence is done once K hypotheses have finished and the num_hypotheses-th best of them
    (normalized) scores at least as well as the best live beam does now (runtime/decode/search.py
    `beam_done`; fairseq's "once K have finished" alone loses to greedy).
    If `max_length` steps pass first, the live beams are finished as they are (without EOS).
  * the result is the best `num_hypotheses` finished hypotheses by normalized score.
Greedy search is beam search with K = 1: the argmax token each step (lowest id on ties), until EOS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple, Union

import torch

from seq2onnx.runtime.decode.search import beam_done, normalize

from .model import Transformer


@dataclass
class Hypothesis:
    tokens: List[int]                # generated ids, without EOS
    score: float                     # sum of log-probs (EOS included when generated)
    normalized_score: float          # score / length ** length_penalty
    finished: bool = True            # ended with EOS (False: stopped by max_length)


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int, device=None) -> Tuple[torch.Tensor, torch.Tensor]:
    """List of id lists -> (ids [B, S] int64 right-padded, mask [B, S] int64, 1 = token)."""
    s = max(1, max(len(x) for x in seqs))
    ids = torch.full((len(seqs), s), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(seqs), s), dtype=torch.long, device=device)
    for i, x in enumerate(seqs):
        ids[i, :len(x)] = torch.tensor(list(x), dtype=torch.long)
        mask[i, :len(x)] = 1
    return ids, mask


def _limits(max_length: Union[int, Sequence[int]], n: int, max_positions: int) -> List[int]:
    """One step limit per source, capped by the model's max_positions."""
    limits = [max_length] * n if isinstance(max_length, int) else list(max_length)
    if len(limits) != n:
        raise ValueError(f"max_length: one per source ({n}), got {len(limits)}")
    return [min(m, max_positions) for m in limits]


def best_candidates(cand: torch.Tensor, n: int) -> torch.Tensor:
    """[rows, n]: the first n indices of each row's stable descending sort (ties: the lower index first), without
    sorting the whole row: at a vocabulary of 58,101 and beam 4 that sort ranked 232,404 candidates a step for 2K of
    them. Each row's n-th largest value bounds its first n; only the candidates at or above it are sorted (in index
    order, so the stable sort keeps ties as the whole row's would). A row with NaN is sorted whole."""
    n = min(n, cand.shape[1])
    bounds = torch.topk(cand, n, dim=1).values[:, -1]
    out = []
    for row, bound in zip(cand, bounds):
        if torch.isnan(bound) or torch.isnan(row).any():
            out.append(torch.sort(row, descending=True, stable=True).indices[:n])
            continue
        idx = torch.nonzero(row >= bound).squeeze(1)
        out.append(idx[torch.sort(row[idx], descending=True, stable=True).indices[:n]])
    return torch.stack(out)


def _step_log_probs(model: Transformer, last, mask, past, cross, step: int, min_length: int):
    """One decoder step's log-probs with the reference's rules: PAD and BOS are never generated, EOS not before
    min_length tokens -> (log_probs [rows, V], the next cache)."""
    cfg = model.cfg
    logp, past = model.decode_step(last, mask, past, cross)
    logp[:, [cfg.pad_id, cfg.bos_id]] = -math.inf
    if step < min_length:
        logp[:, cfg.eos_id] = -math.inf
    return logp, past


def _beam_start(model: Transformer, sources: Sequence[Sequence[int]], k: int, max_length):
    """What both beam searches start from: the sources encoded once and repeated K times (row = sentence * K
    + beam) -> (device, B, per-sentence limits, mask [B*K, S], cross K/V per layer, an empty cache)."""
    cfg = model.cfg
    model.eval()
    device = next(model.parameters()).device
    src_ids, src_mask = pad_batch(sources, cfg.pad_id, device)
    b = src_ids.shape[0]
    memory = model.encode(src_ids, src_mask)
    cross = [(kk.repeat_interleave(k, 0), vv.repeat_interleave(k, 0)) for kk, vv in model.cross_kv(memory)]
    return (device, b, _limits(max_length, b, cfg.max_positions), src_mask.repeat_interleave(k, 0), cross,
            model.empty_cache(b * k, device))


@torch.no_grad()
def beam_search(model: Transformer, sources: Sequence[Sequence[int]], beam_size: int = 4,
                num_hypotheses: int = 1, length_penalty: float = 1.0,
                max_length: Union[int, Sequence[int]] = 256, min_length: int = 0) -> List[List[Hypothesis]]:
    """sources: id lists ending with EOS. Returns, per source, `num_hypotheses` hypotheses, best first."""
    if beam_size < 1 or not 1 <= num_hypotheses <= beam_size:
        raise ValueError("need beam_size >= 1 and 1 <= num_hypotheses <= beam_size")
    cfg = model.cfg
    k, v_size, eos = beam_size, cfg.vocab_size, cfg.eos_id
    device, b, limits, mask_k, cross, past = _beam_start(model, sources, k, max_length)

    cum = torch.full((b, k), -math.inf, dtype=torch.float32, device=device)
    cum[:, 0] = 0.0
    seqs = torch.zeros((b * k, 0), dtype=torch.long, device=device)        # [B*K, step]
    last = torch.full((b * k, 1), cfg.start_id, dtype=torch.long, device=device)
    finished: List[List[Hypothesis]] = [[] for _ in range(b)]
    done = [False] * b

    for step in range(max(limits, default=0) + 1):
        # a sentence whose `limit` steps ran ends here: its live beams are finished as they are, without EOS
        for i in range(b):
            if not done[i] and step == limits[i]:
                for beam in range(k):
                    score = cum[i, beam].item()
                    if score > -math.inf:
                        finished[i].append(Hypothesis(seqs[i * k + beam].tolist(), score,
                                                      normalize(score, step, length_penalty), finished=False))
                done[i] = True
        if all(done):
            break
        logp, past = _step_log_probs(model, last, mask_k, past, cross, step, min_length)   # [B*K, V]
        cand = (cum[:, :, None] + logp.view(b, k, v_size)).view(b, k * v_size)
        order = best_candidates(cand, 2 * k)                                                 # [B, 2K]
        next_rows, next_tokens, next_cum = [], [], []
        for i in range(b):
            kept = []
            for rank, flat in enumerate(order[i].tolist()):
                beam, tok = divmod(flat, v_size)
                score = cand[i, flat].item()
                if tok == eos:
                    if rank < k and not done[i] and score > -math.inf:
                        finished[i].append(Hypothesis(seqs[i * k + beam].tolist(), score,
                                                      normalize(score, step + 1, length_penalty)))
                    continue
                kept.append((beam, tok, score))
                if len(kept) == k:
                    break
            if not done[i] and beam_done([h.normalized_score for h in finished[i]], k, num_hypotheses,
                                         normalize(max((s for _, _, s in kept), default=-math.inf),
                                                   step + 1, length_penalty)):
                done[i] = True
            for beam, tok, score in kept:
                next_rows.append(i * k + beam)
                next_tokens.append(tok)
                next_cum.append(score)
        if all(done):
            break
        rows = torch.tensor(next_rows, device=device)
        toks = torch.tensor(next_tokens, device=device)
        cum = torch.tensor(next_cum, dtype=torch.float32, device=device).view(b, k)
        seqs = torch.cat([seqs[rows], toks[:, None]], dim=1)
        past = [(pk[rows], pv[rows]) for pk, pv in past]
        last = toks[:, None]

    results = []
    for i in range(b):
        hyps = sorted(finished[i], key=lambda h: -h.normalized_score)      # stable: earlier first on ties
        if not hyps:                                                       # max_length == 0
            hyps = [Hypothesis([], 0.0, 0.0, finished=False)]
        results.append(hyps[:num_hypotheses])
    return results


@torch.no_grad()
def greedy_search(model: Transformer, sources: Sequence[Sequence[int]], max_length: Union[int, Sequence[int]] = 256,
                  min_length: int = 0, length_penalty: float = 1.0) -> List[Hypothesis]:
    """Argmax decoding; identical to beam_search(..., beam_size=1) but without the candidate sort."""
    cfg = model.cfg
    model.eval()
    device = next(model.parameters()).device
    src_ids, src_mask = pad_batch(sources, cfg.pad_id, device)
    b = src_ids.shape[0]
    limits = _limits(max_length, b, cfg.max_positions)
    cross = model.cross_kv(model.encode(src_ids, src_mask))
    past = model.empty_cache(b, device)
    last = torch.full((b, 1), cfg.start_id, dtype=torch.long, device=device)
    tokens: List[List[int]] = [[] for _ in range(b)]
    scores = [0.0] * b
    ended = [False] * b
    for step in range(max(limits, default=0)):
        logp, past = _step_log_probs(model, last, src_mask, past, cross, step, min_length)
        best = logp.argmax(dim=-1)                                          # first max on ties
        for i in range(b):
            if ended[i] or step >= limits[i]:                               # its limit: it stops, unfinished
                continue
            tok = int(best[i])
            scores[i] += float(logp[i, tok])
            if tok == cfg.eos_id:
                ended[i] = True
            else:
                tokens[i].append(tok)
        if all(ended[i] or step + 1 >= limits[i] for i in range(b)):
            break
        last = best[:, None]
    out = []
    for i in range(b):
        length = len(tokens[i]) + (1 if ended[i] else 0)
        out.append(Hypothesis(tokens[i], scores[i], normalize(scores[i], length, length_penalty), ended[i]))
    return out


@torch.no_grad()
def cross_attention(model, source: Sequence[int], target: Sequence[int]) -> torch.Tensor:
    """The last decoder layer's cross-attention weights, averaged over heads, for each target token: the model's
    teacher-forced forward() over BOS + target (a path independent of the step graphs), one row per position
    -> [len(target) + 1, len(source)]: row t is what the step that chose target[t] (the last: EOS) read."""
    from seq2onnx.training.model import attention_weights
    layer = model.decoder_layers[-1].cross_attn
    rows: List[torch.Tensor] = []

    def capture(module, args):
        x, kv, bias = args[:3]                                                 # x [1, T, D], kv [1, H, S, Dh]
        rows.append(attention_weights(module.split_heads(module.q_proj(x)), kv[0], bias).mean(dim=1)[0])

    hook = layer.register_forward_pre_hook(capture)
    try:
        src = torch.tensor([list(source)])
        model(src, torch.ones_like(src), torch.tensor([[model.cfg.start_id] + list(target)]))
    finally:
        hook.remove()
    return rows[0]


# --- terminology constraints ---------------------------------------------------------------------------------
@dataclass
class ConstrainedHypothesis(Hypothesis):
    missing_constraints: int = 0     # phrases it does not hold


def _holds(tokens: Sequence[int], phrase: Sequence[int]) -> bool:
    """The phrase is a contiguous run of tokens."""
    n = len(phrase)
    return any(list(tokens[i:i + n]) == list(phrase) for i in range(len(tokens) - n + 1))


def _progress(tokens: Sequence[int], phrase: Sequence[int]) -> int:
    """The longest proper prefix of the phrase that the tokens end with."""
    for n in range(min(len(phrase) - 1, len(tokens)), 0, -1):
        if list(tokens[len(tokens) - n:]) == list(phrase[:n]):
            return n
    return 0


def _bank(tokens: Sequence[int], phrases: Sequence[Sequence[int]]) -> int:
    """Constraint ids met: those of the phrases held, plus the progress of the furthest phrase not held."""
    held = sum(len(p) for p in phrases if _holds(tokens, p))
    return held + max([_progress(tokens, p) for p in phrases if not _holds(tokens, p)], default=0)


@torch.no_grad()
def constrained_beam_search(model: Transformer, sources: Sequence[Sequence[int]],
                            constraints: Sequence[Sequence[Sequence[int]]], beam_size: int = 4,
                            num_hypotheses: int = 1, length_penalty: float = 1.0,
                            max_length: Union[int, Sequence[int]] = 256,
                            min_length: int = 0) -> List[List[ConstrainedHypothesis]]:
    """Lexically constrained beam search with dynamic beam allocation (Post & Vilar, 2018), the runtime's
    definition (runtime/decode/constraints.py), written out sentence by sentence. `constraints`: per source its phrases
    (id lists) that every hypothesis must hold as a contiguous run. As beam_search, except:
      * EOS is forbidden in a beam that does not hold every phrase;
      * a step's candidates are the best 2K of the K*V (as beam_search), each live beam's best token, and each
        live beam's next id of each phrase it does not hold (phrase[progress]), without repeats and without
        those scoring -inf; a candidate's bank is _bank of its beam's tokens and the candidate's token;
      * they are ordered turn by turn: turn r takes the r-th best (score, then the lower flat index) of every
        bank, the bank with the most ids met first; EOS candidates among the first K finish, the first K
        others continue (padded with dead beams, score -inf, when fewer);
      * the result ranks the hypotheses missing fewest phrases first, then by normalized score; a hypothesis
        stopped by max_length says how many phrases it misses.
    """
    if beam_size < 2 or not 1 <= num_hypotheses <= beam_size:
        raise ValueError("need beam_size >= 2 and 1 <= num_hypotheses <= beam_size")
    cfg = model.cfg
    k, v_size, eos = beam_size, cfg.vocab_size, cfg.eos_id
    device, b, limits, mask_k, cross, past = _beam_start(model, sources, k, max_length)
    phrases = [[list(p) for p in c] for c in constraints]
    cum = [[0.0] + [-math.inf] * (k - 1) for _ in range(b)]
    seqs: List[List[List[int]]] = [[[] for _ in range(k)] for _ in range(b)]
    last = torch.full((b * k, 1), cfg.start_id, dtype=torch.long, device=device)
    finished: List[List[ConstrainedHypothesis]] = [[] for _ in range(b)]
    done = [False] * b

    def finish(i: int, tokens: List[int], score: float, length: int, ended: bool) -> None:
        missing = sum(not _holds(tokens, p) for p in phrases[i])
        finished[i].append(ConstrainedHypothesis(list(tokens), score, normalize(score, length, length_penalty),
                                                 ended, missing))

    for step in range(max(limits, default=0) + 1):
        for i in range(b):
            if not done[i] and step == limits[i]:
                for beam in range(k):
                    if cum[i][beam] > -math.inf:
                        finish(i, seqs[i][beam], cum[i][beam], step, False)
                done[i] = True
        if all(done):
            break
        logp, past = _step_log_probs(model, last, mask_k, past, cross, step, min_length)   # [B*K, V]
        for i in range(b):
            for beam in range(k):
                if not all(_holds(seqs[i][beam], p) for p in phrases[i]):
                    logp[i * k + beam, eos] = -math.inf
        cand = (torch.tensor(cum, dtype=torch.float32, device=device)[:, :, None]
                + logp.view(b, k, v_size)).view(b, k * v_size)
        order = best_candidates(cand, 2 * k)
        rows, toks, new_cum = [], [], []
        for i in range(b):
            flats = set(order[i].tolist())
            for beam in range(k):
                if cum[i][beam] > -math.inf:
                    flats.add(beam * v_size + int(cand[i, beam * v_size:(beam + 1) * v_size].argmax()))
                    for p in phrases[i]:
                        if not _holds(seqs[i][beam], p):
                            flats.add(beam * v_size + p[_progress(seqs[i][beam], p)])
            banks: dict = {}
            for flat in flats:
                score = cand[i, flat].item()
                if score > -math.inf:
                    beam, tok = divmod(flat, v_size)
                    banks.setdefault(_bank(seqs[i][beam] + [tok], phrases[i]), []).append((-score, flat))
            dealt = []
            for turn in range(max((len(c) for c in banks.values()), default=0)):
                for bank in sorted(banks, reverse=True):
                    ranked = sorted(banks[bank])
                    if turn < len(ranked):
                        dealt.append((ranked[turn][1], -ranked[turn][0]))
            kept = []
            for rank, (flat, score) in enumerate(dealt):
                beam, tok = divmod(flat, v_size)
                if tok == eos:
                    if rank < k and not done[i]:
                        finish(i, seqs[i][beam], score, step + 1, True)
                    continue
                if len(kept) < k:
                    kept.append((beam, tok, score))
            if not done[i] and beam_done([h.normalized_score for h in finished[i]], k, num_hypotheses,
                                         normalize(max((s for _, _, s in kept), default=-math.inf),
                                                   step + 1, length_penalty)):
                done[i] = True
            kept += [(0, eos, -math.inf)] * (k - len(kept))                    # dead beams
            for beam, tok, score in kept:
                rows.append(i * k + beam)
                toks.append(tok)
                new_cum.append(score)
        if all(done):
            break
        seqs = [[seqs[r // k][r % k] + [t] for r, t in zip(rows[i * k:(i + 1) * k], toks[i * k:(i + 1) * k])]
                for i in range(b)]
        cum = [new_cum[i * k:(i + 1) * k] for i in range(b)]
        index = torch.tensor(rows, device=device)
        past = [(pk[index], pv[index]) for pk, pv in past]
        last = torch.tensor(toks, device=device)[:, None]

    results = []
    for i in range(b):
        hyps = sorted(finished[i], key=lambda h: (h.missing_constraints, -h.normalized_score))
        if not hyps:                                                       # max_length == 0
            hyps = [ConstrainedHypothesis([], 0.0, 0.0, False, len(phrases[i]))]
        results.append(hyps[:num_hypotheses])
    return results
