"""Validation: loss over the whole validation set, and greedy decodes scored with BLEU, chrF and exact match."""
from __future__ import annotations

import math
import time
from typing import Callable, Dict, List, Optional, Sequence

import sacrebleu
import torch

from .budget import DECODE_CHUNK, FIRST_CHUNK, next_chunk_fits
from .data import Example, collate, make_batches
from .model import Transformer
from .optim import label_smoothed_loss
from .reference import greedy_search
from .tokenizer import Tokenizer, decode


@torch.no_grad()
def validation_loss(model: Transformer, examples: Sequence[Example], max_tokens: int,
                    smoothing: float) -> Dict[str, float]:
    """Per-token label-smoothed loss, nll loss and perplexity over all `examples`."""
    cfg = model.cfg
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total, total_nll, tokens = 0.0, 0.0, 0
    for idx in make_batches(examples, max_tokens, seed=0, epoch=0, maxi_batch=0):
        b = collate([examples[i] for i in idx], cfg.pad_id, cfg.bos_id, cfg.eos_id).to(device)
        logits = model(b.src_ids, b.src_mask, b.tgt_in)                 # [B, T, V]
        loss, nll = label_smoothed_loss(logits, b.labels, cfg.pad_id, smoothing)
        total, total_nll, tokens = total + loss.item(), total_nll + nll.item(), tokens + b.n_tokens
    model.train(was_training)
    nll_per_token = total_nll / max(tokens, 1)
    return {"loss": total / max(tokens, 1), "nll_loss": nll_per_token, "ppl": math.exp(min(nll_per_token, 50.0))}


@torch.no_grad()
def greedy_translations(model: Transformer, tok: Tokenizer, sources: Sequence[List[int]], max_len: int,
                        batch_size: int = 64, on_batch: Optional[Callable[[int], None]] = None) -> List[str]:
    """Greedy-decode source id lists (ending with EOS) -> detokenised texts, in input order. `on_batch(done)`
    is called after each batch with the number of sentences decoded so far."""
    was_training = model.training
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))   # similar lengths batch together
    out: List[str] = [""] * len(sources)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        batch = [sources[i] for i in idx]
        # the labels were limited to max_len tokens, EOS included; a reordering language may need more than S
        limit = min(max_len, 2 * max(len(s) for s in batch) + 10)
        for i, hyp in zip(idx, greedy_search(model, batch, max_length=limit)):
            out[i] = decode(tok, hyp.tokens)
        if on_batch is not None:
            on_batch(start + len(idx))
    model.train(was_training)
    return out


def greedy_translations_within(model: Transformer, tok: Tokenizer, sources: Sequence[List[int]], max_len: int,
                               allowance: float, on_batch: Optional[Callable[[int], None]] = None) -> List[str]:
    """Greedy-decode the first sources, in their order: FIRST_CHUNK, then DECODE_CHUNK at a time while the next
    chunk fits in `allowance` seconds at the pace so far (training/budget.py) -> the texts of those decoded."""
    out: List[str] = []
    began = time.monotonic()
    while len(out) < len(sources):
        chunk = sources[len(out):len(out) + (DECODE_CHUNK if out else FIRST_CHUNK)]
        if not next_chunk_fits(len(out), len(chunk), time.monotonic() - began, allowance):
            break
        done = len(out)
        out += greedy_translations(model, tok, chunk, max_len, batch_size=len(chunk),
                                   on_batch=None if on_batch is None else lambda n: on_batch(done + n))
    return out


def translation_metrics(hyps: Sequence[str], refs: Sequence[str]) -> Dict[str, float]:
    """Corpus BLEU and chrF (sacrebleu) and the exact-match rate (whitespace-normalised)."""
    if not refs:
        return {"bleu": 0.0, "chrf": 0.0, "exact_match": 0.0}
    same = sum(" ".join(h.split()) == " ".join(r.split()) for h, r in zip(hyps, refs))
    return {"bleu": sacrebleu.corpus_bleu(list(hyps), [list(refs)]).score,
            "chrf": sacrebleu.corpus_chrf(list(hyps), [list(refs)]).score,
            "exact_match": same / len(refs)}
