"""`seq2onnx translate --plot-attention DIR`: one PNG heatmap per input line, source words across, target words
down (matplotlib: the optional extra `pip install "seq2onnx[plot]"`).

A word's row is the mean of its pieces' rows and its column the sum of its pieces' columns, so every row
still sums to 1 over the source words and the source's end-of-sentence token (the last column: attention a
step paid to no word).
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np

from .alignment import WORD_START, word_index
from .errors import Seq2OnnxError

EOS_LABEL = "</s>"


def require_matplotlib() -> None:
    """Fail before any work when the optional extra is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise Seq2OnnxError('--plot-attention needs matplotlib, which the runtime does not install: '
                            'pip install "seq2onnx[plot]"') from None


def words(pieces: Sequence[str]) -> Tuple[List[str], List[int]]:
    """Pieces -> (word texts, the word of each piece), words starting where alignment.word_index says."""
    index = word_index(pieces)
    texts = [""] * (index[-1] + 1 if index else 0)
    for piece, w in zip(pieces, index):
        texts[w] += piece.lstrip("".join(WORD_START)) if piece.startswith(WORD_START) else piece
    return texts, index


def word_matrix(attention: np.ndarray, source_pieces: Sequence[str], target_pieces: Sequence[str]
                ) -> Tuple[np.ndarray, List[str], List[str]]:
    """attention [target pieces, source pieces + EOS] -> ([target words, source words + EOS], labels across, down)."""
    src_words, src_index = words(source_pieces)
    tgt_words, tgt_index = words(target_pieces)
    cols = np.zeros((len(target_pieces), len(src_words) + 1), dtype=np.float64)
    for j, w in enumerate(src_index):
        cols[:, w] += attention[:, j]
    cols[:, -1] = attention[:, len(source_pieces)]
    rows = np.zeros((len(tgt_words), cols.shape[1]))
    counts = np.bincount(tgt_index, minlength=len(tgt_words))
    np.add.at(rows, tgt_index, cols)
    return rows / np.maximum(counts, 1)[:, None], src_words + [EOS_LABEL], tgt_words


def plot_attention(path: Path, attention: np.ndarray, source_pieces: Sequence[str], target_pieces: Sequence[str],
                   title: str = "") -> None:
    """Write one heatmap PNG of a hypothesis's word-level cross-attention (word_matrix) to `path`."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix, across, down = word_matrix(np.asarray(attention, dtype=np.float64), source_pieces, target_pieces)
    width = min(24.0, 2.0 + 0.55 * len(across))
    height = min(24.0, 1.8 + 0.4 * max(1, len(down)))
    fig, ax = plt.subplots(figsize=(width, height))
    image = ax.imshow(matrix if len(down) else np.zeros((1, len(across))), cmap="Blues", vmin=0.0, vmax=1.0,
                      aspect="auto")
    ax.set_xticks(range(len(across)), across, rotation=45, ha="right", rotation_mode="anchor")
    ax.set_yticks(range(len(down)), down)
    ax.set_xlabel("source")
    ax.set_ylabel("translation")
    for (i, j), value in np.ndenumerate(matrix):
        if value >= 0.1:
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if value > 0.6 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention (last layer, mean of heads)")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
