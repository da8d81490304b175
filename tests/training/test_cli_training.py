"""`seq2onnx train / average / data`: bad input is one stderr line naming the problem and the fix,
exit code 2, never a traceback."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from seq2onnx.runtime.cli.main import main as cli_main


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
    # one checkpoint file where a run folder belongs: named as a file, with both ways out
    assert_one_line_error(*run_cli(capsys, "average", tiny_run / "best.pt", "--out", tmp_path / "a.pt"),
                          "best.pt is one checkpoint file", f"pass its run folder ({tiny_run})", "two or more .pt")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run / "best.pt", tmp_path / "no.pt", "--out",
                                   tmp_path / "a.pt"), f"checkpoint not found: {tmp_path / 'no.pt'}")
    assert_one_line_error(*run_cli(capsys, "average", tiny_run / "best.pt", tiny_run / "last.pt", "--last", "2",
                                   "--out", tmp_path / "a.pt"), "--last", "drop it")
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


def test_the_readmes_train_average_export_sequence_goes_through_after_a_short_run(tiny_data_dir, tmp_path, capsys,
                                                                                  monkeypatch):
    """README "Train and export your own model", command for command, after a newcomer's short first run (16 steps, 2
    step checkpoints): `average --last 5` averages the 2 with a note, and every command after it works; the run,
    its export and `info` call the model undertrained. Smaller than the README: --preset tiny, --max-steps 16 with a
    validation every 8 steps in place of --max-minutes 60 (whose checkpoint count would follow the clock)."""
    from seq2onnx.training.checkpoint import load_checkpoint
    monkeypatch.chdir(tmp_path)
    for name in ("train.tsv", "valid.tsv"):
        (tmp_path / name).write_bytes((tiny_data_dir / name).read_bytes())
    (tmp_path / "runs").mkdir()
    (tmp_path / "models").mkdir()
    code, lines = run_cli(capsys, "train", "--train", "train.tsv", "--valid", "valid.tsv", "--out", "runs/mine",
                          "--preset", "tiny", "--vocab-size", "128", "--max-steps", "16", "--valid-interval", "8",
                          "--best-metric", "bleu", "--threads", "1")
    assert code == 0 and "warning: the model is undertrained, its translations will be poor:" in lines
    assert sorted(p.name for p in Path("runs/mine").glob("step_*.pt")) == ["step_16.pt", "step_8.pt"]

    code, lines = run_cli(capsys, "average", "runs/mine", "--last", "5", "--out", "runs/mine/averaged.pt")
    assert code == 0 and lines == ["note: runs/mine holds 2 step checkpoints, fewer than --last 5: averaging those 2",
                                   "averaged step_8.pt, step_16.pt -> runs/mine/averaged.pt"]
    assert load_checkpoint("runs/mine/averaged.pt")["train_meta"]["averaged_from"] == ["step_8.pt", "step_16.pt"]

    code, lines = run_cli(capsys, "export", "runs/mine/averaged.pt", "models/mine", "--int8", "--parity-data",
                          "valid.tsv")
    verdict = json.loads(Path("runs/mine/summary.json").read_text())["undertrained"]
    assert code == 0 and len(verdict) == 3
    i = lines.index("warning: averaged.pt (step 16) is undertrained, its translations will be poor:")
    assert lines[i + 1:i + 4] == [f"  - {reason}" for reason in verdict] and lines[i + 4].startswith("  fix: ")
    manifest = json.loads(Path("models/mine/manifest.json").read_text())
    assert manifest["source_checkpoint"]["undertrained"] == verdict and "int8" in manifest["variants"]

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a sentence\n"), encoding="utf-8"))
    assert cli_main(["translate", "models/mine", "--beam-size", "4"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    assert cli_main(["info", "models/mine"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint     averaged.pt (step 16, epoch" in out and "averaged from 2 checkpoints)" in out
    assert "               undertrained (the trainer's verdict), its translations will be poor:" in out
    assert all(f"                 - {reason}" in out for reason in verdict)


def test_average_of_a_run_with_one_step_checkpoint_says_it_is_its_weights(tiny_run, tmp_path, capsys):
    from seq2onnx.training.checkpoint import load_checkpoint
    one = tmp_path / "run"
    one.mkdir()
    (one / "step_600.pt").write_bytes(sorted(tiny_run.glob("step_*.pt"))[0].read_bytes())
    code, lines = run_cli(capsys, "average", one, "--out", tmp_path / "a.pt")
    assert code == 0 and lines[0] == (f"note: {one} holds 1 step checkpoint, fewer than --last 5: the average is "
                                      "its weights")
    averaged, alone = load_checkpoint(tmp_path / "a.pt")["model"], load_checkpoint(one / "step_600.pt")["model"]
    assert averaged.keys() == alone.keys() and all(torch.equal(averaged[k], alone[k]) for k in alone)
