"""A newcomer's short training run: what validation may cost under --max-minutes, which checkpoint is
best when scores tie, the progress bar, the end-of-run verdict on an undertrained model, and curves.png.

Every check is decided by construction or on given numbers: the clock's arithmetic on simulated times, the
verdict on stated metrics, the selection rule on stated records. The real runs here assert only what the code
guarantees whatever the tiny model learned and however fast the machine is."""
from __future__ import annotations

import io
import json
import math

import pytest
import torch

from tests.figure_checks import assert_text_inside
from tests.fixtures_training import TINY_VOCAB, toy_pairs
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.training.budget import (DECODE_CHUNK, DECODE_TARGET, FIRST_CHUNK, VALID_SHARE, ValidationClock,
                                      next_chunk_fits)
from seq2onnx.training.logs import MetricsLog, Progress, curves_figure
from seq2onnx.training.report import BLEU_UNTRAINED, CHRF_UNTRAINED, LOSS_MOVED, stopped_by, undertrained
from seq2onnx.training.train import TrainArgs, improves, train


def tiny_args(data_dir, out, **kw) -> TrainArgs:
    base = dict(out=str(out), train=str(data_dir / "train.tsv"), valid=str(data_dir / "valid.tsv"), preset="tiny",
                vocab_size=TINY_VOCAB, max_tokens=512, threads=1, keep_last=0, quiet=True)
    return TrainArgs(**{**base, **kw})


# --- the validation budget ---------------------------------------------------------------------
def test_next_chunk_fits_at_the_pace_so_far():
    assert next_chunk_fits(0, 32, 0.0, 0.0)                # nothing measured: one chunk always
    assert next_chunk_fits(32, 32, 4.0, 8.0)               # 64 sentences at 0.125 s each: 8 s, within 8 s
    assert not next_chunk_fits(32, 32, 4.1, 8.0)           # 8.2 s
    assert next_chunk_fits(64, 4, 6.0, 6.375)              # a short last chunk: 68 * 6 / 64 = 6.375 s


def simulate(clock: ValidationClock, step_s: float, valid_s) -> list:
    """The trainer's loop on a simulated clock: steps of `step_s` seconds while before clock.train_until(), a
    validation (lasting valid_s(k) for the k-th) whenever one is due, and the last one after the loop unless
    the last step was just validated -> [(began, ended)] of each validation."""
    now, ran, just_validated = clock.start, [], False

    def validate():
        nonlocal now
        began, now = now, now + valid_s(len(ran))
        clock.record(began, now)
        ran.append((began, now))
    while now < clock.train_until():
        now += step_s
        just_validated = clock.due(now)
        if just_validated:
            validate()
    if not just_validated:
        validate()
    return ran


def test_the_ten_promised_validations_happen_on_the_grid_within_the_budget():
    # a newcomer's CPU run: --max-minutes 8, 10 s a step (49 steps), validations that fit in their share (9 s)
    clock = ValidationClock(start=100.0, interval=48.0, end=100.0 + 480)
    ran = simulate(clock, step_s=10.0, valid_s=lambda k: 9.0)
    assert clock.planned == 10 and len(ran) == clock.count == 10 and clock.spaced == 0
    # the k-th starts at the first step after the grid point start + 48 k: a validation does not push the next
    for k, (began, _) in enumerate(ran[:-1], 1):
        assert 100.0 + 48 * k <= began < 100.0 + 48 * k + 10.0
    assert ran[-1][1] <= 100.0 + 480 + 10.0                # stopped in time for the last one (one step over at most)
    assert clock.spent == 90.0 and clock.spent <= VALID_SHARE * 480


def test_validations_that_cost_too_much_are_spaced_out_to_their_share():
    # each validation takes 20 s, more than 20% of the 48 s between grid points: they are put off so that, from
    # the second on, validation holds at most VALID_SHARE of the time since the start (the last one, at the end,
    # always runs: the run's final checkpoint)
    clock = ValidationClock(start=0.0, interval=48.0, end=480.0)
    ran = simulate(clock, step_s=1.0, valid_s=lambda k: 20.0)
    assert clock.spaced > 0 and len(ran) < clock.planned
    spent = 0.0
    for k, (began, ended) in enumerate(ran[:-1]):
        spent += ended - began
        if k:
            assert spent <= VALID_SHARE * ended + 1e-9, (k, spent, ended)
    assert [round(b) for b, _ in ran[:-1]] == [48, 200, 300, 400]     # (20 k) / 0.2 after the first
    assert ran[-1][1] <= 480.0 + 1.0


def test_a_late_validation_takes_the_next_grid_point_after_it():
    clock = ValidationClock(start=0.0, interval=10.0)       # --valid-minutes alone: no deadline
    assert clock.planned is None and clock.train_until() is None
    assert not clock.due(9.99) and clock.due(10.0)
    clock.record(25.0, 26.0)                                # a slow step: it ran late, past the grid point 20
    assert clock.next_at == 30.0
    # the decode of a validation may take DECODE_TARGET of the share, less what the loss took
    assert clock.decode_allowance(0.5) == pytest.approx(DECODE_TARGET * VALID_SHARE * 10.0 - 0.5)


def test_the_first_validation_on_the_clock_fixes_how_many_sentences_every_one_decodes():
    """Real greedy decodes of an untrained tiny model (its outputs do not matter, only how many are made):
    no time at all still decodes the first chunk; unlimited time decodes everything given."""
    from seq2onnx.training.evaluate import greedy_translations_within
    from seq2onnx.training.model import Transformer
    from seq2onnx.training.tokenizer import encode_source, special_ids, train_tokenizer
    pairs = toy_pairs(2 * DECODE_CHUNK + 5, seed=7)
    tok = train_tokenizer([t for p in pairs for t in p], 128)
    cfg = ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), **special_ids(tok))
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    sources = [encode_source(tok, s, cfg.eos_id) for s, _ in pairs]
    seen = []
    assert len(greedy_translations_within(model, tok, sources, 12, 0.0, seen.append)) == FIRST_CHUNK
    assert seen[-1] == FIRST_CHUNK
    assert len(greedy_translations_within(model, tok, sources, 12, math.inf)) == len(sources)


def test_a_run_on_the_clock_keeps_one_decode_count_and_reports_its_validations(tiny_data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny_args(tiny_data_dir, out, max_minutes=0.05, valid_decode_max=40, quiet=False))
    valid = [r for r in MetricsLog(out / "metrics.jsonl").read() if r["kind"] == "valid"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["validations"]["count"] == len(valid) >= 1 and summary["validations"]["planned"] == 10
    # the first validation picks a count (whole chunks, or --valid-decode-max) that every later one keeps
    n = valid[0]["n_decoded"]
    assert n in (FIRST_CHUNK, FIRST_CHUNK + DECODE_CHUNK, 40)
    assert {r["n_decoded"] for r in valid} == {n} and summary["valid_decoded"] == n
    err = capsys.readouterr().err
    assert "validated once" in err if len(valid) == 1 else f"validated {len(valid)} times" in err


# --- which checkpoint is best ----------------------------------------------------------------
def test_ties_in_the_best_metric_go_to_the_lower_validation_loss():
    best = {"value": 0.0, "loss": 7.0}
    assert improves("bleu", {"bleu": 0.0, "loss": 6.5}, best)          # BLEU 0 again, loss lower: a better model
    assert not improves("bleu", {"bleu": 0.0, "loss": 7.0}, best)
    assert not improves("bleu", {"bleu": 0.0, "loss": 7.5}, best)
    assert improves("bleu", {"bleu": 0.1, "loss": 9.0}, best)           # the metric first, whatever the loss
    assert not improves("bleu", {"bleu": 0.0, "loss": 1.0}, {"value": 0.1, "loss": 7.0})
    assert improves("exact_match", {"exact_match": 0.5, "loss": 2.0}, {"value": 0.5, "loss": 2.5})
    assert improves("loss", {"loss": 2.0}, {"value": 2.5, "loss": 2.5})
    assert not improves("loss", {"loss": 2.5}, {"value": 2.5, "loss": 2.5})
    assert improves("chrf", {"chrf": 1.0, "loss": 9.0}, {"value": None, "loss": None})   # the first validation
    assert not improves("bleu", {"bleu": 0.0, "loss": 1.0}, {"value": 0.0})   # a checkpoint from before: no loss


def test_best_pt_is_the_validation_the_rule_picks(tiny_data_dir, tmp_path):
    """Whatever the tiny model learns in 20 steps (BLEU often stays 0 there), best.pt holds the step that
    `improves` picks from the run's own validation records."""
    from seq2onnx.training.checkpoint import load_checkpoint
    out = tmp_path / "run"
    result = train(tiny_args(tiny_data_dir, out, max_steps=20, valid_interval=5, valid_decode_max=8,
                             warmup_steps=10))
    best = {"value": None, "loss": None, "step": None}
    for r in (r for r in MetricsLog(out / "metrics.jsonl").read() if r["kind"] == "valid"):
        if improves("bleu", r, best):
            best = {"value": r["bleu"], "loss": r["loss"], "step": r["step"]}
    assert load_checkpoint(out / "best.pt")["train_meta"]["step"] == best["step"] == result.best["step"]
    assert json.loads((out / "summary.json").read_text())["best"]["step"] == best["step"]


# --- the end of a run ------------------------------------------------------------------------
def test_an_eight_minute_run_in_warm_up_is_called_undertrained_with_each_reason_and_the_flags():
    v = undertrained(step=49, warmup_steps=4000, stopped_by="--max-minutes", stop_value=8, vocab_size=8000,
                     metrics={"loss": 8.5, "bleu": 0.0, "chrf": 4.0, "n_decoded": 96}, best_metric="bleu")
    assert len(v.reasons) == 3
    assert "still in warm-up" in v.reasons[0] and "--warmup-steps 4000" in v.reasons[0] and "49/4000 of its peak" in v.reasons[0]
    assert v.reasons[1] == ("chrF 4.0, BLEU 0.0 (--best-metric bleu) on the 96 validation sentences decoded: the "
                            "translations share almost nothing with the references")
    assert f"{math.log(8000):.2f}, the loss of a uniform guess over the 8000 pieces" in v.reasons[2]
    assert "raise --max-minutes 8" in v.fix and "lower --warmup-steps" in v.fix and "made 49" in v.fix
    lines = v.lines()
    assert lines[0].startswith("warning: the model is undertrained") and lines[-1] == f"  fix: {v.fix}"


def test_a_trained_run_gets_no_warning_and_the_thresholds_are_strict():
    uniform = math.log(8000)
    trained = undertrained(5000, 4000, "--max-steps", 5000, 8000,
                           {"loss": 3.0, "bleu": 25.0, "chrf": 45.0, "n_decoded": 500}, "bleu")
    assert trained.reasons == [] and trained.lines() == [] and not trained.undertrained
    edge = undertrained(4000, 4000, "--max-steps", 4000, 8000,
                        {"loss": (1 - LOSS_MOVED) * uniform, "bleu": BLEU_UNTRAINED, "chrf": CHRF_UNTRAINED,
                         "n_decoded": 10}, "bleu")
    assert edge.reasons == []                                   # at the thresholds: not undertrained
    only_loss = undertrained(4000, 4000, "--max-steps", 4000, 8000, {"loss": uniform}, "bleu")   # no decodes
    assert len(only_loss.reasons) == 1 and "0% below" in only_loss.reasons[0]
    assert only_loss.fix == "train longer: raise --max-steps 4000"
    patient = undertrained(10, 4, "--patience", 3, 8000, {"loss": 8.9}, "loss")
    assert patient.fix.startswith("raise --patience 3")


def test_the_flag_that_ended_the_run():
    assert stopped_by(100, 100, None, 8.0) == ("--max-steps", 100)
    assert stopped_by(49, 100_000, None, 8.0) == ("--max-minutes", 8.0)
    assert stopped_by(49, 100_000, None, None) == ("--max-steps", 100_000)
    assert stopped_by(15, 100, 2, None) == ("--patience", 2)


def test_a_run_stopped_in_warm_up_says_so_on_stderr_and_in_its_summary(tiny_data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    result = train(tiny_args(tiny_data_dir, out, max_steps=5, warmup_steps=4000, valid_decode_max=0,
                             best_metric="loss", quiet=False))
    err = capsys.readouterr().err
    assert "warning: the model is undertrained" in err and "still in warm-up: it stopped at step 5" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["undertrained"] == result.undertrained and "still in warm-up" in summary["undertrained"][0]
    assert "raise --max-steps 5" in summary["fix"] and "--warmup-steps" in summary["fix"]
    assert summary["stopped_by"] == "--max-steps" and summary["step"] == 5 and summary["validations"] is None


# --- the progress bar -------------------------------------------------------------------------
def test_the_bar_under_a_budget_counts_its_seconds_with_an_eta_from_step_0():
    bar_out = io.StringIO()
    p = Progress(100_000, 0, quiet=False, start=0.0, end=480.0, file=bar_out)
    assert p.bar.total == 480.0 and p.bar.n == 0
    p.bar.refresh()
    assert "<08:00" in bar_out.getvalue()                  # the time left, before any step: the budget
    p.validating(7, "validating: loss on 1467 pairs", start=True)
    assert "step 7: validating: loss on 1467 pairs" in bar_out.getvalue()
    p.close()


def test_the_bar_shows_the_loss_from_the_first_step_and_counts_steps_without_a_budget():
    bar_out = io.StringIO()
    p = Progress(300, 0, quiet=False, file=bar_out)
    assert p.bar.total == 300
    p.step(1, 8.9, 1.75e-05)
    p.bar.refresh()
    assert p.bar.n == 1 and "loss=8.900" in bar_out.getvalue() and "lr=1.75e-05" in bar_out.getvalue()
    p.close()


def test_the_bar_total_is_where_the_run_stops():
    p = Progress(30, 0, quiet=True, start=0.0, end=50.0)
    assert p.expected_seconds(0, 5.0) == 50.0               # no step yet: the budget
    assert p.expected_seconds(10, 10.0) == 30.0             # 1 s a step: --max-steps 30 comes first, at 30 s
    p.max_steps = 100_000
    assert p.expected_seconds(10, 10.0) == 50.0             # the deadline comes first


def test_without_a_terminal_validation_is_a_plain_line(capsys):
    p = Progress(300, 0, quiet=False)                       # pytest's stderr is no terminal: lines, no bar
    assert p.bar is None
    p.validating(50, "validating: loss on 100 pairs", start=True)
    p.validating(50, "validating: greedy decode 32/100 sentences")       # only the bar shows each chunk
    assert capsys.readouterr().err == "step 50: validating: loss on 100 pairs\n"


# --- curves.png ---------------------------------------------------------------------------------
def records(n_train: int, n_valid: int, decoded: bool = True) -> list:
    out = [{"kind": "train", "step": 10 * (i + 1), "loss": 9.0 - 0.1 * i} for i in range(n_train)]
    for i in range(n_valid):
        r = {"kind": "valid", "step": 25 * (i + 1), "loss": 8.5 - 0.2 * i, "n_decoded": 96}
        if decoded:
            r.update(bleu=0.0, chrf=3.0 + i, exact_match=0.0)
        out.append(r)
    return out


@pytest.mark.parametrize("n_train, n_valid, decoded", [(200, 10, True), (1, 1, True), (2, 2, True), (3, 2, False)])
def test_curves_are_readable_with_many_or_few_points(n_train, n_valid, decoded):
    from matplotlib.lines import Line2D
    fig = curves_figure(records(n_train, n_valid, decoded))
    assert_text_inside(fig)
    axes = fig.get_axes()
    assert len(axes) == (3 if decoded else 1)               # BLEU/chrF and exact match on axes of their own
    for ax in axes:
        assert ax.get_title() and ax.get_ylabel() and ax.get_xlabel() == "step"
    lines = {line.get_label(): line for line in axes[0].get_lines()}
    train_line = next(line for name, line in lines.items() if name.startswith("training"))
    assert len(train_line.get_xdata()) == n_train
    if n_train <= 60:                                       # a line of one or two points still shows: markers
        assert train_line.get_marker() not in (None, "None", "", " ")
    if decoded:
        assert {line.get_label() for line in axes[1].get_lines()} == {"BLEU", "chrF"}
        assert [line.get_label() for line in axes[2].get_lines()] == ["exact match"]
        assert all(isinstance(line, Line2D) for line in axes[2].get_lines())
        assert axes[1].get_ylim()[0] < 0 < axes[1].get_ylim()[1]        # a score of 0 is drawn above the axis


def test_a_real_run_draws_its_curves(tiny_data_dir, tmp_path):
    out = tmp_path / "run"
    train(tiny_args(tiny_data_dir, out, max_steps=6, valid_interval=3, valid_decode_max=4, warmup_steps=10))
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    recs = MetricsLog(out / "metrics.jsonl").read()
    # a validation closes the training-loss window: a point at each validation even before --log-interval
    assert [r["step"] for r in recs if r["kind"] == "train"] == [3, 6]
    assert_text_inside(curves_figure(recs))
