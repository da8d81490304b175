"""`seq2onnx translate --plot-attention DIR`: one PNG heatmap per input line, source words across, target words
down (matplotlib: the optional extra `[plot]`: `pip install ".[plot]"` in the checkout).

A word's row is the mean of its pieces' rows and its column the sum of its pieces' columns, so every row
still sums to 1 over the source words and the source's end-of-sentence token (the last column: attention a
step paid to no word).

The picture is drawn with matplotlib's object API (`Figure` + the Agg canvas, no pyplot: no global figure
registry, no GUI backend). What comes from the input or the model is drawn literally (no mathtext: `$x^^$` is
text), shortened where it would not fit (a label to MAX_LABEL_CHARS characters, the title to TITLE_LINES
lines a side), and the figure is sized from the measured extents of its texts, so none is cut. The heatmap
is at most MAX_HEATMAP_INCHES a side whatever the input: a longer line gets smaller cells and every k-th label.
Each PNG is written to a temporary file in DIR and renamed over DIR/line-N.png (a symlink there is replaced,
never written through; a FIFO never opened); a picture that cannot be written is skipped with a warning.
Signals that arrive while a picture is drawn are held until it is written (matplotlib runs Python code in
weakref callbacks, where an exception raised by a signal handler would be printed and ignored).
"""
from __future__ import annotations

import logging
import math
import os
import re
import signal
import tempfile
import textwrap
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..decode.alignment import WORD_START, word_index
from ..errors import Seq2OnnxError, printable

if TYPE_CHECKING:                                   # matplotlib is imported where a picture is drawn
    from matplotlib.figure import Figure
    from matplotlib.transforms import Bbox
    from matplotlib.typing import RcKeyType

    from ..results import TranslationResult
    from ..translator import Translator

EOS_LABEL = "</s>"
DPI = 110
CELL_INCHES = 0.45                  # a heatmap cell, when the heatmap fits MAX_HEATMAP_INCHES
MAX_HEATMAP_INCHES = 24.0           # the heatmap's side at most: the PNG's size is bounded whatever the input
MIN_HEATMAP_INCHES = 1.6            # the heatmap's side at least (the colour bar beside it has its length)
VALUE_MIN_CELL_INCHES = 0.3         # cells smaller than this show no figures
LABEL_POINTS = 8                    # tick labels
LABEL_PITCH = 1.4                   # a tick label needs this many times its font size between ticks
MAX_LABEL_CHARS = 30                # a longer word label is cut, ending in an ellipsis
TITLE_POINTS = 9
TITLE_LINES = 3                     # lines of the title for the source, and as many for the translation
TITLE_CHARS = 2000                  # characters of a side wrapped at most (more cannot show in TITLE_LINES)
MARGIN_INCHES = 0.15                # kept free around everything the figure draws
ELLIPSIS = "\u2026"
HELD_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")
_GLYPH = re.compile(r"^Glyph \d+ .*missing from (current )?font")
# rcParams: input text is text, never TeX
LITERAL_TEXT: Dict[RcKeyType, Any] = {"text.parse_math": False, "text.usetex": False}


def require_matplotlib() -> None:
    """Fail before any work when the optional extra is missing."""
    try:
        _quiet_matplotlib_log()
        import matplotlib  # noqa: F401
    except ImportError:
        raise Seq2OnnxError('--plot-attention needs matplotlib, which the runtime does not install: '
                            'pip install matplotlib (or, in the seq2onnx checkout, pip install ".[plot]")') from None


def _quiet_matplotlib_log() -> None:
    """matplotlib logs its own notices (building the font cache, a font not found, a temporary config folder)
    to stderr through `logging`; they are not ours to show."""
    logging.getLogger("matplotlib").setLevel(logging.ERROR)


# --- DIR -------------------------------------------------------------------------------------------
def check_folder(path: str) -> Path:
    """--plot-attention DIR, checked before any work: matplotlib importable and DIR a folder that exists and
    is writable, or one that can be made (its nearest existing ancestor a writable folder). Nothing is
    created here: make_folder does it once the run is sure to proceed."""
    require_matplotlib()
    if not path:
        raise Seq2OnnxError("--plot-attention needs a folder name, got an empty one: pass e.g. --plot-attention plots")
    folder = Path(path)
    if folder.exists():
        if not folder.is_dir():
            raise Seq2OnnxError(f"--plot-attention {path}: that is a file, not a folder: pass a folder (made if missing)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise Seq2OnnxError(f"--plot-attention {path}: the folder is not writable: pass a folder you can write to")
        return folder
    ancestor = folder.absolute().parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise Seq2OnnxError(f"--plot-attention {path}: cannot make that folder ({ancestor} is not a folder): pass a "
                            f"folder you can write to")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise Seq2OnnxError(f"--plot-attention {path}: cannot make that folder ({ancestor} is not writable): pass a "
                            f"folder you can write to")
    return folder


def make_folder(folder: Path) -> None:
    """Make DIR (and its missing parents) once the model is loaded and the run proceeds."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Seq2OnnxError(f"--plot-attention {folder}: cannot make that folder ({e.strerror or e}): pass a folder "
                            f"you can write to") from None
    if not folder.is_dir():
        raise Seq2OnnxError(f"--plot-attention {folder}: that is not a folder: pass a folder (made if missing)")


# --- the word matrix -----------------------------------------------------------------------------------
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


# --- the figure ------------------------------------------------------------------------------------------
def label(text: str) -> str:
    """A word as a tick label: control characters as \\xNN, at most MAX_LABEL_CHARS characters."""
    text = printable(text)
    return text if len(text) <= MAX_LABEL_CHARS else text[:MAX_LABEL_CHARS - 1] + ELLIPSIS


def _axis(count: int) -> Tuple[float, int]:
    """-> (inches per cell, label every k-th cell) for `count` cells along one side of the heatmap."""
    cell = min(CELL_INCHES, MAX_HEATMAP_INCHES / max(count, 1))
    return cell, max(1, math.ceil(LABEL_PITCH * LABEL_POINTS / 72 / cell))


def _inches(box: Bbox) -> Tuple[float, float]:
    return box.width / DPI, box.height / DPI


def _title(source: str, translation: str, width_inches: float, measure: Callable[[str], float]) -> str:
    """"source: ..." and "translation: ..." wrapped to `width_inches` as `measure(text)` (inches) draws them,
    TITLE_LINES lines each at most, the rest elided."""
    sides = [f"{side}: {printable(text[:TITLE_CHARS]) if text.strip() else '(blank)'}"
             for side, text in (("source", source), ("translation", translation))]
    chars = max(8, int(width_inches * 72 / (0.5 * TITLE_POINTS)))
    while True:
        text = "\n".join(textwrap.fill(s, chars, max_lines=TITLE_LINES, placeholder=" " + ELLIPSIS,
                                       break_on_hyphens=False) for s in sides)
        if chars <= 8 or measure(text) <= width_inches:
            return text
        chars = max(8, chars - max(1, chars // 10))


def attention_figure(attention: np.ndarray, source_pieces: Sequence[str], target_pieces: Sequence[str],
                     source: str = "", translation: str = "") -> Figure:
    """The heatmap of a hypothesis's word-level cross-attention (word_matrix) as a matplotlib Figure on an Agg
    canvas, sized so that every text lies inside it (as drawn at DPI, which is what write_png saves)."""
    import matplotlib

    with matplotlib.rc_context(LITERAL_TEXT):
        return _figure(attention, source_pieces, target_pieces, source, translation)


def _figure(attention: np.ndarray, source_pieces: Sequence[str], target_pieces: Sequence[str], source: str,
            translation: str) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from matplotlib.text import Text

    matrix, across, down = word_matrix(np.asarray(attention, dtype=np.float64), source_pieces, target_pieces)
    cell_x, step_x = _axis(len(across))
    cell_y, step_y = _axis(len(down))
    heat_w = max(MIN_HEATMAP_INCHES, cell_x * len(across))
    heat_h = max(MIN_HEATMAP_INCHES, cell_y * max(1, len(down)))

    fig = Figure(figsize=(heat_w, heat_h), dpi=DPI,
                 layout=ConstrainedLayoutEngine(w_pad=MARGIN_INCHES, h_pad=MARGIN_INCHES))
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(matrix if len(down) else np.zeros((1, len(across))), cmap="Blues", vmin=0.0, vmax=1.0,
                      aspect="auto", interpolation="nearest")
    xs, ys = range(0, len(across), step_x), range(0, len(down), step_y)
    ax.set_xticks(xs, [label(across[i]) for i in xs], rotation=45, ha="right", rotation_mode="anchor",
                  fontsize=LABEL_POINTS)
    ax.set_yticks(ys, [label(down[i]) for i in ys], fontsize=LABEL_POINTS)
    ax.set_xlabel("source words", fontsize=LABEL_POINTS + 1)
    ax.set_ylabel("translation words", fontsize=LABEL_POINTS + 1)
    if min(cell_x, cell_y) >= VALUE_MIN_CELL_INCHES:
        for (i, j), value in np.ndenumerate(matrix):
            if value >= 0.1:
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value > 0.6 else "black")
    bar = fig.colorbar(image, ax=ax, pad=0.02, aspect=max(10.0, 12 * heat_h / MIN_HEATMAP_INCHES))
    bar.set_label("attention weight\n(last layer, mean of heads)", fontsize=LABEL_POINTS)
    bar.ax.tick_params(labelsize=LABEL_POINTS)
    title = fig.suptitle("", x=0.0, ha="left", fontsize=TITLE_POINTS)
    ax.get_xticklabels(), ax.get_yticklabels(), bar.ax.get_yticklabels()    # the ticks made now, not at a draw
    for artist in fig.findobj():                     # and each text drawn literally, whatever rcParams say
        if isinstance(artist, Text):                 # when it is drawn
            artist.set_parse_math(False)

    # the figure's size: the heatmap plus what the measured texts around it need
    renderer = canvas.get_renderer()
    extent = lambda texts: [t.get_window_extent(renderer) for t in texts if t.get_text()]  # noqa: E731
    xlabels, ylabels = extent(ax.get_xticklabels()), extent(ax.get_yticklabels())
    below = max((_inches(b)[1] for b in xlabels), default=0.0) + _inches(ax.xaxis.label.get_window_extent(renderer))[1]
    left = max([_inches(b)[0] for b in ylabels] + [_inches(xlabels[0])[0] if xlabels else 0.0]) \
        + _inches(ax.yaxis.label.get_window_extent(renderer))[0]
    bar_label = _inches(bar.ax.yaxis.label.get_window_extent(renderer))
    heat_h = max(heat_h, bar_label[1] + 0.2)
    right = 0.4 + max((_inches(t.get_window_extent(renderer))[0] for t in bar.ax.get_yticklabels()),
                                   default=0.3) + bar_label[0] + 0.3
    width = left + heat_w + right + 4 * MARGIN_INCHES

    def measure(text: str) -> float:
        title.set_text(text)
        return _inches(title.get_window_extent(renderer))[0]

    title.set_text(_title(source, translation, width - 4 * MARGIN_INCHES, measure))
    height = below + heat_h + _inches(title.get_window_extent(renderer))[1] + 4 * MARGIN_INCHES
    fig.set_size_inches(width, height)
    title.set_x(2 * MARGIN_INCHES / width)
    return fig


# --- writing ---------------------------------------------------------------------------------------------
@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP that arrive inside are held and delivered again, to the handlers of the
    caller, once it ends: in the caller's code, where no library callback can swallow what they raise.
    Outside the main thread it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: List[int] = []
    signums = [getattr(signal, name) for name in HELD_SIGNALS if hasattr(signal, name)]
    previous = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in signums}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
        if held:
            signal.raise_signal(held[0])


def write_png(fig: Figure, path: Path) -> None:
    """Save `fig` to `path` atomically: a temporary file in its folder, renamed over `path` (which replaces a
    symlink or a FIFO there instead of writing through it); the temporary file goes on any error."""
    import matplotlib

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            with matplotlib.rc_context(LITERAL_TEXT):
                fig.savefig(f, format="png", dpi=DPI)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def plot_attention(path: Path, attention: np.ndarray, source_pieces: Sequence[str], target_pieces: Sequence[str],
                   source: str = "", translation: str = "") -> List[str]:
    """Write one heatmap PNG of a hypothesis's word-level cross-attention to `path`. -> matplotlib's warnings
    about it (e.g. characters its font has no glyph for), as messages, instead of printing them."""
    _quiet_matplotlib_log()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_png(attention_figure(attention, source_pieces, target_pieces, source, translation), path)
    glyphs = len({str(w.message) for w in caught if _GLYPH.match(str(w.message))})
    messages = list(dict.fromkeys(str(w.message) for w in caught if not _GLYPH.match(str(w.message))))
    if glyphs:
        messages.insert(0, f"{glyphs} character(s) show as boxes: matplotlib's font has no glyph for them")
    return messages


def plot_block(tr: Translator, block: Sequence[Tuple[int, str]], results: Sequence[TranslationResult], folder: Path,
               max_input_length: Optional[int], warn: Callable[[str], None]) -> None:
    """DIR/line-N.png for each line of a translated block: the best translation's attention. A picture that
    cannot be written (a folder in its place, a full disk) is skipped with a warning: the translations are
    already out."""
    from ..text_input import is_blank
    for (n, text), r in zip(block, results):
        path = folder / f"line-{n}.png"
        source = [] if is_blank(text) else tr.source_ids(text, max_input_length)[:-1]
        assert r.attention is not None                  # translated with return_attention (commands.py)
        rows = np.array(r.attention[0], dtype=np.float64).reshape(len(r.token_ids[0]), len(source) + 1)
        with signals_held():
            try:
                messages = plot_attention(path, rows, tr.pieces(source, source=True), tr.pieces(r.token_ids[0]), text,
                                          r.hypotheses[0])
            except OSError as e:
                messages = [f"cannot write {path} ({e.strerror or e}): the picture is skipped"
                            + ("; remove that folder" if path.is_dir() and not path.is_symlink() else "")]
        for message in messages:
            warn(f"line {n}: --plot-attention: {message}")
