"""Word alignments from cross-attention (translate_batch(return_alignment=True), `seq2onnx translate --alignment`).

The attention a hypothesis carries (decoding.py, return_attention) has one row per target token and one column
per source token (the source's EOS included): the cross-attention weights of the last decoder layer, averaged
over its heads, at the step that chose the token. Why that layer and the mean: fairseq's `--print-alignment`
and CTranslate2's `return_attention` read the last decoder layer as well (fairseq averages the heads; without
guided-alignment training no single head is singled out), and a mean of probability rows is still one.

Hard alignment (fairseq's `--print-alignment hard`): each target piece is aligned to the source piece it
attends to most, the source's EOS excluded; pieces are then grouped into words, a word starting at each piece
whose text begins with the tokenizer's word-start marker ("▁" for Metaspace, as seq2onnx's tokenizers use,
"Ġ" for byte-level BPE), and the (source word, target word) pairs are kept once each, sorted: the
`0-0 1-2 ...` lines of Marian and fairseq.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

WORD_START = ("\u2581", "\u0120")      # SentencePiece / Metaspace "▁", byte-level BPE "Ġ"


def word_index(pieces: Sequence[str]) -> List[int]:
    """The word each piece belongs to: a new word at each piece that starts with a word-start marker (the first
    piece is word 0 whatever it starts with)."""
    out, word = [], -1
    for i, piece in enumerate(pieces):
        if i == 0 or piece.startswith(WORD_START):
            word += 1
        out.append(word)
    return out


def hard_alignment(attention: np.ndarray, source_pieces: Sequence[str], target_pieces: Sequence[str]
                   ) -> List[Tuple[int, int]]:
    """attention [target pieces, source pieces + EOS] -> sorted unique (source word, target word) pairs."""
    attention = np.asarray(attention, dtype=np.float32)
    n_src = len(source_pieces)
    if n_src == 0 or len(target_pieces) == 0:
        return []
    if attention.shape != (len(target_pieces), n_src + 1):
        raise ValueError(f"attention of shape {attention.shape} does not fit {len(target_pieces)} target and "
                         f"{n_src} source pieces (+ the source EOS column)")
    best = attention[:, :n_src].argmax(axis=1)                       # the source piece each target piece reads
    src_words, tgt_words = word_index(source_pieces), word_index(target_pieces)
    return sorted({(src_words[s], tgt_words[t]) for t, s in enumerate(best.tolist())})


def format_alignment(pairs: Sequence[Tuple[int, int]]) -> str:
    """[(0, 0), (1, 2)] -> "0-0 1-2" (source-target, Marian's and fairseq's format)."""
    return " ".join(f"{s}-{t}" for s, t in pairs)
