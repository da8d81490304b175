"""What a newcomer sees from the command line: a closed stdout (`| head`) ends quietly,
a run folder passed where a checkpoint or a model package belongs is named as such, sampling on the command
line, `seq2onnx info`'s parity figures, the progress total, the list of known decoding options, and inputs
the model's tokenizer cannot cover. Each CLI case runs the real command in a subprocess: one line on stderr,
the exit status, never a traceback. The shipped model serves where a property of its tokenizer or manifest is
tested (not of what it learned); the tiny session model where a translation itself is compared."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.translator import Translator

CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]
SHIPPED = "numbers-en-de"
CLOSED_PIPE = 141                 # 128 + SIGPIPE: what a shell shows for `cat` whose reader went away


def run(args, stdin: bytes = b"", **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + [str(a) for a in args], input=stdin, capture_output=True, timeout=300, **kwargs)


def one_line_error(proc: subprocess.CompletedProcess, rc: int = 2) -> str:
    """The one stderr line of a refused command (exit `rc`), without its `seq2onnx CMD: error: ` opening."""
    err = proc.stderr.decode()
    assert proc.returncode == rc, err
    assert "Traceback" not in err and err.count("\n") == 1 and ": error: " in err, err
    return err.split(": error: ", 1)[1].rstrip("\n")


# --- a closed stdout ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, unbuffered", [
    *[(args, unbuffered) for args in (["--help"], ["translate", "--help"], ["info", SHIPPED],
                                       ["translate", SHIPPED, "--beam-size", "1"]) for unbuffered in ("1", "")],
    ([], ""), (["--version"], ""), (["info", SHIPPED, "--json"], ""), (["export", "--help"], "")])
def test_a_stdout_nobody_reads_ends_the_command_quietly(args, unbuffered):
    # the read end is closed before the command starts: its first write fails (EPIPE), whether it writes each
    # print at once (PYTHONUNBUFFERED) or flushes a buffer at the end
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(CLI + args, input=b"seven\nforty-two\n", stdout=write, stderr=subprocess.PIPE,
                              timeout=300, env=dict(os.environ, PYTHONUNBUFFERED=unbuffered))
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr.decode()) == (CLOSED_PIPE, "")


def test_translate_piped_into_head_stops_quietly_when_head_has_its_lines():
    # `seq2onnx translate | head -1`, made deterministic: one line a batch, the next line sent only after the
    # reader has read the first translation and gone away
    proc = subprocess.Popen(CLI + ["translate", SHIPPED, "--beam-size", "1", "--max-batch-size", "1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        proc.stdin.write(b"seven\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip()
        proc.stdout.close()
        proc.stdin.write(b"eight\nnine\n")
        proc.stdin.close()
        assert proc.wait(timeout=300) == CLOSED_PIPE
        assert proc.stderr.read() == b""
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()


# --- a run folder where a checkpoint or a package belongs ---------------------------------------------------
@pytest.fixture
def run_folder(tmp_path) -> Path:
    """A folder laid out as `seq2onnx train --out` leaves it (the checkpoints' bytes are never read here)."""
    run = tmp_path / "runs" / "mine"
    run.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "metrics.jsonl", "step_100.pt", "step_200.pt", "last.pt", "best.pt"):
        (run / name).write_bytes(b"")
    return run


def test_translate_names_a_training_run_folder_and_the_export_to_run(run_folder):
    message = one_line_error(run(["translate", run_folder], b"seven\n"))
    assert message.startswith(f"{run_folder} is a training run folder (it holds best.pt, last.pt, step_100.pt, "
                              f"step_200.pt), not a model package")
    assert f"seq2onnx export {run_folder / 'best.pt'} MODEL_DIR" in message and "re-export" not in message
    with pytest.raises(ModelPackageError, match="is a training run folder"):
        Translator(run_folder)                                          # the API says the same
    assert "training run folder" in one_line_error(run(["info", run_folder]))


def test_a_folder_with_neither_manifest_nor_checkpoint_is_not_called_a_run(tmp_path):
    assert "manifest.json is missing" in one_line_error(run(["translate", tmp_path], b"seven\n"))


def test_a_hostile_run_folder_name_cannot_drive_the_terminal(tmp_path):
    run_dir = tmp_path / "run\x1b[2J\x07"
    run_dir.mkdir()
    for i in range(9):                                                  # more than are named
        (run_dir / f"step_{i}.pt").write_bytes(b"")
    message = one_line_error(run(["translate", run_dir], b"seven\n"))
    assert "\x1b" not in message and "\\x1b[2J\\x07" in message and "(it holds step_0.pt, step_1.pt, step_2.pt, " \
        "step_3.pt, 5 more)" in message


def test_export_names_the_checkpoints_of_a_run_folder(run_folder, tmp_path):
    message = one_line_error(run(["export", run_folder, tmp_path / "out"]))
    assert message == (f"{run_folder} is a folder; pass one checkpoint in it, e.g. seq2onnx export "
                       f"{run_folder / 'best.pt'} OUT_DIR (it holds best.pt, last.pt, step_100.pt, step_200.pt; "
                       "seq2onnx average makes an averaged one)")
    assert not (tmp_path / "out").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no .pt checkpoint in it" in one_line_error(run(["export", empty, tmp_path / "out"]))


# --- sampling on the command line ---------------------------------------------------------------------------
def test_sampling_alone_implies_beam_size_1():
    # temperature 0 samples the argmax: the same tokens as greedy search, so the run is compared exactly; the
    # API refuses sampling with any beam but 1, so the run succeeding shows which beam size the CLI chose
    lines = b"seven\nforty-two\nthree hundred and one\n"
    sampled = run(["translate", SHIPPED, "--sampling-topk", "5", "--sampling-temperature", "0"], lines)
    greedy = run(["translate", SHIPPED, "--beam-size", "1"], lines)
    assert (sampled.returncode, sampled.stderr) == (0, b"") and sampled.stdout == greedy.stdout
    assert len(sampled.stdout.splitlines()) == 3


@pytest.mark.parametrize("args, message", [
    (["--sampling-topk", "5", "--beam-size", "4"], "sampling (--sampling-topk=5) needs --beam-size=1, got --beam-size=4"),
    (["--sampling-topk", "5", "--constraint", "sieben"],
     "--constraint needs beam search, and --sampling-topk 5 samples: drop one of them"),
])
def test_sampling_with_a_beam_is_refused_in_the_flags_words(args, message):
    assert one_line_error(run(["translate", SHIPPED, *args], b"seven\n")) == message


# --- out of the tokenizer's reach ----------------------------------------------------------------------------
# The numbers model's tokenizer (a 200-piece BPE over lower-cased numbers 0..999,999, in words and digits) has no
# piece for "m" (no number word below a million holds one), "." or CJK: each such character is one <unk> piece.
# "hello" and "-5" are spelled from pieces it has: no guard on the tokenizer can see them (README, MODEL_CARD).
UNCOVERED = {"one million": 1, "1.234": 1, "\u65e5\u672c": 2, "seven": 0, "hello": 0, "-5": 0, "": 0, "  ": 0}


def test_source_unknown_tokens_counts_what_the_tokenizer_cannot_cover():
    tr = Translator(SHIPPED, device="cpu")
    texts = list(UNCOVERED)
    results = tr.translate_batch(texts, beam_size=1)
    assert [r.source_unknown_tokens for r in results] == list(UNCOVERED.values())
    alone = [tr.translate_batch([t], beam_size=1)[0].source_unknown_tokens for t in texts]
    assert alone == list(UNCOVERED.values())                          # a batch gives what each text gives alone


def test_translate_warns_on_the_lines_the_tokenizer_cannot_cover():
    texts = list(UNCOVERED)
    proc = run(["translate", SHIPPED, "--beam-size", "1"], "".join(f"{t}\n" for t in texts).encode())
    assert proc.returncode == 0 and len(proc.stdout.decode().splitlines()) == len(texts)
    warned = [line.split(":")[2].strip() for line in proc.stderr.decode().splitlines()]
    assert warned == [f"line {i}" for i, t in enumerate(texts, 1) if UNCOVERED[t]]
    assert all("never saw in training" in line for line in proc.stderr.decode().splitlines())


# --- seq2onnx info -----------------------------------------------------------------------------------------
def shipped_folder() -> Path:
    from seq2onnx.runtime.package.shipped_models import resolve_model_dir
    return Path(resolve_model_dir(SHIPPED))


def test_info_says_how_each_variant_was_checked():
    import json
    manifest = json.loads((shipped_folder() / "manifest.json").read_text(encoding="utf-8"))
    proc = run(["info", SHIPPED])
    out = proc.stdout.decode()
    assert (proc.returncode, proc.stderr) == (0, b"") and "_match=" not in out and "top1_agreement=" not in out
    for name, v in manifest["variants"].items():
        p = v["parity"]
        block = re.split(r"\n  (?=\S)", out.split(f"\n  {name} ", 1)[1])[0]          # the variant's lines
        assert (f"on {p['sentences']} sentences ({p['real_sentences']} from --parity-data, "
                f"{p['sentences'] - p['real_sentences']} synthetic)") in block
        for key, gate in (v.get("thresholds") or {}).items():
            assert f"{100 * p[key]:.1f}%" in block and f"gate >= {100 * gate:g}%: passed" in block
        if "thresholds" in v:
            assert f"{100 * p['beam4_token_match']:.1f}% of beam-4 hypotheses identical, rank for rank; recorded, " \
                   "not gated" in block
    assert "note: beam-4 compares each sentence's 4 hypotheses with the reference's, rank for rank" in out


def test_info_reads_a_lying_parity_record_without_trusting_it(tmp_path):
    import json
    import shutil
    copy = tmp_path / "pkg"
    shutil.copytree(shipped_folder(), copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    manifest["variants"]["int8"]["parity"].update(top1_agreement="\x1b[2Jall", greedy_token_match=0.5,
                                                  sentences=float("nan"))
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")   # the manifest lists no checksum
    out = run(["info", copy]).stdout.decode()
    block = out.split("\n  int8 ", 1)[1]
    assert "on ? sentences" in block and "     ? of decoder steps" in block and "\x1b" not in out
    assert "50.0% of greedy-search token positions identical; gate >= 90%: not reached" in block
    manifest["variants"]["int8"]["status"] = "validation-skipped"
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    block = run(["info", copy]).stdout.decode().split("\n  int8 ", 1)[1]
    assert "gate >= 90% not applied (validation-skipped)" in block


# --- the progress line's total --------------------------------------------------------------------------------
def progress_shown(source, lines_per_block: int, blocks: int) -> str:
    """What Progress writes to a real terminal (a pseudo-terminal) as `blocks` blocks of lines are read."""
    import select
    from seq2onnx.runtime.cli.cli_io import Progress, read_lines
    master, slave = os.openpty()
    try:
        with open(slave, "w", closefd=False) as tty:
            progress = Progress(source, stream=tty)
            progress.after = 0.0
            lines = read_lines(source, 1 << 16)
            for _ in range(blocks):
                assert len([next(lines) for _ in range(lines_per_block)]) == lines_per_block
                progress.add(lines_per_block)
            progress.close()
        shown = b""
        while select.select([master], [], [], 0.5)[0]:
            shown += os.read(master, 1 << 16)
        return shown.decode()
    finally:
        os.close(master)
        os.close(slave)


def test_progress_has_a_total_for_a_regular_file(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"seven\n" * 200)                       # 1200 bytes: 50 lines are 25% of them
    with open(path, "rb") as source:
        shown = progress_shown(source, 50, 4)
    steps = [s for s in shown.split("\r\x1b[K") if s]
    assert [s.split(": ", 1)[1].split(", ")[:2] for s in steps] == [
        [f"{50 * k} lines", f"{25 * k}% of the input"] for k in (1, 2, 3, 4)]
    assert steps[-1].split(", ")[2] == "0:00 left"


def test_progress_of_a_pipe_has_no_total():
    read, write = os.pipe()
    os.write(write, b"seven\n" * 100)
    os.close(write)
    with open(read, "rb") as source:
        shown = progress_shown(source, 50, 2)
    assert "50 lines, " in shown and "100 lines, " in shown and "%" not in shown


# --- the list of known decoding options -------------------------------------------------------------------
@pytest.mark.parametrize("call, own", [
    (lambda tr, **kw: tr.translate_batch(["seven"], **kw), {"return_scores", "constraints", "target_prefix",
                                                            "max_batch_size", "batch_type", "max_input_length"}),
    (lambda tr, **kw: tr.translate("seven", **kw), {"return_scores", "constraints", "target_prefix"}),
    (lambda tr, **kw: tr.translate_ids([[5, 2]], **kw), {"constraint_ids", "target_prefix_ids", "max_batch_size"}),
    (lambda tr, **kw: list(tr.generate_tokens("seven", **kw)), {"max_input_length", "target_prefix", "constraints"}),
])
def test_an_unknown_option_lists_every_keyword_the_call_accepts(call, own):
    tr = Translator(SHIPPED, device="cpu")
    with pytest.raises(ValueError, match="^unknown decoding option") as e:
        call(tr, beam_szie=4)
    listed = set(re.split(r"; known: |; and \w+'s own: |, ", str(e.value))[1:])
    assert own <= listed and {"beam_size", "sampling_topk", "return_attention"} <= listed
    for name in listed:                                  # each one listed is taken: any error names its value
        try:
            call(tr, **{name: None})
        except Exception as refused:                     # noqa: BLE001 - None is a bad value for most of them
            assert "unknown decoding option" not in str(refused), name
