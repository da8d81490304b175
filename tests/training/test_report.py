"""The verdict on a run (training/report.py): judged by chrF and the run's --best-metric, not BLEU alone, so
that a model whose targets are one word (the shipped numbers model: BLEU 0, chrF 100) is not called
undertrained while one that never learned is; `export` says it again and records it, `info` shows it."""
from __future__ import annotations

import json
import shutil

import pytest

from tests import REPO
from seq2onnx.runtime.cli.main import main as cli_main
from seq2onnx.training.report import (BLEU_UNTRAINED, CHRF_TRANSLATES, CHRF_UNTRAINED, checkpoint_verdict,
                                      decode_reasons)
from seq2onnx.training.train import TrainArgs, train

from tests.fixtures_training import TINY_VOCAB

SHIPPED = REPO / "models" / "numbers-en-de"


def test_the_shipped_numbers_model_is_not_called_undertrained():
    manifest = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))
    meta = manifest["source_checkpoint"]["train_meta"]
    m = meta["metrics"]
    # one-word targets, so BLEU is 0: a rule of BLEU alone would call it undertrained
    assert m["bleu"] < BLEU_UNTRAINED and m["chrf"] == 100.0 and m["exact_match"] == 1.0
    assert meta["args"]["best_metric"] == "exact_match"
    verdict = checkpoint_verdict(meta, manifest["vocab_size"])
    assert verdict is not None and verdict.reasons == [] and verdict.lines() == []
    assert decode_reasons(m, "bleu") == []          # trained with the default --best-metric bleu: still translates


# chrF, BLEU and exact match of decodes: (name, metrics) for the rule's cases
NO_SOURCE = {"chrf": 35.0, "bleu": 0.0, "exact_match": 0.0, "n_decoded": 100}   # numbers: one number for all


@pytest.mark.parametrize("best_metric, fires", [("bleu", True), ("exact_match", True), ("chrf", False),
                                                ("loss", False)])
def test_between_the_chrf_floors_the_runs_best_metric_decides(best_metric, fires):
    reasons = decode_reasons(NO_SOURCE, best_metric)
    assert bool(reasons) == fires
    if best_metric == "bleu":
        assert reasons == ["chrF 35.0, BLEU 0.0 (--best-metric bleu) on the 100 validation sentences decoded: "
                           "(almost) no 4-gram of the references"]
    if best_metric == "exact_match":
        assert reasons == ["chrF 35.0, exact match 0% (--best-metric exact_match) on the 100 validation sentences "
                           "decoded: not one exactly right"]


@pytest.mark.parametrize("best_metric", ["bleu", "exact_match", "chrf", "loss"])
def test_chrf_judges_every_run_at_both_ends(best_metric):
    low = dict(NO_SOURCE, chrf=CHRF_UNTRAINED - 0.1, bleu=30.0, exact_match=0.5)
    assert len(decode_reasons(low, best_metric)) == 1
    assert "share almost nothing with the references" in decode_reasons(low, best_metric)[0]
    assert decode_reasons(dict(low, chrf=CHRF_UNTRAINED, bleu=BLEU_UNTRAINED), best_metric) == []   # floors: strict
    # from CHRF_TRANSLATES on, BLEU 0 (references under 4 words) or no exact match (long sentences) is no reason
    assert decode_reasons(dict(NO_SOURCE, chrf=CHRF_TRANSLATES), best_metric) == []
    assert bool(decode_reasons(dict(NO_SOURCE, chrf=CHRF_TRANSLATES - 0.1), best_metric)) == (
        best_metric in ("bleu", "exact_match"))
    assert decode_reasons(dict(low, n_decoded=0), best_metric) == []          # nothing decoded: nothing to judge


def test_a_model_that_never_learned_is_called_undertrained_by_its_decodes_and_its_loss(tiny_data_dir, tmp_path):
    # one step at a learning rate of about 4e-15 (warm-up 1e9 steps): the weights stay as initialised
    out = tmp_path / "run"
    result = train(TrainArgs(out=str(out), train=str(tiny_data_dir / "train.tsv"),
                             valid=str(tiny_data_dir / "valid.tsv"), preset="tiny", vocab_size=TINY_VOCAB,
                             max_tokens=1024, max_steps=1, warmup_steps=10**9, valid_interval=1,
                             best_metric="exact_match", seed=1, threads=1, quiet=True))
    assert result.last_metrics["chrf"] < CHRF_UNTRAINED and result.last_metrics["n_decoded"] == 100
    assert len(result.undertrained) == 3, result.undertrained
    warm_up, decodes, loss = result.undertrained
    assert warm_up.startswith("still in warm-up: it stopped at step 1")
    assert decodes.startswith("chrF ") and "exact match 0% (--best-metric exact_match)" in decodes
    assert loss.startswith("the validation loss") and "the loss of a uniform guess" in loss
    # export judges a checkpoint by the same rule, from its train_meta: the trainer's words for its last checkpoint
    from seq2onnx.training.checkpoint import load_checkpoint
    last = load_checkpoint(out / "last.pt")
    verdict = checkpoint_verdict(last["train_meta"], last["config"]["vocab_size"])
    assert verdict.reasons == result.undertrained
    assert verdict.fix == json.loads((out / "summary.json").read_text())["fix"]
    assert checkpoint_verdict({"step": 3, "metrics": {}, "args": {}}, 100) is None     # nothing to judge by


def test_a_trained_package_records_no_verdict_and_info_shows_its_training(tiny_package, capsys):
    source = json.loads((tiny_package / "manifest.json").read_text())["source_checkpoint"]
    assert source["file"] == "best.pt" and source["undertrained"] == []
    assert cli_main(["info", str(tiny_package)]) == 0
    out = capsys.readouterr().out
    meta = source["train_meta"]
    assert f"checkpoint     best.pt (step {meta['step']}, epoch {meta['epoch']})" in out
    assert (f"training       best exact_match {meta['best']['value']:.4g} at step {meta['best']['step']}; "
            f"validation at step {meta['step']}: loss {meta['metrics']['loss']:.3f}, chrF ") in out
    assert "undertrained" not in out


@pytest.mark.parametrize("recorded, message", [
    ("chrF 0.4", "the field source_checkpoint.undertrained should be a list, got 'chrF 0.4'"),
    (["chrF 0.4", 7], r"the field source_checkpoint.undertrained\[1\] should be a string, got 7"),
])
def test_a_recorded_verdict_of_the_wrong_kind_is_refused_in_one_line(tiny_package, tmp_path, capsys, recorded, message):
    from seq2onnx.runtime.errors import ModelPackageError
    from seq2onnx.runtime.package.manifest import read_package
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_package, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["source_checkpoint"]["undertrained"] = recorded
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelPackageError, match=message):
        read_package(pkg)
    assert cli_main(["info", str(pkg)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "source_checkpoint.undertrained" in err


def test_info_shows_a_recorded_verdict_with_its_control_characters_escaped(tiny_package, tmp_path, capsys):
    pkg = tmp_path / "pkg"
    shutil.copytree(tiny_package, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text())
    manifest["source_checkpoint"]["undertrained"] = ["chrF 0.4\x1b[2J on the 8 validation sentences decoded"]
    manifest["source_checkpoint"]["train_meta"]["metrics"]["loss"] = "NaN"      # not a number: shown as "?"
    (pkg / "manifest.json").write_text(json.dumps(manifest))
    assert cli_main(["info", str(pkg)]) == 0
    out = capsys.readouterr().out
    assert "                 - chrF 0.4\\x1b[2J on the 8 validation sentences decoded" in out and "\x1b" not in out
    assert "validation at step" in out and ": loss ?, chrF " in out
