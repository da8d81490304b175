"""What an attacker found in constraints, `seq2onnx score`, target prefixes and the API's
argument types, each fixed case and one hostile case of our own per surface:
  * constraints: refused by size before any work (no quadratic check), and the work of a constrained step bounded
    (constraints.MAX_CONSTRAINT_WORK: a sentence over it refused in one line, a batch over it decoded in groups);
  * `seq2onnx score`: a source too long to read keeps its TAB and its target (cut with a warning, as translate
    cuts a line), and the lines after it are scored;
  * a target prefix or a phrase that is not text (argv bytes that are not UTF-8), or that the vocabulary cannot
    spell (<unk>): one line naming it;
  * the command line names its flags, never the API's arguments (options.OptionError, commands._flags);
  * the API's id lists and texts of the wrong type: one line naming the argument and the type expected.
Real pipeline: the tiny model (fixtures) and, where the bounds need a model of 512 positions, the shipped one."""
from __future__ import annotations

import io
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tests.fixtures_training import DE, toy_pairs
from seq2onnx.runtime.cli import commands
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.cli.cli_io import read_lines
from seq2onnx.runtime.decode.constraints import MAX_CONSTRAINT_WORK, Constraints, split_work, work
from seq2onnx.runtime.decode.decoding import decode
from seq2onnx.runtime.options import DecodingOptions, OptionError
from seq2onnx.runtime.translator import Translator

CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]
SHIPPED = "numbers-en-de"
SOURCES = [s for s, _ in toy_pairs(4, seed=31)]


@pytest.fixture(scope="module")
def tr(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def shipped():
    return Translator(SHIPPED, device="cpu", intra_threads=1)


def run_cli(args, capsys):
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


def one_word_phrases(translator, n):
    """n distinct phrases of two words that are one token each (2 tokens a phrase)."""
    vocab = translator.tokenizer.get_vocab()
    words = sorted(t[1:] for t in vocab if t.startswith("\u2581") and len(t) > 1
                   and len(translator.tokenizer.encode(t[1:]).ids) == 1)
    phrases = [f"{a} {b}" for a in words for b in words][:n]
    assert len(phrases) == n
    return phrases


# --- constraints: refused by size before any work ----------------------------------------------------------
def test_too_many_phrases_are_refused_by_their_number_first(tr):
    """The number of phrases is checked before any phrase is looked at (a repeat check over 60,000 phrases is
    quadratic). The last phrase is not even a str: the error is about the number, so no phrase was read."""
    phrases = [f"drei {i}" for i in range(59_999)] + [7]
    with pytest.raises(OptionError, match=r"^constraints\[0\] holds 60000 phrases; a translation holds at most "
                                          rf"{tr.config.max_positions} tokens") as e:
        tr.translate_batch(["one"], constraints=[phrases])
    assert "\n" not in str(e.value)
    ids = [[5]] * 59_999 + ["not ids"]
    with pytest.raises(OptionError, match=r"^constraint_ids\[0\] holds 60000 phrases"):
        tr.translate_ids([[5, tr.config.eos_id]], constraint_ids=[ids])


def test_a_huge_phrase_is_refused_by_its_length_first(tr):
    """Our own: one phrase of 20 MB is refused by its length, before its words are split or tokenized."""
    with pytest.raises(OptionError, match=r"^constraints\[0\]\[1\] 'drei drei .*' is longer than a translation can "
                                          "be") as e:
        tr.translate_batch(["one"], constraints=[["vier", "drei " * 4_000_000]])
    assert "\n" not in str(e.value)


# --- constraints: the work of a step is bounded -----------------------------------------------------------------
@pytest.mark.parametrize("sentences", [[[[5]], [[6, 7], [8]]], [[[5, 6, 7]] * 3, [], [[9]]], [[], []]])
@pytest.mark.parametrize("beam_size", [2, 5])
def test_work_counts_what_a_constrained_step_holds(tr, sentences, beam_size):
    """`work` is what the bound is about: the states Constraints.order computes (a state per phrase of each of
    beam_size x (phrases + 3) candidates per sentence, every sentence padded to the most phrases) and the
    entries of the automata's tables. Measured here on the arrays themselves."""
    if not any(sentences):
        assert work(sentences, beam_size) == 0                   # no phrases: no automata run
        return
    c = Constraints(sentences, beam_size, tr.config.vocab_size)
    v, k, a = tr.config.vocab_size, beam_size, len(sentences)
    cand = np.random.default_rng(0).standard_normal((a, k * v)).astype(np.float32)
    top = np.argsort(-cand, axis=1, kind="stable")[:, :2 * k]
    seen = []
    original = c.step
    c.step = lambda state, sentence, token: seen.append(state.size) or original(state, sentence, token)
    c.order(cand, top, np.arange(a), k)
    assert work(sentences, beam_size) == seen[0] + c.table.size


def test_a_sentence_over_the_work_bound_is_refused_in_one_line(shipped, capsys):
    """The attacker's case: beam 256, 16 sentences x 256 phrases (gigabytes and minutes of work): refused before any
    work, by the API and by the command line, naming the flags."""
    phrases = one_word_phrases(shipped, 256)
    texts = [f"three hundred and {w}" for w in "one two three four five six seven eight".split()] * 2
    assert work([shipped.constraint_ids([phrases], 1)[0]], 256) > MAX_CONSTRAINT_WORK
    with pytest.raises(OptionError, match=r"^constraints\[0\]: 256 phrases at beam_size 256 make [\d,]+ automaton "
                                          r"states a step, more than the [\d,]+ allowed") as e:
        shipped.translate_batch(texts, beam_size=256, constraints=[phrases] * len(texts))
    assert "\n" not in str(e.value)
    args = ["translate", SHIPPED, "--device", "cpu", "--beam-size", "256", "-i", "/dev/null"]
    rc, out, err = run_cli(args + [a for p in phrases for a in ("--constraint", p)], capsys)
    message = one_line_error(err)
    assert rc == 2 and out == "" and message.startswith("--constraint: 256 phrases at --beam-size 256 make")
    assert message.endswith("give fewer phrases or a smaller --beam-size")
    # just under the bound: accepted (the same 256 phrases at beam 8)
    assert work([shipped.constraint_ids([phrases], 1)[0]], 8) <= MAX_CONSTRAINT_WORK


def test_a_batch_over_the_work_bound_is_decoded_in_groups():
    """Sentences each within the bound are decoded a few at a time: every group within it, each sentence once, in
    order, and no group could have taken the next sentence."""
    rng = np.random.default_rng(31)
    phrases = [[list(rng.integers(4, 100, rng.integers(1, 4))) for _ in range(rng.integers(0, 120))]
               for _ in range(300)]
    for beam_size in (4, 64, 256):
        batch = list(range(len(phrases)))
        groups = split_work(batch, phrases, beam_size)
        assert [i for g in groups for i in g] == batch
        assert all(work([phrases[i] for i in g], beam_size) <= MAX_CONSTRAINT_WORK for g in groups)
        assert all(work([phrases[i] for i in g + [h[0]]], beam_size) > MAX_CONSTRAINT_WORK
                   for g, h in zip(groups, groups[1:]))
    assert len(split_work(batch, phrases, 256)) > len(split_work(batch, phrases, 4)) > 1


def test_decode_refuses_a_batch_over_the_work_bound(shipped):
    """Our own: the id-level decode (no batching of its own) refuses a batch whose step would pass the bound,
    though each sentence alone is within it; translate_ids splits the same batch and decodes it."""
    phrases = [[[t] for t in range(4, 104)]] * 40                     # 100 one-token phrases each
    assert work(phrases[:1], 16) <= MAX_CONSTRAINT_WORK < work(phrases, 16)
    source = shipped.source_ids("three")
    with pytest.raises(OptionError, match=r"^40 sentences with constraints at beam_size 16 make [\d,]+ automaton "
                                          r"states a step, more than the [\d,]+ allowed"):
        decode(shipped.engine, shipped.config, [source] * 40, DecodingOptions(beam_size=16), constraints=phrases)
    assert len(split_work(range(40), phrases, 16)) > 1


# --- seq2onnx score: a long source keeps its TAB and its target ------------------------------------------------
def test_score_cuts_a_long_source_and_scores_the_lines_after_it(tiny_package, tr, tmp_path, capsys):
    """The attacker's case: a source over the read bound gave `line 2: no TAB` and stopped the command."""
    long_source = "three " * 50_000
    pairs = [("three", "drei"), (long_source, "drei"), ("four", "vier")]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    rc, out, err = run_cli(["score", str(tiny_package), "--device", "cpu", "--intra-threads", "1", "-i", str(path)],
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


def test_score_reads_source_and_target_each_within_its_bound(capsys):
    """Our own: each part is cut on its own at a character boundary (no U+FFFD from a split character), the TAB
    and the other part kept; a line without TAB is one part; a BOM and CR LF are dropped as before."""
    data = ("\ufeff" + "é" * 6 + "\tab\r\n" + "x\t" + "€" * 5 + "\n" + "no tab here\n" + "a\tb\tc").encode()
    lines = list(read_lines(io.BytesIO(data), max_bytes=7, target_bytes=8))
    assert lines == [(1, "ééé\tab"), (2, "x\t€€"), (3, "no tab "), (4, "a\tb\tc")]
    err = [line.split(": ", 2)[2] for line in capsys.readouterr().err.splitlines()]
    assert err == ["line 1: the source is longer than 7 bytes; only those were read (more cannot fit --max-input-length)",
                   "line 2: the target is longer than 8 bytes; only those were read (more cannot fit the model's "
                   "max_positions)",
                   "line 3: the source is longer than 7 bytes; only those were read (more cannot fit --max-input-length)"]


# --- target prefixes and phrases: text the vocabulary can spell --------------------------------------------------
@pytest.mark.parametrize("flag", ["--target-prefix", "--constraint"])
def test_argv_bytes_that_are_not_utf8_are_one_line(tiny_package, tmp_path, flag):
    """The attacker's case: `--target-prefix $'\\xff'` ended in a tokenizers TypeError. A real argv of bytes."""
    src = tmp_path / "in.txt"
    src.write_text("one\n", encoding="utf-8")
    proc = subprocess.run(CLI + ["translate", str(tiny_package), "--device", "cpu", "-i", str(src), flag.encode(),
                                 b"drei \xff"], capture_output=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""
    assert proc.stderr.decode() == (f"seq2onnx translate: error: {flag} is not valid text (it holds lone "
                                    "surrogates, e.g. from bytes that are not UTF-8): pass UTF-8 text\n")


@pytest.mark.parametrize("kwargs, message", [
    (dict(target_prefix=["drei \udcff"]), r"target_prefix\[0\] is not valid text \(it holds lone surrogates"),
    (dict(constraints=[["vier", "drei \udcff"]]), r"constraints\[0\]\[1\] is not valid text \(it holds lone"),
    (dict(target_prefix=["\u65e5\u672c"]), r"target_prefix\[0\] '\u65e5\u672c' has characters the model's tokenizer "
                                           r"does not know \(they become <unk>\): no translation can start with it"),
    (dict(constraints=[["\u65e5\u672c"]]), r"constraints\[0\]\[0\] '\u65e5\u672c' has characters the model's "
                                           r"tokenizer does not know \(they become <unk>\): no translation can hold it"),
    # our own: a prefix no translation can hold (never cut in silence); a prefix of bytes
    (dict(target_prefix=["drei " * 600]), r"target_prefix\[0\] 'drei drei .*' is longer than a translation can be"),
    (dict(target_prefix=[b"drei"]), r"target_prefix\[0\] must be a str, got bytes"),
])
def test_prefixes_and_phrases_the_vocabulary_cannot_spell_are_refused(tr, kwargs, message):
    with pytest.raises(OptionError, match="^" + message) as e:
        tr.translate_batch(["one"], beam_size=2, **kwargs)
    assert "\n" not in str(e.value)


def test_a_prefix_the_vocabulary_can_spell_is_kept(tr):
    """The rule refuses only what the vocabulary lacks: a known prefix starts every translation, as before."""
    (r,) = tr.translate_batch(["one two"], target_prefix=["drei"])
    assert r.hypotheses[0].startswith("drei")


def test_cli_refuses_a_prefix_it_cannot_spell_before_any_line(tiny_package, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    rc, out, err = run_cli(["translate", str(tiny_package), "--device", "cpu", "-i", str(src),
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
    # the attacker's: `constraints[0] holds ... tokens (--max-positions)`
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
    rc, out, err = run_cli(["translate", str(tiny_package), "--device", "cpu", "-i", str(src), *args], capsys)
    text = one_line_error(err)
    assert rc == 2 and out == "" and message in text
    assert flags_named(text) <= real_flags(), text
    assert not re.search(r"\b(constraints|target_prefix|beam_size|num_hypotheses|compute_type)\b|\[\d+\]", text), text


# --- the API's argument types ---------------------------------------------------------------------------------
@pytest.mark.parametrize("call, message", [
    # the attacker's cases
    (lambda tr, s: tr.translate_ids([s], constraint_ids=[7], beam_size=2),
     r"constraint_ids\[0\] must be a list of id lists \(or None\), got int"),
    (lambda tr, s: tr.translate_batch(["one"], target_prefix=[5]), r"target_prefix\[0\] must be a str, got int"),
    (lambda tr, s: tr.translate_batch(["one"], target_prefix="drei"),
     r"target_prefix must be a list of one str \(or None\) per input, got str"),
    # our own: floats, strings, bools and nested lists where ids belong; a forced EOS
    (lambda tr, s: tr.translate_ids([[5.0, 2]]), r"sources\[0\] must hold ids \(int\), got 5.0 \(float\)"),
    (lambda tr, s: tr.translate_ids([s, ["5", 2]]), r"sources\[1\] must hold ids \(int\), got '5' \(str\)"),
    (lambda tr, s: tr.translate_ids([[True, 2]]), r"sources\[0\] must hold ids \(int\), got True \(bool\)"),
    (lambda tr, s: tr.translate_ids([[5, [2]]]), r"sources\[0\] must hold ids \(int\), got \[2\] \(list\)"),
    (lambda tr, s: tr.translate_ids("five"), r"sources must be a list of id lists, got str"),
    (lambda tr, s: tr.translate_ids([s], target_prefix_ids=[[2.5]]),
     r"target_prefix_ids\[0\] must hold ids \(int\), got 2.5 \(float\)"),
    (lambda tr, s: tr.translate_ids([s], target_prefix_ids=[7]), r"target_prefix_ids\[0\] must be a list of ids \(int\), got int"),
    (lambda tr, s: tr.translate_ids([s], target_prefix_ids=[[5, tr.config.eos_id]]),
     r"target_prefix_ids\[0\] holds the id \d+, which no translation holds \(PAD, BOS, EOS\)"),
    (lambda tr, s: tr.translate_ids([s], constraint_ids=[[[5, 1.5]]], beam_size=2),
     r"constraint_ids\[0\]\[0\] must hold ids \(int\), got 1.5 \(float\)"),
    (lambda tr, s: tr.score_ids([s], ["drei"]), r"targets\[0\] must be a list of ids \(int\), got str"),
])
def test_api_arguments_of_the_wrong_type_are_one_line(tr, call, message):
    source = tr.source_ids("one two")
    with pytest.raises((TypeError, ValueError), match="^" + message + "$") as e:
        call(tr, source)
    assert isinstance(e.value, OptionError) and "\n" not in str(e.value)


def test_ids_of_any_integer_type_are_accepted(tr):
    """numpy arrays and numpy integers are ids as good as ints: the same result as lists."""
    source = tr.source_ids("one two three")
    expected = tr.translate_ids([source], target_prefix_ids=[source[:1]])
    got = tr.translate_ids([np.array(source, dtype=np.int32)], target_prefix_ids=[(np.int64(source[0]),)])
    assert [h.tokens for h in got[0]] == [h.tokens for h in expected[0]]
