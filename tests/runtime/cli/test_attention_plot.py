"""`seq2onnx translate --plot-attention DIR` (runtime/cli/attention_plot.py) with the shipped model numbers-en-de:
every text of a picture lies inside it (a long gettext line, a short number, a line of hundreds of words), input
text is drawn literally, DIR is checked before any work and written atomically, nothing of matplotlib's reaches
stderr raw, and a SIGTERM while a picture is drawn ends the run as SIGTERM does (exit 143, one line)."""
from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest

from tests import REPO
from tests.figure_checks import assert_text_inside
from seq2onnx.runtime import Translator
from seq2onnx.runtime.cli.attention_plot import (DPI, ELLIPSIS, MAX_HEATMAP_INCHES, MAX_LABEL_CHARS, TITLE_LINES,
                                             attention_figure, label, signals_held, write_png)
from seq2onnx.runtime.cli.main import main, terminate_raises
from seq2onnx.runtime.errors import Terminated

pytest.importorskip("matplotlib")      # the [plot] extra; the test extra installs it

MODEL = REPO / "models" / "numbers-en-de"
EXE = Path(sys.executable).parent / "seq2onnx"
# a message of coreutils' German catalog (/usr/share/locale/de/LC_MESSAGES/coreutils.mo), as `seq2onnx data
# gettext` pairs them: long words, an option, parentheses
GETTEXT = ("the --compare (-C) option is ignored when you specify a mode with non-permission bits",
           "die Option --compare (-C) wird ignoriert, wenn der Modus mit ungenügenden Rechten angegeben wird")
NUMBER = "three hundred forty-two"
NO_GLYPH = "\U0010fffd"                 # plane-16 private use: in no font matplotlib ships or finds
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def shipped() -> Translator:
    return Translator(str(MODEL), device="cpu")


def png_size(path: Path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    return struct.unpack(">II", data[16:24])                       # the IHDR chunk: width, height


def model_figure(tr: Translator, text: str):
    """The picture of the shipped model's best translation of `text`, as the CLI draws it."""
    r = tr.translate_batch([text], return_attention=True)[0]
    source = tr.source_ids(text)[:-1]
    rows = np.array(r.attention[0], dtype=np.float64).reshape(len(r.token_ids[0]), len(source) + 1)
    return attention_figure(rows, tr.pieces(source), tr.pieces(r.token_ids[0]), text, r.hypotheses[0])


def words_figure(source: str, target: str):
    """The picture of `target` attending to `source` word by word (a piece per word, SentencePiece's "▁"), each
    target word on one source word in turn: the figures in the cells show."""
    s, t = ["\u2581" + w for w in source.split()], ["\u2581" + w for w in target.split()]
    attention = np.zeros((len(t), len(s) + 1))
    attention[np.arange(len(t)), np.arange(len(t)) % (len(s) + 1)] = 1.0
    return attention_figure(attention, s, t, source, target)


def check_saved(fig, path: Path) -> None:
    """Every text inside the figure as a draw at DPI lays it out, and the saved PNG is that figure, whole."""
    assert_text_inside(fig)
    write_png(fig, path)
    saved, drawn = png_size(path), fig.get_size_inches() * DPI
    assert all(0 <= d - s < 1 for s, d in zip(saved, drawn)), (saved, drawn)    # Agg keeps whole pixels


@pytest.mark.parametrize("text", [GETTEXT[0], NUMBER])
def test_model_pictures_keep_every_text_inside(shipped, text, tmp_path):
    check_saved(model_figure(shipped, text), tmp_path / "p.png")


def test_gettext_pair_picture_keeps_every_text_inside(tmp_path):
    check_saved(words_figure(*GETTEXT), tmp_path / "p.png")


def test_a_very_long_line_gives_a_bounded_picture_with_every_text_inside(tmp_path):
    """200 source words by 150 translation words: smaller cells and every k-th label, within the bound; a word
    of 300 characters is cut to MAX_LABEL_CHARS and the title to TITLE_LINES lines a side."""
    long_word = "x" * 300
    source = " ".join(f"w{i}" for i in range(199)) + " " + long_word
    target = " ".join(f"z{i}" for i in range(150))
    fig = words_figure(source, target)
    check_saved(fig, tmp_path / "p.png")
    width, height = png_size(tmp_path / "p.png")
    assert max(width, height) <= 2 * MAX_HEATMAP_INCHES * DPI
    assert label(long_word) == "x" * (MAX_LABEL_CHARS - 1) + ELLIPSIS
    assert len(fig._suptitle.get_text().splitlines()) <= 2 * TITLE_LINES


def test_text_from_the_input_is_drawn_literally(tmp_path):
    """mathtext would raise on `$x^^$` (and draw \\frac as a fraction); the picture shows the characters."""
    fig = words_figure("$x^^$ and \\frac{a}{b} $", "$x^^$ \\alpha")
    check_saved(fig, tmp_path / "p.png")
    drawn = {t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))}
    assert {"$x^^$", "\\frac{a}{b}", "\\alpha"} <= drawn


def translate(args, lines, cwd, env=None, timeout=180):
    return subprocess.run([str(EXE), "translate", str(MODEL), "--device", "cpu", *args],
                          input="".join(line + "\n" for line in lines), capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_hostile_plot_folder_and_text(shipped, tmp_path):
    """In DIR: line-1.png a symlink to a file outside (replaced, the file untouched), line-2.png a folder (that
    picture skipped with one warning line naming it), line-3.png a FIFO (replaced, never opened: opening it
    would block). The lines: mathtext, a number, a character no font has, a blank one. A user's matplotlibrc asks
    for TeX, mathtext and a GUI backend, and its config folder has no font cache yet: nothing of it shows."""
    plots, outside = tmp_path / "plots", tmp_path / "outside.txt"
    plots.mkdir()
    outside.write_text("keep me")
    (plots / "line-1.png").symlink_to(outside)
    (plots / "line-2.png").mkdir()
    os.mkfifo(plots / "line-3.png")
    config = tmp_path / "mplconfig"
    config.mkdir()
    (config / "matplotlibrc").write_text("text.usetex: True\ntext.parse_math: True\nbackend: TkAgg\n")
    lines = ["$x^^$ \\frac{a}{b}", NUMBER, f"one {NO_GLYPH} two", ""]
    proc = translate(["--plot-attention", "plots"], lines, tmp_path, env=dict(os.environ, MPLCONFIGDIR=str(config)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [r.hypotheses[0] for r in shipped.translate_batch(lines)]
    err = proc.stderr.splitlines()
    assert [e for e in err if "--plot-attention" in e] == [
        "seq2onnx translate: warning: line 2: --plot-attention: cannot write plots/line-2.png (Is a directory): "
        "the picture is skipped; remove that folder",
        "seq2onnx translate: warning: line 3: --plot-attention: 1 character(s) show as boxes: matplotlib's font "
        "has no glyph for them"]
    assert all(e.startswith("seq2onnx translate: warning: line ") for e in err), err   # ours, one line each
    assert outside.read_text() == "keep me"
    assert sorted(p.name for p in plots.iterdir()) == ["line-1.png", "line-2.png", "line-3.png", "line-4.png"]
    for n in (1, 3, 4):
        path = plots / f"line-{n}.png"
        assert not path.is_symlink() and path.is_file() and path.read_bytes()[:8] == PNG_MAGIC
    assert (plots / "line-2.png").is_dir()


def test_the_folder_is_checked_first_and_made_only_when_the_run_proceeds(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("x")
    cases = [([str(MODEL), "--plot-attention", ""], "--plot-attention needs a folder name, got an empty one"),
             ([str(MODEL), "--plot-attention", "a-file"], "--plot-attention a-file: that is a file, not a folder"),
             ([str(MODEL), "--plot-attention", "a-file/sub"], "cannot make that folder"),
             ([str(tmp_path / "no-model"), "--plot-attention", "new/deeper"], "no-model does not exist"),
             ([str(MODEL), "--plot-attention", "new", "--max-input-length", "100000"], "--max-input-length")]
    for args, message in cases:
        monkeypatch.setattr(sys, "stdin", open(os.devnull))
        assert main(["translate", *args, "--device", "cpu"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.splitlines()) == 1 and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_a_signal_inside_a_weakref_callback_is_held_not_swallowed():
    """What matplotlib's weakref callbacks did to a SIGTERM, made certain: the signal arrives inside a callback,
    whose exceptions Python prints and ignores. Held, it is delivered once the block ends, in the caller's code."""
    class Node:
        pass

    node = Node()
    ref = weakref.ref(node, lambda _: os.kill(os.getpid(), signal.SIGTERM))
    ran_on = False
    with terminate_raises(), pytest.raises(Terminated, match="SIGTERM"):
        with signals_held():
            del node                                   # the callback runs here, and the signal arrives in it
            ran_on = True
    assert ran_on and ref() is None


def test_sigterm_while_plotting_ends_the_run_as_sigterm_does(tmp_path):
    """matplotlib runs Python code in weakref callbacks, where an exception raised by a signal handler is printed
    and swallowed (the run then went on). Signals are held while a picture is drawn: each SIGTERM, at any moment
    of the plotting, ends the run with 143 and one line, and leaves no temporary file in DIR."""
    src = tmp_path / "in.txt"
    src.write_text("".join(f"one hundred and {m}\n" for m in range(60)))
    for i, delay in enumerate([0.0, 0.04, 0.11, 0.23, 0.4]):
        plots = tmp_path / f"plots{i}"
        proc = subprocess.Popen([str(EXE), "translate", str(MODEL), "--device", "cpu", "-i", str(src),
                                 "--plot-attention", str(plots), "--max-batch-size", "8"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        deadline = time.monotonic() + 120
        while not (plots / "line-1.png").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert err == "seq2onnx translate: terminated (SIGTERM)\n", err
        assert all(p.name.startswith("line-") and p.suffix == ".png" for p in plots.iterdir())
