"""What a newcomer sees from the command line (issue 31, section 3): a closed stdout (`| head`) ends quietly,
a run folder passed where a checkpoint or a model package belongs is named as such, sampling on the command
line, `seq2onnx info`'s parity figures, the progress total, the list of known decoding options, and inputs
the model's tokenizer cannot cover. Each CLI case runs the real command in a subprocess: one line on stderr,
the exit status, never a traceback. The shipped model serves where a property of its tokenizer or manifest is
tested (not of what it learned); the tiny session model where a translation itself is compared."""
from __future__ import annotations

import os
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
