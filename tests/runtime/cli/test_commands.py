"""runtime/cli/commands.py: `seq2onnx translate` and `seq2onnx score` at and beyond every option's bound. Each
case is its defined output (the API's, line for line) or one stderr line naming the flag (never the API's argument),
exit 2; never a traceback: options beyond their bounds, bad command lines, 1,000 awkward lines from a real process,
a source too long to read (its TAB and target kept), argv bytes that are not UTF-8, a prefix the vocabulary cannot
spell."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest

from tests.fixtures_training import DE, toy_pairs
from tests.runtime.test_options import BEYOND, TEXTS, tr  # noqa: F401 - tr: the tiny model's Translator, per module
from tests.runtime.test_text_input import SURROGATES, mixed_texts
from seq2onnx.runtime.cli import commands
from seq2onnx.runtime.cli.commands import format_output
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.translator import MAX_THREADS

CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]
SOURCES = [s for s, _ in toy_pairs(4, seed=31)]


def cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def one_line_error(err: str, command: str = "translate") -> str:
    """The error line of a refused command (nothing else on stderr), less its prefix."""
    assert err.count("\n") == 1 and err.startswith(f"seq2onnx {command}: error: "), err
    return err[len(f"seq2onnx {command}: error: "):].strip()


def flags_named(message: str):
    return set(re.findall(r"--[a-z][a-z-]*", message))


def real_flags():
    return {s for a in commands.translate_parser()._actions for s in a.option_strings}


DECODING_OPTIONS = set(DecodingOptions().to_dict())


def cli_flag(name: str) -> str:
    return "--n-best" if name == "num_hypotheses" else "--" + name.replace("_", "-")


# the decoding options of BEYOND the command line can express (numbers; its own checks for the rest)
CLI_BEYOND = [(o, m) for o, m in BEYOND
              if all(type(v) in (int, float) and k in DECODING_OPTIONS for k, v in o.items()) and o != dict(beam_size=2.0)]


@pytest.mark.parametrize("opts, message", CLI_BEYOND)
def test_cli_option_beyond_its_bound_is_one_line(tiny_package, capsys, opts, message):
    args = [a for k, v in opts.items() for a in (cli_flag(k), repr(v) if isinstance(v, float) else str(v))]
    rc, out, err = cli(["translate", str(tiny_package), *args], capsys)
    first = message.split(" ")[0]
    expected = message.replace(first, cli_flag(first), 1) if first in DECODING_OPTIONS else \
        message.replace("sampling_topk=", "--sampling-topk=").replace("beam_size=", "--beam-size=")   # "sampling (...)"
    assert rc == 2 and out == ""
    assert err.splitlines() == [err.strip()] and err.startswith(f"seq2onnx translate: error: {expected}"), err


@pytest.mark.parametrize("args, message", [
    (["--beam-size", "abc"], "argument --beam-size: invalid int value: 'abc' (see seq2onnx translate --help)"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate (see seq2onnx translate --help)"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--max-batch-size", "0"], "--max-batch-size must be >= 1, got 0"),
    (["--intra-threads", str(MAX_THREADS + 1)], f"--intra-threads must be an integer in [0, {MAX_THREADS}], "
                                                f"got {MAX_THREADS + 1}"),
    (["--inter-threads", "0"], f"--inter-threads must be an integer in [1, {MAX_THREADS}], got 0"),
    (["--max-input-length", "0"], "--max-input-length must be in [1, 512] (the model's max_positions), got 0"),
    (["--max-input-length", "513"], "--max-input-length must be in [1, 512] (the model's max_positions), got 513"),
    (["--n-best", "257", "--beam-size", "1", "--sampling-topk", "0"], "--n-best must be an integer in [1, 256], got 257"),
])
def test_cli_bad_command_lines_are_one_line(tiny_package, capsys, args, message):
    rc, out, err = cli(["translate", str(tiny_package), *args], capsys)
    assert rc == 2 and out == ""
    assert err.splitlines() == [err.strip()] and err.startswith(f"seq2onnx translate: error: {message}"), err


def test_cli_without_model_dir_is_one_line(capsys):
    rc, _, err = cli(["translate"], capsys)
    assert rc == 2 and err == ("seq2onnx translate: error: the following arguments are required: MODEL_DIR "
                               "(see seq2onnx translate --help)\n")
    rc, _, err = cli(["info", "--bogus"], capsys)
    assert rc == 2 and err.startswith("seq2onnx info: error: the following arguments are required: MODEL_DIR")


def length_limit_warning(line: int, result) -> str:
    """`seq2onnx translate`'s warning for a line whose translation `result` stopped at the length limit unended."""
    return (f"seq2onnx translate: warning: line {line}: the translation stopped at the length limit before it ended "
            f"({len(result.token_ids[0])} tokens): the model may be looping on this input; "
            "--max-length-a/--max-length-b/--max-decoding-length set the limit")


@pytest.mark.parametrize("args, opts", [
    (["--beam-size", "256", "--n-best", "256"], dict(beam_size=256, num_hypotheses=256)),
    (["--max-decoding-length", "0", "--n-best", "2"], dict(max_decoding_length=0, num_hypotheses=2)),
    (["--max-decoding-length", "1", "--beam-size", "1"], dict(max_decoding_length=1, beam_size=1)),
    (["--sampling-topk", "0", "--beam-size", "1", "--sampling-temperature", "10000", "--seed", "0",
      "--max-decoding-length", "5"], dict(sampling_topk=0, beam_size=1, sampling_temperature=1e4, seed=0,
                                          max_decoding_length=5)),
    (["--length-penalty", "-10", "--max-input-length", "1", "--intra-threads", str(MAX_THREADS)],
     dict(length_penalty=-10.0, max_input_length=1)),
])
def test_cli_option_at_its_bound_matches_the_api(tiny_package, tr, tmp_path, capsys, args, opts):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    rc, out, err = cli(["translate", str(tiny_package), "-i", str(src), "--scores", "--n-best", "1", "--device", "cpu",
                        *args], capsys)                                   # the same device as `tr`
    assert rc == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = tr.translate_batch(TEXTS, return_scores=True, **{"num_hypotheses": 1, **opts})
    n = opts.get("num_hypotheses", 1)
    rows = [line.split("\t") for line in out.splitlines()]
    if n > 1:
        assert [int(r[0]) for r in rows] == [i + 1 for i, e in enumerate(expected) for _ in e.hypotheses]
        rows = [r[1:] for r in rows]
    assert [r[1] for r in rows] == [h for e in expected for h in e.hypotheses]
    assert [float(r[0]) for r in rows] == pytest.approx([s for e in expected for s in e.normalized_scores], abs=1e-5)
    warned = []                                           # per line: cut to --max-input-length, not ended
    for i, e in enumerate(expected, 1):
        if e.truncated:
            warned.append(f"seq2onnx translate: warning: line {i}: longer than 1 tokens, truncated (--max-input-length)")
        if not e.finished[0]:
            warned.append(length_limit_warning(i, e))
    assert err.splitlines() == warned


def test_cli_stdin_of_1000_awkward_lines(tiny_package, tr):
    """A real process reads raw bytes: invalid UTF-8, NUL, control characters, emoji, CJK, blank lines and a
    10,000-character line among 1,000 lines. Every line gets its defined output, in order."""
    texts, spot = mixed_texts(1000, seed=12)
    raw = [t.encode("utf-8", "surrogateescape") for t in texts]          # SURROGATES -> b"seven \xff"
    raw[spot[""]] = b"\r"                                                   # CRLF of an empty line
    data = b"\n".join(raw)                                                  # no newline after the last line
    proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "translate", str(tiny_package),
                           "--beam-size", "2", "--device", "cpu", "--scores"], input=data, capture_output=True,
                          timeout=300, env=dict(os.environ, PYTHONIOENCODING="ascii"))
    err = proc.stderr.decode()
    assert proc.returncode == 0 and "Traceback" not in err, err
    decoded = [t.replace("\udcff", "\ufffd") for t in texts]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = tr.translate_batch(decoded, beam_size=2, max_batch_size=32, return_scores=True)
    lines = proc.stdout.decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) == 1001
    rows = [line.split("\t") for line in lines[:-1]]
    assert [r[1] for r in rows] == [e.hypotheses[0] for e in expected]
    assert [float(r[0]) for r in rows] == pytest.approx([e.normalized_scores[0] for e in expected], abs=1e-5)
    assert rows[spot[""]] == rows[spot["   "]] == ["0.000000", ""]
    # a block's lines are read (invalid UTF-8 warned) before they are translated (cut, <unk> warned): compared by line,
    # in the order each line gets them
    warned = [f"seq2onnx translate: warning: line {spot[SURROGATES] + 1}: invalid UTF-8 replaced with U+FFFD"]
    for i, e in enumerate(expected, 1):
        if e.truncated:
            warned.append(f"seq2onnx translate: warning: line {i}: longer than 512 tokens, truncated (--max-input-length)")
        if e.source_unknown_tokens:
            warned.append(f"seq2onnx translate: warning: line {i}: holds characters the model's tokenizer never saw in "
                          f"training ({e.source_unknown_tokens} <unk> piece(s)): it lies outside what the model "
                          "learned, so its translation cannot be trusted")
        if not e.finished[0]:          # the tiny model may loop on an odd line: the warning goes with the result
            warned.append(length_limit_warning(i, e))
    assert [e.truncated for e in expected].count(True) == 1 and sum(e.source_unknown_tokens > 0 for e in expected) > 1

    def by_line(lines):
        return sorted(lines, key=lambda s: int(s.split("line ")[1].split(":")[0]))
    assert by_line(err.splitlines()) == by_line(warned)


def test_cli_output_lines_never_break_inside_a_translation():
    """Every character str.splitlines() breaks at becomes a space: one input line, one output line."""
    breaks = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    line = format_output(7, ["a" + "b".join(breaks) + "c", "d"], [-1.5, -2.0], 2, True).decode("utf-8")
    assert line.splitlines() == ["7\t-1.500000\ta" + "b".join(" " * len(breaks)) + "c", "7\t-2.000000\td"]


# --- seq2onnx score: a long source keeps its TAB and its target --------------------------------------------
def test_score_cuts_a_long_source_and_scores_the_lines_after_it(tiny_package, tr, tmp_path, capsys):
    """A source over the read bound is cut with a warning; its TAB and target are kept, and the lines after it are
    scored (not `line 2: no TAB`, which stopped the command)."""
    long_source = "three " * 50_000
    pairs = [("three", "drei"), (long_source, "drei"), ("four", "vier")]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    rc, out, err = cli(["score", str(tiny_package), "--device", "cpu", "--intra-threads", "1", "-i", str(path)],
                           capsys)
    assert rc == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                            # the long source's cut, said by the CLI below
        expected = tr.score_batch([s for s, _ in pairs], [t for _, t in pairs])
    assert out.splitlines() == [f"{sum(r.log_probs) / len(r.log_probs):.6f}" for r in expected]
    limit = tr.config.max_positions
    assert err.splitlines() == [
        f"seq2onnx score: warning: line 2: the source is longer than {4 * 64 * limit} bytes; only those were read "
        "(more cannot fit --max-input-length)",
        f"seq2onnx score: warning: line 2: source has more than {limit} tokens (EOS included); truncated to "
        f"--max-input-length={limit}"]


# --- target prefixes and phrases: text the vocabulary can spell --------------------------------------------------
@pytest.mark.parametrize("flag", ["--target-prefix", "--constraint"])
def test_argv_bytes_that_are_not_utf8_are_one_line(tiny_package, tmp_path, flag):
    """`--target-prefix $'\\xff'`: one line, not a TypeError from tokenizers. A real argv of bytes."""
    src = tmp_path / "in.txt"
    src.write_text("one\n", encoding="utf-8")
    proc = subprocess.run(CLI + ["translate", str(tiny_package), "--device", "cpu", "-i", str(src), flag.encode(),
                                 b"drei \xff"], capture_output=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode() == (f"seq2onnx translate: error: {flag} is not valid text (it holds lone "
                                    "surrogates, e.g. from bytes that are not UTF-8): pass UTF-8 text\n")


def test_cli_refuses_a_prefix_it_cannot_spell_before_any_line(tiny_package, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    rc, out, err = cli(["translate", str(tiny_package), "--device", "cpu", "-i", str(src),
                            "--target-prefix", "\u65e5\u672c"], capsys)
    assert rc == 2 and out == ""
    assert one_line_error(err) == ("--target-prefix '\u65e5\u672c' has characters the model's tokenizer does not know "
                                   "(they become <unk>): no translation can start with it")


# --- the command line names its flags -------------------------------------------------------------------------
def test_every_api_option_has_its_flag():
    """The one table (the parser, whose dests are the API's names) covers every decoding option the CLI sets."""
    flags = commands._flags()
    for name in DecodingOptions().to_dict():
        if name != "return_attention":                            # set by --plot-attention, not a value
            assert flags[name] in real_flags(), name
    assert flags["num_hypotheses"] == "--n-best" and flags["constraints"] == "--constraint"


@pytest.mark.parametrize("args, message", [
    # not `constraints[0] holds ... tokens (--max-positions)`: the flag and the command line's terms
    ([a for w in DE for a in ("--constraint", " ".join([w] * 60))], "--constraint: its phrases hold 600 tokens"),
    (["--constraint", "drei", "--beam-size", "1"], "--beam-size must be >= 2 for --constraint"),
    (["--constraint", "drei", "--constraint", "  "], "--constraint '  ' is empty"),
    (["--n-best", "5", "--beam-size", "2"], "--n-best must be an integer in [1, 2], got 5"),
    (["--max-input-length", "0"], "--max-input-length must be in [1, "),
    (["--compute-type", "float16"], "--compute-type float16 runs on CUDA only; use --device cuda, or --compute-type"),
])
def test_cli_errors_name_flags_that_exist(tiny_package, tmp_path, capsys, args, message):
    src = tmp_path / "in.txt"
    src.write_text("one\n", encoding="utf-8")
    rc, out, err = cli(["translate", str(tiny_package), "--device", "cpu", "-i", str(src), *args], capsys)
    text = one_line_error(err)
    assert rc == 2 and out == "" and message in text
    assert flags_named(text) <= real_flags(), text
    assert not re.search(r"\b(constraints|target_prefix|beam_size|num_hypotheses|compute_type)\b|\[\d+\]", text), text
