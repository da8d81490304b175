"""`seq2onnx train / average / data`: bad input is one stderr line naming the problem and the fix,
exit code 2, never a traceback."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2onnx.runtime.cli import main as cli_main


def run_cli(capsys, *argv: str):
    """-> (exit code, stderr lines) of seq2onnx ARGV run in-process."""
    code = cli_main([str(a) for a in argv])
    err = capsys.readouterr().err
    return code, err.strip().splitlines()


def assert_one_line_error(code, lines, *fragments):
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0] and lines[0].startswith("seq2onnx ")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_cli_error_in_a_real_process_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "train", "--train", str(tmp_path / "no.tsv"),
                           "--valid", str(tmp_path / "no.tsv"), "--out", str(tmp_path / "run")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"seq2onnx train: error: data file not found: {tmp_path / 'no.tsv'}: "
                                                "check the path"]
    assert not (tmp_path / "run").exists()


def train_args(data: Path, out: Path, *extra):
    return ["train", "--train", data / "train.tsv", "--valid", data / "valid.tsv", "--out", out, "--quiet", *extra]


def test_train_errors(tiny_data_dir, tiny_run, tmp_path, capsys):
    d, out = tiny_data_dir, tmp_path / "run"
    before = sorted(p.name for p in tiny_run.iterdir())
    assert_one_line_error(*run_cli(capsys, *train_args(d, tiny_run, "--preset", "tiny")),
                          "already holds a training run", "--resume")
    assert sorted(p.name for p in tiny_run.iterdir()) == before
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--preset", "tiny", "--config", "m.json")),
                          "both --preset and --config", "only one")
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--resume")), "nothing to resume", "drop --resume")
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--preset", "huge")), "--preset", "invalid choice")
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--max-tokens", "0")), "--max-tokens", ">= 1")
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--frobnicate")), "unrecognized", "--frobnicate")
    assert_one_line_error(*run_cli(capsys, "train", "--out", out), "no train data", "--train")
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--amp", "bf16", "--device", "cpu")),
                          "needs a CUDA device")
    bad_config = tmp_path / "model.json"
    bad_config.write_text(json.dumps({"d_model": 64, "n_heads": 5}))
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--config", bad_config)),
                          "bad model config", "divisible")
    bad_config.write_text("{not json")
    assert_one_line_error(*run_cli(capsys, *train_args(d, out, "--config", bad_config)), "bad model config")

    junk = tmp_path / "junk.tsv"
    junk.write_bytes(b"no tab\n\xff\xfe\tx\n")
    code, lines = run_cli(capsys, "train", "--train", junk, "--valid", d / "valid.tsv", "--out", out)
    assert_one_line_error(code, lines, "no usable training pairs in junk.tsv",
                          "2 lines read; skipped: 1 no tab, 1 invalid UTF-8", "source<TAB>target")
    assert not (out / "last.pt").exists()


def test_resume_with_another_model_is_refused(tiny_data_dir, tiny_run, capsys):
    code, lines = run_cli(capsys, *train_args(tiny_data_dir, tiny_run, "--resume", "--preset", "small"))
    assert_one_line_error(code, lines, "differ from the model of the run", "drop them")


def test_average_errors(tiny_run, tmp_path, capsys):
    assert_one_line_error(*run_cli(capsys, "average", tmp_path / "nope", "--out", tmp_path / "a.pt"),
                          "run folder not found")
    assert_one_line_error(*run_cli(capsys, "average", tmp_path, "--out", tmp_path / "a.pt"),
                          "no step_N.pt checkpoints", "--keep-last")
    # one checkpoint file (issue 31: it said "run folder not found"): named as a file, with both ways out
    assert_one_line_error(*run_cli(capsys, "average", tiny_run / "best.pt", "--out", tmp_path / "a.pt"),
                          "best.pt is one checkpoint file", f"pass its run folder ({tiny_run})", "two or more .pt")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run / "best.pt", tmp_path / "no.pt", "--out",
                                   tmp_path / "a.pt"), f"checkpoint not found: {tmp_path / 'no.pt'}")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run / "best.pt", tiny_run / "last.pt", "--last", "2",
                                   "--out", tmp_path / "a.pt"), "--last", "drop it")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run, "--last", "9", "--out", tmp_path / "a.pt"),
                          "fewer than --last 9", "--last 3")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run, "--last", "0", "--out", tmp_path / "a.pt"),
                          "--last", ">= 1")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run, "--last", "2", "--out", tmp_path / "no" / "a.pt"),
                          "folder of --out not found")
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "step_1.pt").write_text("not a checkpoint")
    torch.save({"format": "seq2onnx-checkpoint", "format_version": 99}, fake / "step_2.pt")
    assert_one_line_error(*run_cli(capsys, "average", fake, "--last", "2", "--out", tmp_path / "a.pt"),
                          "step_1.pt is not a seq2onnx checkpoint")
    (fake / "step_1.pt").unlink()
    assert_one_line_error(*run_cli(capsys, "average", fake, "--last", "1", "--out", tmp_path / "a.pt"),
                          "format_version 99")
    assert not (tmp_path / "a.pt").exists()


def test_average_of_named_checkpoint_files(tiny_run, tmp_path, capsys):
    from seq2onnx.training.checkpoint import load_checkpoint
    code, lines = run_cli(capsys, "average", tiny_run / "best.pt", tiny_run / "last.pt", "--out", tmp_path / "a.pt")
    assert code == 0 and lines == [f"averaged best.pt, last.pt -> {tmp_path / 'a.pt'}"]
    assert load_checkpoint(tmp_path / "a.pt")["train_meta"]["averaged_from"] == ["best.pt", "last.pt"]


def test_data_errors(tmp_path, capsys):
    assert_one_line_error(*run_cli(capsys, "data"), "no data set named", "numbers")
    assert_one_line_error(*run_cli(capsys, "data", "words", "--out", tmp_path), "invalid choice")
    assert_one_line_error(*run_cli(capsys, "data", "numbers"), "--out")
    assert_one_line_error(*run_cli(capsys, "data", "numbers", "--out", tmp_path / "n", "--size", "999"),
                          "--size 999 is below 1000", "--size 1000")
    assert_one_line_error(*run_cli(capsys, "data", "numbers", "--out", tmp_path / "n", "--size", "999000"),
                          "lower --size")
    out = tmp_path / "n"
    out.mkdir()
    (out / "valid.tsv").write_text("keep me\tbehalten\n")
    assert_one_line_error(*run_cli(capsys, "data", "numbers", "--out", out, "--size", "1000"),
                          "already holds valid.tsv", "--force")
    assert (out / "valid.tsv").read_text() == "keep me\tbehalten\n"
    code, _ = run_cli(capsys, "data", "numbers", "--out", out, "--size", "1000", "--valid-size", "5",
                      "--test-size", "5", "--force")
    assert code == 0 and len((out / "valid.tsv").read_text().splitlines()) == 5


@pytest.mark.parametrize("argv, fragments", [
    (["export"], ["required: checkpoint, out_dir", "seq2onnx export --help"]),
    (["export", "model.pt", "out", "--opset", "x"], ["--opset", "invalid int value"]),
    (["average"], ["required", "seq2onnx average --help"]),
    (["data", "bogus"], ["invalid choice: 'bogus'"]),
    (["train", "--out", "run", "--frobnicate"], ["unrecognized", "--frobnicate"]),
    (["info"], ["required: MODEL_DIR", "seq2onnx info --help"]),
])
def test_every_command_reports_a_bad_command_line_in_one_line(capsys, argv, fragments):
    assert_one_line_error(*run_cli(capsys, *argv), *fragments)
