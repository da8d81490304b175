"""`seq2onnx translate` and `seq2onnx info` on the exported tiny model: line order, output
formats, awkward input lines, one-line errors, never a traceback."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from tests import DATA
from tests.agreement import Float32Bounds
from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.translator import Translator


PRINTED = 5e-7 * (1 + 1e-9)      # the CLI prints scores with 6 decimals: within half the last digit


@pytest.fixture(scope="module")
def translator(tiny_package):
    return Translator(tiny_package, device="cpu")


@pytest.fixture(scope="module")
def sources():
    return [s for s, _ in toy_pairs(11, seed=2)]


def run_cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def test_translate_file_in_order(tiny_package, tmp_path, capsys, translator, sources):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    rc, stdout, _ = run_cli(["translate", str(tiny_package), "--input", str(src), "--output", str(out),
                             "--max-batch-size", "3", "--device", "cpu"], capsys)
    assert rc == 0 and stdout == ""
    # the CLI batches as translate_batch does (max_batch_size 3, the same thread defaults): the same arithmetic, so
    # the same text (translating one by one would run other batch shapes, other kernel paths)
    assert out.read_text(encoding="utf-8").splitlines() == [r.hypotheses[0] for r in translator.translate_batch(
        sources, max_batch_size=3)]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


def test_nbest_and_scores_format(tiny_package, tmp_path, capsys, translator, sources):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sources[:4]) + "\n", encoding="utf-8")
    rc, out, _ = run_cli(["translate", str(tiny_package), "-i", str(src), "--n-best", "2", "--scores",
                          "--beam-size", "4", "--device", "cpu"], capsys)   # the same device as `translator`
    assert rc == 0
    rows = [line.split("\t") for line in out.splitlines()]
    assert [int(r[0]) for r in rows] == [1, 1, 2, 2, 3, 3, 4, 4]
    expected = translator.translate_batch(sources[:4], beam_size=4, num_hypotheses=2, return_scores=True)
    for i, r in enumerate(expected):
        got = rows[2 * i: 2 * i + 2]
        assert [g[2] for g in got] == r.hypotheses
        # the same engine, inputs, batches and thread defaults: the same numbers, up to the printed 6 decimals
        assert [float(g[1]) for g in got] == pytest.approx(r.normalized_scores, abs=PRINTED)
        assert float(got[0][1]) >= float(got[1][1])
    rc, out, _ = run_cli(["translate", str(tiny_package), "-i", str(src), "--scores"], capsys)
    first = out.splitlines()[0].split("\t")
    assert len(out.splitlines()) == 4 and len(first) == 2 and first[1] == expected[0].hypotheses[0]


def test_awkward_lines_through_stdin(tiny_package, translator, sources):
    """invalid UTF-8 -> U+FFFD + warning; empty line -> empty output; over-long -> cut + warning."""
    long_line = " ".join(["seven"] * 40)
    data = (sources[0].encode() + b"\n" + b"one \xff\xfe two\n" + b"\n" + b"   \n" + long_line.encode()
            + b"\r\n" + sources[1].encode())                            # no newline at the end
    env = dict(os.environ, PYTHONIOENCODING="ascii")                   # output must not depend on the locale
    proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "translate", str(tiny_package),
                           "--max-input-length", "10", "--device", "cpu"], input=data,
                          capture_output=True, timeout=120, env=env)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    lines = proc.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 7
    assert lines[0] == translator.translate(sources[0])
    assert lines[1] == translator.translate("one \ufffd\ufffd two")
    assert lines[2] == "" and lines[3] == ""
    with pytest.warns(UserWarning, match="truncated"):
        assert lines[4] == translator.translate(long_line, max_input_length=10)
    assert lines[5] == translator.translate(sources[1])
    assert "line 2: invalid UTF-8 replaced with U+FFFD" in err
    assert "line 5: longer than 10 tokens, truncated" in err
    # U+FFFD is no character the toy tokenizer learned: line 2 is also marked as outside what the model knows
    assert "line 2: holds characters the model's tokenizer never saw in training" in err
    assert len(err.strip().splitlines()) == 3


@pytest.mark.parametrize("args, message", [
    (["--beam-size", "0"], "--beam-size must be an integer in [1, 256], got 0"),
    (["--n-best", "5", "--beam-size", "2"], "--n-best must be an integer in [1, 2]"),
    (["--sampling-topp", "2"], "--sampling-topp must be a number in [1e-06, 1], got 2.0"),
    (["--compute-type", "float16", "--device", "cpu"], "float16 runs on CUDA only"),
    (["--input", "/nonexistent/file.txt"], "no such file"),
    (["--max-input-length", "100000"], "--max-input-length must be in [1,"),
])
def test_translate_errors_are_one_line(tiny_package, capsys, args, message):
    rc, out, err = run_cli(["translate", str(tiny_package), *args], capsys)
    assert rc == 2
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_missing_model_dir_is_one_line(tmp_path, capsys):
    rc, _, err = run_cli(["translate", str(tmp_path / "nope")], capsys)
    assert rc == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(["info", str(tmp_path)], capsys)
    assert rc == 2 and "manifest.json is missing" in err


def test_an_output_that_is_the_input_is_refused_before_any_work(tmp_path, capsys):
    """--output naming the file being read (its path spelled otherwise, a symlink, a hard link; /dev/stdout or stdout
    redirected to it) would replace or grow the input with its translations: one line, exit 2, before the model
    folder is looked at (it does not exist here), the input intact and no temporary file left. Another file is not
    refused (the model folder is, then)."""
    src = tmp_path / "in.txt"
    src.write_text("one two\n")
    (tmp_path / "link.txt").symlink_to(src)
    os.link(src, tmp_path / "hard.txt")
    model = str(tmp_path / "no-model")
    for given, output in [(src, src), (src, tmp_path / "." / "in.txt"), (src, tmp_path / "link.txt"),
                          (src, tmp_path / "hard.txt"), (tmp_path / "link.txt", src)]:
        rc, _, err = run_cli(["translate", model, "-i", str(given), "-o", str(output)], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert f"--output {output} is the input file (--input {given})" in err, err
    for flags, said in [(["-i", str(src), "-o", "/dev/stdout"], f"--output /dev/stdout is the input file (--input "
                                                                   f"{src})"),
                        ([], "stdout is the input file (stdin)")]:
        with open(src, "rb") as stdin, open(src, "ab") as stdout:
            proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "translate", model, *flags],
                                  stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, timeout=120)
        err = proc.stderr.decode()
        assert proc.returncode == 2 and len(err.strip().splitlines()) == 1 and said in err, err
    assert src.read_text() == "one two\n"
    assert sorted(os.listdir(tmp_path)) == ["hard.txt", "in.txt", "link.txt"]
    rc, _, err = run_cli(["translate", model, "-i", str(src), "-o", str(tmp_path / "out.txt")], capsys)
    assert rc == 2 and "does not exist" in err and "is the input file" not in err, err


def test_info_text_and_json(tiny_package, capsys):
    rc, out, _ = run_cli(["info", str(tiny_package)], capsys)
    assert rc == 0
    assert "architecture" in out and "vocabulary" in out and "fp32" in out and "int8" in out and "parity" in out
    assert "decoder step   cross K/V once per sentence" in out
    earlier = DATA / "numbers-en-de-earlier-contract"   # exported before it
    rc, out, _ = run_cli(["info", str(earlier)], capsys)
    assert rc == 0 and "decoder step   cross K/V copied per row" in out
    rc, out, _ = run_cli(["info", str(tiny_package), "--json"], capsys)
    info = json.loads(out)
    manifest = json.loads((tiny_package / "manifest.json").read_text())
    assert info["vocab_size"] == manifest["config"]["vocab_size"]
    assert info["variants"]["fp32"]["bytes"]["encoder"] == (tiny_package / "encoder.onnx").stat().st_size
    assert info["variants"]["int8"]["parity"] == manifest["variants"]["int8"]["parity"]
    assert info["exporter"] == manifest["exporter"] and info["verified"] is True
    assert info["cross_per_sentence"] is True and info["variants"]["int8"]["status"] == "checked"


def test_a_translation_that_hits_the_length_limit_is_named_on_stderr(tiny_package, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("three one four\n\neight\n", encoding="utf-8")
    rc, out, err = run_cli(["translate", str(tiny_package), "-i", str(src), "--beam-size", "1",
                            "--min-decoding-length", "100"], capsys)          # EOS forbidden: a runaway, by construction
    assert rc == 0 and len(out.splitlines()) == 3
    assert [line.split(":")[2].strip() for line in err.splitlines()] == ["line 1", "line 3"]   # not the blank line 2
    assert "stopped at the length limit before it ended (22 tokens)" in err.splitlines()[0]   # 3 * (3 + 1) + 10
    rc, _, err = run_cli(["translate", str(tiny_package), "-i", str(src), "--beam-size", "1",
                          "--min-decoding-length", "120", "--max-decoding-length", "120", "--no-relative-length"], capsys)
    assert rc == 0 and "(120 tokens)" in err.splitlines()[0]


def test_score_prints_what_translate_scored(tiny_package, tmp_path, capsys, translator, sources):
    # a translation scored back gets the normalized score translate --scores printed for it
    best = translator.translate_batch(sources[:5], beam_size=1, return_scores=True)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("".join(f"{s}\t{r.hypotheses[0]}\n" for s, r in zip(sources, best)), encoding="utf-8")
    rc, out, err = run_cli(["score", str(tiny_package), "-i", str(pairs), "--device", "cpu",
                            "--max-batch-size", "2"], capsys)
    assert rc == 0 and err == ""
    # scored teacher-forced in batches of 2, decoded in one batch of 5: other kernel paths, so within agreement.py's
    # float32 bound on a score (normalized: over the length), plus the printed 6 decimals
    bounds = Float32Bounds.of_graph(tiny_package / "decoder_step.onnx")
    for x, r in zip(out.splitlines(), best):
        steps = len(r.token_ids[0]) + 1
        assert float(x) == pytest.approx(r.normalized_scores[0],
                                         abs=bounds.score(steps, r.scores[0]) / steps + PRINTED)
    # --tokens: the pieces and their log-probs, as score_batch gives them; --length-penalty 0: their sum
    rc, out, _ = run_cli(["score", str(tiny_package), "-i", str(pairs), "--device", "cpu", "--tokens",
                          "--length-penalty", "0"], capsys)
    expected = translator.score_batch(sources[:5], [r.hypotheses[0] for r in best])
    rows = [line.split("\t") for line in out.splitlines()]
    assert [r[1].split(" ") for r in rows] == [e.tokens for e in expected]
    for row, e in zip(rows, expected):
        # the same engine, inputs, batches and threads as score_batch: the same numbers up to the printed 6 decimals
        assert [float(x) for x in row[2].split(" ")] == pytest.approx(e.log_probs, abs=PRINTED)
        assert float(row[0]) == pytest.approx(sum(e.log_probs), abs=PRINTED)
    assert [float(r[0]) for r in rows] == pytest.approx([r.scores[0] for r in best], abs=1e-4)


def test_score_refuses_a_line_without_one_tab_after_writing_the_lines_before(tiny_package, tmp_path, capsys,
                                                                              sources):
    for bad, what in [(sources[2], "no TAB"), (f"{sources[2]}\ta\tb", "2 TABs")]:
        pairs = tmp_path / "pairs.tsv"
        pairs.write_text(f"{sources[0]}\tx\n{sources[1]}\ty\n{bad}\n{sources[3]}\tz\n", encoding="utf-8")
        rc, out, err = run_cli(["score", str(tiny_package), "-i", str(pairs), "--device", "cpu"], capsys)
        assert rc == 2 and len(out.splitlines()) == 2
        assert err == f"seq2onnx score: error: line 3: {what}; each line is SOURCE<TAB>TARGET (a TAB inside a " \
                      "sentence cannot be scored: replace it with a space)\n"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_and_target_prefix_on_a_terminal_only(tiny_package, tmp_path, monkeypatch, translator, sources):
    from seq2onnx.runtime.cli import cli_io
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sources[:5]) + "\n", encoding="utf-8")
    prefix = translator.translate(sources[0]).split(" ")[0]
    args = ["translate", str(tiny_package), "-i", str(src), "-o", str(tmp_path / "out.txt"), "--device", "cpu",
            "--max-batch-size", "2", "--target-prefix", prefix]
    monkeypatch.setattr(cli_io.Progress, "after", 0.0)
    monkeypatch.setattr(sys, "stderr", _Terminal())
    assert main(args) == 0
    shown = sys.stderr.getvalue()
    assert shown.startswith("\r\x1b[Kseq2onnx translate: 2 lines, ") and shown.endswith(" lines/s\n")
    assert [part.split(",")[0] for part in shown.split("\r\x1b[K")[1:]] == \
        ["seq2onnx translate: 2 lines", "seq2onnx translate: 4 lines", "seq2onnx translate: 5 lines"]
    got = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert got == [translator.translate(s, target_prefix=prefix) for s in sources[:5]]
    assert all(g.startswith(prefix) for g in got)
    monkeypatch.setattr(sys, "stderr", io.StringIO())              # not a terminal: no progress
    assert main(args) == 0 and sys.stderr.getvalue() == ""


def test_score_names_the_line_whose_target_was_cut(tiny_package, tmp_path, capsys, translator, sources):
    pairs = tmp_path / "pairs.tsv"
    long_target = " ".join([sources[1]] * (translator.config.max_positions // 2 + 1))
    pairs.write_text(f"{sources[0]}\t{sources[0]}\n{sources[1]}\t{long_target}\n", encoding="utf-8")
    rc, out, err = run_cli(["score", str(tiny_package), "-i", str(pairs), "--device", "cpu"], capsys)
    assert rc == 0 and len(out.splitlines()) == 2
    assert err.startswith("seq2onnx score: warning: line 2: target is longer than the model's ") and \
        err.count("\n") == 1, err


def test_alignment_and_attention_plots(tiny_package, tmp_path, capsys, translator, sources):
    """--alignment: TEXT ||| pairs, as return_alignment gives them; --plot-attention DIR: a PNG per input line,
    a blank line included (a plot with no rows)."""
    src = tmp_path / "in.txt"
    src.write_text("\n".join(sources[:3] + [""]) + "\n", encoding="utf-8")
    plots = tmp_path / "plots" / "new"
    rc, out, _ = run_cli(["translate", str(tiny_package), "-i", str(src), "--alignment", "--n-best", "2",
                          "--beam-size", "2", "--plot-attention", str(plots), "--device", "cpu"], capsys)
    assert rc == 0
    expected = translator.translate_batch(sources[:3] + [""], beam_size=2, num_hypotheses=2, return_alignment=True)
    want = [f"{n}\t{text} ||| {' '.join(f'{s}-{t}' for s, t in pairs)}"
            for n, r in enumerate(expected, 1) for text, pairs in zip(r.hypotheses, r.alignment)]
    assert out.splitlines() == want
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["line-1.png", "line-2.png", "line-3.png", "line-4.png"]
    assert all((plots / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_attention_options_fail_clearly(tiny_package, tmp_path, capsys, monkeypatch):
    old = DATA / "numbers-en-de-earlier-contract"
    rc, out, err = run_cli(["translate", str(old), "--alignment", "--device", "cpu"], capsys)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "has no cross-attention output (a format_version 1 package): re-export the model" in err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = run_cli(["translate", str(tiny_package), "--plot-attention", str(blocker / "sub")], capsys)
    assert rc == 2 and "--plot-attention" in err and "cannot make that folder" in err
    monkeypatch.setitem(sys.modules, "matplotlib", None)                  # the [plot] extra not installed
    rc, _, err = run_cli(["translate", str(tiny_package), "--plot-attention", str(tmp_path / "p")], capsys)
    assert rc == 2 and "pip install matplotlib" in err and not (tmp_path / "p").exists()


@pytest.mark.parametrize("max_bytes", [None, 100])
def test_read_lines_warns_to_its_caller(max_bytes):
    """read_lines' warnings go to the `warn` it is given (translate-dataset records them per row), the invalid-UTF-8
    one included, read bounded or not."""
    import io

    from seq2onnx.runtime.cli.cli_io import read_lines

    said = []
    lines = list(read_lines(io.BytesIO(b"ok\n\xff bad\n"), max_bytes, warn=said.append))
    assert lines == [(1, "ok"), (2, "\ufffd bad")]
    assert said == ["line 2: invalid UTF-8 replaced with U+FFFD"]
