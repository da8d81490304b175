"""Parallel data: reading (TSV or two aligned files), length filtering, token-based batching.

Reading never crashes on a bad line and never drops one silently: every skipped line is
counted under its reason and `SkipCounts.report()` gives one line per reason.

Batching follows fairseq: examples are sorted by length (ties shuffled by seed), packed into
batches of at most `max_tokens` padded tokens, and the batch order is shuffled per epoch
by (seed, epoch). The position in that stream, (epoch, batch index), is the `data_state`
saved in checkpoints, so a resumed run sees exactly the batches it would have seen.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from seq2onnx.runtime.errors import Seq2OnnxError

from .tokenizer import Tokenizer, decoder_io

Pair = Tuple[str, str]

# skip reasons, in report order
NO_TAB, EXTRA_TAB, EMPTY_SIDE, BAD_UTF8, TOO_LONG = (
    "no tab", "more than one tab", "empty source or target", "invalid UTF-8", "over the length limit")


@dataclass
class SkipCounts:
    """How many lines of one input were read, kept, and skipped for each reason."""
    name: str
    read: int = 0
    skipped: Counter = field(default_factory=Counter)

    @property
    def kept(self) -> int:
        return self.read - sum(self.skipped.values())

    def report(self) -> List[str]:
        """One line per skip reason, e.g. 'train.tsv: skipped 3 of 100 lines: no tab'."""
        return [f"{self.name}: skipped {n} of {self.read} lines: {reason}" for reason, n in self.skipped.items() if n]

    def summary(self) -> str:
        """'2 lines read; skipped: 1 no tab, 1 invalid UTF-8' for a one-line message."""
        skipped = ", ".join(f"{n} {reason}" for reason, n in self.skipped.items() if n)
        return f"{self.read} lines read" + (f"; skipped: {skipped}" if skipped else "")


def _lines(path: str) -> List[bytes]:
    if not os.path.isfile(path):
        raise Seq2OnnxError(f"data file not found: {path}: check the path")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise Seq2OnnxError(f"cannot read data file {path}: {e.strerror}: check its permissions")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()                     # the newline that ends the last line
    return [line[:-1] if line.endswith(b"\r") else line for line in lines]


def _text(raw: bytes) -> Optional[str]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_tsv(path: str) -> Tuple[List[Pair], SkipCounts]:
    """`source<TAB>target` per line -> (pairs, counts). Sides are stripped of surrounding spaces."""
    counts = SkipCounts(os.path.basename(path))
    pairs = []
    for raw in _lines(path):
        counts.read += 1
        line = _text(raw)
        if line is None:
            counts.skipped[BAD_UTF8] += 1
            continue
        n_tabs = line.count("\t")
        if n_tabs != 1:
            counts.skipped[NO_TAB if n_tabs == 0 else EXTRA_TAB] += 1
            continue
        src, tgt = (s.strip() for s in line.split("\t"))
        if not src or not tgt:
            counts.skipped[EMPTY_SIDE] += 1
            continue
        pairs.append((src, tgt))
    return pairs, counts


def read_parallel(src_path: str, tgt_path: str) -> Tuple[List[Pair], SkipCounts]:
    """Two aligned files, line i of one translates line i of the other -> (pairs, counts)."""
    src_lines, tgt_lines = _lines(src_path), _lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise Seq2OnnxError(f"{src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}: "
                            "aligned source and target files need the same number of lines")
    counts = SkipCounts(f"{os.path.basename(src_path)}+{os.path.basename(tgt_path)}")
    pairs = []
    for raw_src, raw_tgt in zip(src_lines, tgt_lines):
        counts.read += 1
        src, tgt = _text(raw_src), _text(raw_tgt)
        if src is None or tgt is None:
            counts.skipped[BAD_UTF8] += 1
            continue
        src, tgt = src.strip(), tgt.strip()
        if not src or not tgt:
            counts.skipped[EMPTY_SIDE] += 1
            continue
        pairs.append((src, tgt))
    return pairs, counts


@dataclass
class Example:
    src: List[int]          # subwords + [EOS]
    tgt: List[int]          # subwords, no specials


def encode_pairs(tok: Tokenizer, pairs: Sequence[Pair], eos_id: int, max_len: int,
                 counts: SkipCounts) -> Tuple[List[Example], List[Pair]]:
    """Tokenize -> (examples, the pairs kept). A pair whose source or target, EOS included, has more
    than max_len tokens is skipped and counted in `counts`."""
    examples, kept = [], []
    srcs = tok.encode_batch([p[0] for p in pairs])
    tgts = tok.encode_batch([p[1] for p in pairs])
    for pair, s, t in zip(pairs, srcs, tgts):
        src = s.ids + [eos_id]
        if len(src) > max_len or len(t.ids) + 1 > max_len:
            counts.skipped[TOO_LONG] += 1
            continue
        examples.append(Example(src, list(t.ids)))
        kept.append(pair)
    return examples, kept


# --- batching -------------------------------------------------------------------------------
MAXI_BATCH = 0     # batches' worth of shuffled examples sorted together; 0: the whole epoch (docs/TRAINING.md)


def make_batches(examples: Sequence[Example], max_tokens: int, seed: int, epoch: int,
                 maxi_batch: int = MAXI_BATCH) -> List[List[int]]:
    """Indices of `examples` grouped into batches of <= max_tokens padded tokens, in the order of `epoch`.

    A batch's size in tokens is n_examples * max(longest source, longest target + 1). The epoch's
    examples are shuffled and, with `maxi_batch` N > 0 (Marian's option), cut into pools of about N
    batches' worth of tokens; each pool (with 0, fairseq's default: the whole epoch) is sorted by length
    (source, then target) and cut into batches, and all batches are shuffled. The whole epoch packs
    tightest, but puts every copy of a short, repeated pair ("two" -> "zwei") into the same one or two
    batches of the epoch: the model then sees it on one step in a thousand and forgets it in between.
    """
    shuffled = np.random.default_rng([seed, 0, epoch]).permutation(len(examples))
    src_len = np.array([len(e.src) for e in examples], dtype=np.int64)
    tgt_len = np.array([len(e.tgt) + 1 for e in examples], dtype=np.int64)
    width = np.maximum(src_len, tgt_len)
    if maxi_batch > 0:
        pool_of = np.cumsum(width[shuffled]) // (maxi_batch * max_tokens)
    else:
        pool_of = np.zeros(len(examples), dtype=np.int64)
    # lexsort's last key sorts first; it is stable, so equal lengths keep the shuffled order
    by_length = np.lexsort((tgt_len[shuffled], src_len[shuffled], pool_of))
    order, pools = shuffled[by_length], pool_of[by_length]
    batches, cur, cur_width, cur_pool = [], [], 0, -1
    for i, pool in zip(order.tolist(), pools.tolist()):
        own = int(width[i])
        if cur and (pool != cur_pool or max(cur_width, own) * (len(cur) + 1) > max_tokens):
            batches.append(cur)
            cur, cur_width = [], 0
        cur.append(i)
        cur_width, cur_pool = max(cur_width, own), pool
    if cur:
        batches.append(cur)
    perm = np.random.default_rng([seed, 1, epoch]).permutation(len(batches))
    return [batches[j] for j in perm.tolist()]


@dataclass
class Batch:
    src_ids: torch.Tensor     # [B, S] int64, right-padded
    src_mask: torch.Tensor    # [B, S] int64, 1 = token
    tgt_in: torch.Tensor      # [B, T] int64: BOS + target, padded
    labels: torch.Tensor      # [B, T] int64: target + EOS, padded with pad_id
    n_tokens: int             # non-pad labels

    def to(self, device) -> "Batch":
        return Batch(self.src_ids.to(device), self.src_mask.to(device), self.tgt_in.to(device),
                     self.labels.to(device), self.n_tokens)


def collate(examples: Sequence[Example], pad_id: int, bos_id: int, eos_id: int) -> Batch:
    b = len(examples)
    s = max(len(e.src) for e in examples)
    t = max(len(e.tgt) for e in examples) + 1
    src = torch.full((b, s), pad_id, dtype=torch.long)
    mask = torch.zeros((b, s), dtype=torch.long)
    tgt_in = torch.full((b, t), pad_id, dtype=torch.long)
    labels = torch.full((b, t), pad_id, dtype=torch.long)
    for i, e in enumerate(examples):
        src[i, :len(e.src)] = torch.tensor(e.src)
        mask[i, :len(e.src)] = 1
        dec_in, lab = decoder_io(e.tgt, bos_id, eos_id)
        tgt_in[i, :len(dec_in)] = torch.tensor(dec_in)
        labels[i, :len(lab)] = torch.tensor(lab)
    return Batch(src, mask, tgt_in, labels, int(sum(len(e.tgt) + 1 for e in examples)))


class BatchStream:
    """Endless stream of training batches for one rank, resumable from (epoch, index).

    With `world_size` ranks, every epoch's batch list is cycled up to a multiple of world_size
    and rank r takes batches r, r + world, ...: all ranks run the same number of steps.
    """

    def __init__(self, examples: Sequence[Example], max_tokens: int, seed: int, ids: Dict[str, int],
                 rank: int = 0, world_size: int = 1, maxi_batch: int = MAXI_BATCH):
        self.examples, self.max_tokens, self.seed, self.ids = examples, max_tokens, seed, ids
        self.maxi_batch = maxi_batch
        self.rank, self.world_size = rank, world_size
        self.epoch, self.index = 1, 0          # next batch to yield: index-th of this rank in `epoch`
        self._epoch_batches: Optional[List[List[int]]] = None

    def _batches(self) -> List[List[int]]:
        if self._epoch_batches is None:
            batches = make_batches(self.examples, self.max_tokens, self.seed, self.epoch, self.maxi_batch)
            total = -(-len(batches) // self.world_size) * self.world_size
            batches = [batches[i % len(batches)] for i in range(total)]
            self._epoch_batches = batches[self.rank::self.world_size]
        return self._epoch_batches

    def next(self) -> Batch:
        batches = self._batches()
        if self.index >= len(batches):
            self.epoch, self.index, self._epoch_batches = self.epoch + 1, 0, None
            batches = self._batches()
        idx = batches[self.index]
        self.index += 1
        return collate([self.examples[i] for i in idx], self.ids["pad_id"], self.ids["bos_id"], self.ids["eos_id"])

    def state_dict(self) -> Dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        self.epoch, self.index, self._epoch_batches = int(state["epoch"]), int(state["index"]), None
