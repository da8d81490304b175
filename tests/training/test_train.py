"""Training at tiny size, for real: learning, the schedule, checkpoints, resume, DDP, data handling."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.fixtures_training import (DE, EN, TINY_LR_FACTOR, TINY_STEPS, TINY_TARGET, TINY_VOCAB, TINY_WARMUP, toy_pairs,
                               write_tsv)
from seq2onnx.runtime.cli.main import main as cli_main
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.training.checkpoint import (FORMAT_VERSION, average_checkpoints, load_checkpoint, save_checkpoint,
                                          step_checkpoints)
from seq2onnx.training.data import BAD_UTF8, EMPTY_SIDE, EXTRA_TAB, NO_TAB, TOO_LONG, BatchStream, Example, \
    SkipCounts, collate, encode_pairs, make_batches, read_parallel, read_tsv
from seq2onnx.training.logs import MetricsLog
from seq2onnx.training.model import Transformer, resolve_init
from seq2onnx.training.numbers import FORMS, TEST_NUMBERS_FILE, number_pair
from seq2onnx.training.optim import build_optimizer, label_smoothed_loss, noam_lr
from seq2onnx.training.tokenizer import special_ids, tokenizer_from_json, train_tokenizer
from seq2onnx.training.train import TrainArgs, train


def records(run_dir: Path, kind: str):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


# --- learning ---------------------------------------------------------------------------------
def test_tiny_run_writes_its_folder_and_keeps_its_best(tiny_run):
    """What the run wrote and kept. That it learned the task is the tiny_run fixture's own check
    (TINY_TARGET); how fast it learns is a benchmark (bench/tiny_learning.py), not a test."""
    for name in ("best.pt", "last.pt", "metrics.jsonl", "tokenizer.json", "config.json"):
        assert (tiny_run / name).is_file(), name
    last = load_checkpoint(tiny_run / "last.pt")["train_meta"]["step"]
    assert last % TINY_STEPS == 0
    assert [p.name for p in step_checkpoints(tiny_run)] == [f"step_{s}.pt" for s in range(last - 400, last + 1, 200)]
    valid = records(tiny_run, "valid")
    assert [r["step"] for r in valid] == list(range(200, last + 1, 200))          # each validation once, resumes too
    best = load_checkpoint(tiny_run / "best.pt")
    assert best["train_meta"]["metrics"]["exact_match"] == max(r["exact_match"] for r in valid) >= TINY_TARGET
    assert best["tokenizer"] == (tiny_run / "tokenizer.json").read_text(encoding="utf-8")
    cfg = ModelConfig.from_dict(best["config"])
    assert cfg == ModelConfig.from_json(str(tiny_run / "config.json"))
    assert cfg.d_model == 64 and cfg.vocab_size <= 128


def test_a_small_training_step_lowers_the_loss_of_its_batch():
    """Learning by construction, not by luck: one Adam step with a small learning rate moves every weight
    against its gradient (Adam's first step is lr * sign(grad)), so the loss of the batch it was computed on
    falls, to first order by lr * sum|grad|. Dropout off: the same function before and after."""
    torch.manual_seed(0)
    pairs = toy_pairs(32, seed=5)
    tok = train_tokenizer([t for p in pairs for t in p], 128)
    cfg = ModelConfig.preset("tiny", vocab_size=tok.get_vocab_size(), dropout=0.0, attention_dropout=0.0,
                             **special_ids(tok))
    examples, _ = encode_pairs(tok, pairs, cfg.eos_id, 64, SkipCounts("train"))
    batch = collate(examples, cfg.pad_id, cfg.bos_id, cfg.eos_id)
    model = Transformer(cfg)

    def loss():
        return label_smoothed_loss(model(batch.src_ids, batch.src_mask, batch.tgt_in), batch.labels, cfg.pad_id,
                                   0.1)[0] / batch.n_tokens

    optimizer, _ = build_optimizer(model, cfg.d_model, warmup_steps=1, lr_factor=1e-3)   # lr 1.25e-4 at step 1
    before = loss()
    before.backward()
    grads = sum(p.grad.abs().sum().item() for p in model.parameters() if p.grad is not None)
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    with torch.no_grad():
        after = loss().item()
    # first order: the loss falls by lr * sum|grad| (Adam's eps = 1e-9 is negligible); half of it is plenty
    assert before.item() - after > 0.5 * lr * grads, (before.item(), after, lr * grads)
def test_lr_schedule_follows_the_paper_formula(tiny_run):
    for step, d, warmup in [(1, 512, 4000), (100, 512, 4000), (4000, 512, 4000), (10_000, 512, 4000), (7, 64, 50)]:
        expected = d ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
        assert noam_lr(step, d, warmup) == pytest.approx(expected, rel=1e-12)
        assert noam_lr(step, d, warmup, factor=2.0) == pytest.approx(2 * expected, rel=1e-12)
    # the optimizer really uses noam_lr(n) at its n-th step
    model = Transformer(ModelConfig.preset("tiny", vocab_size=20))
    optimizer, scheduler = build_optimizer(model, 64, warmup_steps=10, lr_factor=0.5)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for n in range(1, 30):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(noam_lr(n, 64, 10, 0.5), rel=1e-12)
        optimizer.step()
        scheduler.step()
    # and so did the tiny run (its lr factor and warmup), logged at the steps it was used for
    for r in records(tiny_run, "train"):
        assert r["lr"] == pytest.approx(noam_lr(r["step"], 64, TINY_WARMUP, TINY_LR_FACTOR), rel=1e-9)


# --- checkpoints ------------------------------------------------------------------------------
def test_average_of_checkpoints_is_the_mean_of_their_weights(tiny_run, tmp_path):
    paths = step_checkpoints(tiny_run)
    states = [load_checkpoint(p)["model"] for p in paths]
    averaged = average_checkpoints(paths)
    assert "optimizer" not in averaged and averaged["train_meta"]["averaged_from"] == [p.name for p in paths]
    for name, value in averaged["model"].items():
        expected = sum(s[name].double() for s in states) / len(states)
        torch.testing.assert_close(value, expected.float(), rtol=0, atol=1e-7)
    assert not torch.equal(averaged["model"]["encoder_layers.0.ffn.w1.weight"], states[-1]["encoder_layers.0.ffn.w1.weight"])
    # the CLI writes the same, loadable into a model
    out = tmp_path / "avg.pt"
    assert cli_main(["average", str(tiny_run), "--last", "2", "--out", str(out)]) == 0
    ckpt = load_checkpoint(out)
    assert ckpt["train_meta"]["averaged_from"] == [p.name for p in paths[-2:]]
    Transformer(ModelConfig.from_dict(ckpt["config"])).load_state_dict(ckpt["model"])


def test_checkpoint_loading_rejects_foreign_and_future_files(tiny_checkpoint, tmp_path):
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    with pytest.raises(Seq2OnnxError, match="not a seq2onnx checkpoint"):
        load_checkpoint(text)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(Seq2OnnxError, match="not a seq2onnx checkpoint"):
        load_checkpoint(plain)
    future = load_checkpoint(tiny_checkpoint)
    future["format_version"] = FORMAT_VERSION + 1
    save_checkpoint(future, tmp_path / "future.pt")
    with pytest.raises(Seq2OnnxError, match=f"format_version {FORMAT_VERSION + 1}.*reads version {FORMAT_VERSION}"):
        load_checkpoint(tmp_path / "future.pt")
    with pytest.raises(Seq2OnnxError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["future.pt", "notes.pt", "plain.pt"]   # no temp left


# --- kill and resume --------------------------------------------------------------------------
def _train_cmd(data_dir: Path, out: Path, config: Path, *extra: str):
    return ["train", "--train", str(data_dir / "train.tsv"), "--valid", str(data_dir / "valid.tsv"), "--out", str(out),
            "--config", str(config), "--vocab-size", "128", "--max-tokens", "256", "--warmup-steps", "20", "--lr-factor", "0.1",
            "--max-steps", "150", "--valid-interval", "10", "--valid-decode-max", "8", "--keep-last", "2",
            "--best-metric", "loss", "--threads", "1", "--seed", "3", "--quiet", *extra]


# `seq2onnx ARGS` that, when PAUSE=FILE@STEP, stops in the middle of writing FILE at training step STEP (half
# of its bytes in the temp file that would be renamed onto it), prints PAUSED and waits to be killed
TRAIN_DRIVER = textwrap.dedent("""
    import io, os, shutil, sys, time
    import torch
    name, _, step = os.environ.get("PAUSE", "@").partition("@")
    seen = {"step": None}
    def pause_with_half(data, f):
        f.write(data[:len(data) // 2]); f.flush(); os.fsync(f.fileno())
        print("PAUSED", flush=True)
        time.sleep(600)
    real_save, real_copy = torch.save, shutil.copyfile
    def save(obj, f, *args, **kwargs):
        seen["step"] = obj.get("train_meta", {}).get("step") if isinstance(obj, dict) else None
        if name and os.path.basename(f.name).startswith("." + name + ".") and str(seen["step"]) == step:
            buf = io.BytesIO()
            real_save(obj, buf, *args, **kwargs)
            pause_with_half(buf.getvalue(), f)
        return real_save(obj, f, *args, **kwargs)
    def copyfile(src, dst, *args, **kwargs):
        if name and os.path.basename(dst).startswith("." + name + ".") and str(seen["step"]) == step:
            with open(src, "rb") as s, open(dst, "wb") as f:
                pause_with_half(s.read(), f)
        return real_copy(src, dst, *args, **kwargs)
    torch.save, shutil.copyfile = save, copyfile
    from seq2onnx.runtime.cli.main import main
    sys.exit(main(sys.argv[1:]))
""")


def _state(run: Path):
    """(last.pt's step or None, step_N.pt names, best.pt's step or None, temp files)"""
    def step(name):
        return load_checkpoint(run / name)["train_meta"]["step"] if (run / name).exists() else None
    return (step("last.pt"), [p.name for p in step_checkpoints(run)], step("best.pt"),
            sorted(p.name for p in run.iterdir() if p.name.endswith(".tmp")))


@pytest.mark.slow
def test_run_killed_at_five_moments_ends_bit_identical(tiny_data_dir, tmp_path):
    """SIGKILL before the first checkpoint, in the middle of writing last.pt, of step_N.pt (best.pt due too),
    of best.pt, and at a random moment; each time resumed with --resume. The run completes, and its
    weights, optimizer state, checkpoints and metrics equal those of an uninterrupted run (CPU, 1 thread)."""
    seed = int(os.environ.get("SEQ2ONNX_KILL_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    config = tmp_path / "model.json"                         # tiny, with dropout: the RNG state matters
    config.write_text(json.dumps(ModelConfig.preset("tiny", dropout=0.1, attention_dropout=0.1).to_dict()))
    driver = tmp_path / "driver.py"
    driver.write_text(TRAIN_DRIVER, encoding="utf-8")
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    whole = subprocess.run([sys.executable, str(driver), *_train_cmd(tiny_data_dir, tmp_path / "whole", config)],
                           env=env, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr
    valid = [r for r in map(json.loads, (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines())
             if r["kind"] == "valid"]
    improved = [r["step"] for r in valid if r["loss"] == r["best"]]

    def best_at(step):                                       # best.pt's step once `step` was saved
        return max((s for s in improved if s <= step), default=None)
    # The kill moments come from what the uninterrupted run did, not from how well it learns: s1 < s2 are the
    # last two steps up to 100 at which it wrote best.pt (the first validation, step 10, always writes it; at lr
    # factor 0.1 the loss falls at most validations after it), and last.pt is cut at a step `cut` <= s1.
    writes = [s for s in improved if s <= 100]
    assert len(writes) >= 2, f"the uninterrupted run never improved after its first validation: {improved}"
    s1, s2 = writes[-2:]
    cut = min(40, s1)

    def steps_before(step):                                  # the step_N.pt kept (--keep-last 2) once `step` was saved
        return [f"step_{s}.pt" for s in (step - 10, step) if s >= 10]

    run = tmp_path / "killed"
    cmd = [sys.executable, str(driver), *_train_cmd(tiny_data_dir, run, config)]
    where = f"(SEQ2ONNX_KILL_SEED={seed}, best.pt rewritten at {improved}, cut at {cut}, {s1}, {s2})"

    def start(resume: bool, pause: str = ""):
        return subprocess.Popen(cmd + (["--resume"] if resume else []), env={**env, "PAUSE": pause},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def kill(proc):
        alive = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        err = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()
        assert alive, f"the run ended before it could be killed {where}: {err[-2000:]}"
        return err

    def kill_when_paused(proc):
        line = proc.stdout.readline()
        assert line.strip() == "PAUSED", f"the run did not reach its pause {where}: {line!r}"
        return kill(proc)

    def kill_after(proc, path: Path, delay: float):
        deadline = time.monotonic() + 120
        while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
        return kill(proc)

    # 1: a random moment before the first checkpoint (config.json and tokenizer.json written, no last.pt)
    kill_after(start(False), run / "config.json", rng.uniform(0, 0.02))
    assert _state(run)[0] is None and (run / "tokenizer.json").exists(), where
    # 2: half of last.pt written at step `cut` (the resume starts again from step 0: no checkpoint yet)
    kill_when_paused(start(True, f"last.pt@{cut}"))
    assert _state(run)[:3] == (cut - 10 or None, steps_before(cut - 10), best_at(cut - 10)) and len(_state(run)[3]) == 1, where
    # 3: half of step_{s1}.pt written; last.pt is already at s1 and best.pt, due at s1, is not
    kill_when_paused(start(True, f"step_{s1}.pt@{s1}"))
    last, steps, best, temps = _state(run)
    assert (last, steps, best, len(temps)) == (s1, steps_before(s1 - 10), best_at(s1 - 10), 1), where
    # 4: half of best.pt written at s2 (last.pt and step_{s2}.pt are complete)
    kill_when_paused(start(True, f"best.pt@{s2}"))
    last, steps, best, temps = _state(run)
    assert (last, steps, best, len(temps)) == (s2, steps_before(s2), best_at(s2 - 10), 1), where
    # 5: a random moment after step 110's checkpoint: training, validating or checkpointing
    kill_after(start(True), run / "step_110.pt", rng.uniform(0, 0.3))
    assert 110 <= _state(run)[0] < 150, where

    resumed = subprocess.run(cmd + ["--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    a, b = load_checkpoint(tmp_path / "whole" / "last.pt"), load_checkpoint(run / "last.pt")
    assert a["train_meta"]["step"] == b["train_meta"]["step"] == 150
    assert a["data_state"] == b["data_state"]
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), f"{name} differs after resume {where}"
    for sa, sb in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(sa["exp_avg"], sb["exp_avg"]) and torch.equal(sa["exp_avg_sq"], sb["exp_avg_sq"])
    # the folder is the uninterrupted run's: the same checkpoints with the same weights, no temp files
    assert sorted(p.name for p in run.iterdir()) == sorted(p.name for p in (tmp_path / "whole").iterdir())
    for name in ["best.pt"] + [p.name for p in step_checkpoints(run)]:
        wa, wb = load_checkpoint(tmp_path / "whole" / name), load_checkpoint(run / name)
        assert wa["train_meta"]["step"] == wb["train_meta"]["step"], name
        assert all(torch.equal(wa["model"][k], wb["model"][k]) for k in wa["model"]), f"{name} differs {where}"
    # metrics.jsonl holds each step once, with the same figures (but for the speed)
    def records(d):
        return [{k: v for k, v in r.items() if k != "tokens_per_s"}
                for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())]
    assert records(run) == records(tmp_path / "whole")


def test_torn_metrics_line_is_dropped_on_resume(tmp_path):
    """A kill in the middle of appending to metrics.jsonl leaves a line without its newline: reading skips
    it, and the resume's truncation removes it before new records are appended."""
    from seq2onnx.training.logs import MetricsLog
    log = MetricsLog(tmp_path / "metrics.jsonl")
    log.append({"kind": "train", "step": 1, "loss": 2.0})
    log.append({"kind": "valid", "step": 2, "loss": 1.5})
    with open(log.path, "a", encoding="utf-8") as f:
        f.write('{"kind": "train", "st')
    assert log.read() == [{"kind": "train", "step": 1, "loss": 2.0}, {"kind": "valid", "step": 2, "loss": 1.5}]
    log.truncate_after(1)
    log.append({"kind": "train", "step": 2, "loss": 1.9})
    assert log.path.read_text(encoding="utf-8").splitlines() == [
        '{"kind": "train", "loss": 2.0, "step": 1}', '{"kind": "train", "loss": 1.9, "step": 2}']
    log.path.write_text('{"kind": "train", "step": 1}\nnot json\n{"kind": "train", "step": 2}\n', encoding="utf-8")
    with pytest.raises(Seq2OnnxError, match=r"metrics.jsonl line 2 is not JSON .*: delete that line and run again"):
        log.read()


# --- distributed data-parallel ----------------------------------------------------------------
DDP_WORKER = textwrap.dedent("""
    import os, sys, torch
    from seq2onnx.training.train import TrainArgs, train
    data, out, weights = sys.argv[1:4]
    result = train(TrainArgs(out=out, train=os.path.join(data, "train.tsv"), valid=os.path.join(data, "valid.tsv"),
                             preset="tiny", vocab_size=128, max_tokens=256, warmup_steps=10, max_steps=12,
                             valid_interval=6, valid_decode_max=4, threads=1, quiet=True, device="cpu"))
    torch.save({"state": result.model.state_dict(), "step": result.step, "world": os.environ["WORLD_SIZE"]},
               os.path.join(weights, "rank" + os.environ["RANK"] + ".pt"))
""")


@pytest.mark.slow
def test_two_process_ddp_keeps_ranks_identical(tiny_data_dir, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text(DDP_WORKER)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(worker), str(tiny_data_dir), str(tmp_path / "run"), str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert r0["world"] == r1["world"] == "2" and r0["step"] == r1["step"] == 12
    torch.manual_seed(1)
    initial = Transformer(ModelConfig.from_json(str(tmp_path / "run" / "config.json"))).state_dict()
    for name, w in r0["state"].items():
        assert torch.equal(w, r1["state"][name]), f"ranks disagree on {name}"
    assert not torch.equal(r0["state"]["decoder_layers.0.ffn.w1.weight"], initial["decoder_layers.0.ffn.w1.weight"])
    saved = load_checkpoint(tmp_path / "run" / "last.pt")
    assert all(torch.equal(saved["model"][n], r0["state"][n]) for n in saved["model"])


@pytest.mark.parametrize("maxi_batch", [0, 3, 100])
def test_batches_hold_every_example_once_within_the_token_bound(maxi_batch):
    examples = [Example(list(range(4, 4 + n % 9 + 1)) + [2], list(range(4, 4 + n % 7 + 1))) for n in range(200)]
    batches = make_batches(examples, max_tokens=64, seed=5, epoch=1, maxi_batch=maxi_batch)
    assert sorted(i for b in batches for i in b) == list(range(200))        # every example once per epoch
    for b in batches:
        width = max(max(len(examples[i].src), len(examples[i].tgt) + 1) for i in b)
        assert width * len(b) <= 64
    assert batches == make_batches(examples, 64, seed=5, epoch=1, maxi_batch=maxi_batch)
    assert batches != make_batches(examples, 64, 5, 2, maxi_batch) != make_batches(examples, 64, 6, 1, maxi_batch)


def test_maxi_batch_spreads_the_copies_of_a_short_pair_over_the_epoch():
    # 40 copies of "two" -> "zwei" among 4,000 longer pairs: sorting the whole epoch by length puts the copies
    # side by side, into one or two batches; sorting pools of a few batches' worth puts them into many
    examples = [Example([5] * (3 + n % 20) + [2], [6] * (2 + n % 15)) for n in range(4000)]
    examples += [Example([4, 2], [4])] * 40
    copies = set(range(4000, 4040))

    def holding(maxi_batch):
        return sum(1 for b in make_batches(examples, 64, seed=1, epoch=1, maxi_batch=maxi_batch) if copies & set(b))

    assert holding(0) <= 2
    assert holding(2) >= 30


def test_batch_stream_shards_ranks_and_resumes_exactly():
    examples = [Example(list(range(4, 4 + n % 9 + 1)) + [2], list(range(4, 4 + n % 7 + 1))) for n in range(200)]
    ids = {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}
    batches = make_batches(examples, max_tokens=64, seed=5, epoch=1)
    ranks = [BatchStream(examples, 64, 5, ids, rank=r, world_size=2) for r in range(2)]
    per_rank = len(ranks[0]._batches())
    assert per_rank == len(ranks[1]._batches()) == -(-len(batches) // 2)
    first = [ranks[r].next().src_ids for r in range(2)]
    assert not torch.equal(first[0][:1], first[1][:1]) or first[0].shape != first[1].shape

    stream = BatchStream(examples, 64, 5, ids)
    for _ in range(len(batches) + 3):                                        # into the second epoch
        stream.next()
    state = stream.state_dict()
    assert state == {"epoch": 2, "index": 3}
    expected = [stream.next().labels for _ in range(5)]
    again = BatchStream(examples, 64, 5, ids)
    again.load_state_dict(state)
    assert all(torch.equal(x, again.next().labels) for x in expected)


# --- data reading -----------------------------------------------------------------------------
def test_bad_lines_are_skipped_and_counted(tmp_path):
    tsv = tmp_path / "mixed.tsv"
    tsv.write_bytes(b"one two\teins zwei\n"            # ok
                    b"no tab here\n"                    # no tab
                    b"a\tb\tc\n"                        # two tabs
                    b" \tleer\n"                        # empty source
                    b"\n"                               # empty line: no tab
                    b"caf\xe9\tkaffee\n"                # latin-1, not UTF-8
                    b"three\tdrei\r\n"                  # CRLF is fine
                    + ("long " * 40).encode() + b"\tlang\n")
    pairs, counts = read_tsv(str(tsv))
    assert pairs[:2] == [("one two", "eins zwei"), ("three", "drei")] and len(pairs) == 3
    assert counts.read == 8 and counts.skipped == {NO_TAB: 2, EXTRA_TAB: 1, EMPTY_SIDE: 1, BAD_UTF8: 1}
    tok = train_tokenizer([s for p in pairs for s in p], 60)
    examples, kept = encode_pairs(tok, pairs, special_ids(tok)["eos_id"], max_len=20, counts=counts)
    assert len(examples) == 2 and kept == pairs[:2] and counts.skipped[TOO_LONG] == 1
    assert counts.kept == 2
    assert counts.report() == [f"mixed.tsv: skipped {n} of 8 lines: {reason}" for reason, n in
                               [(NO_TAB, 2), (EXTRA_TAB, 1), (EMPTY_SIDE, 1), (BAD_UTF8, 1), (TOO_LONG, 1)]]

    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_bytes(b"one\n\ntwo\nbad \xff\n")
    tgt.write_bytes(b"eins\nnull\nzwei\nschlecht\n")
    pairs, counts = read_parallel(str(src), str(tgt))
    assert pairs == [("one", "eins"), ("two", "zwei")] and counts.skipped == {EMPTY_SIDE: 1, BAD_UTF8: 1}
    tgt.write_bytes(b"eins\n")
    with pytest.raises(Seq2OnnxError, match="has 4 lines but .* has 1"):
        read_parallel(str(src), str(tgt))


def test_training_reports_skipped_lines(tiny_data_dir, tmp_path, capsys):
    lines = (tiny_data_dir / "train.tsv").read_text(encoding="utf-8").splitlines()[:300]
    train_tsv = tmp_path / "train.tsv"
    train_tsv.write_text("\n".join(lines + ["no tab", "x\ty\tz", "x\ty\tz"]) + "\n", encoding="utf-8")
    assert cli_main(["train", "--train", str(train_tsv), "--valid", str(tiny_data_dir / "valid.tsv"),
                     "--out", str(tmp_path / "run"), "--preset", "tiny", "--max-steps", "2", "--max-tokens", "512",
                     "--vocab-size", "100", "--valid-decode-max", "2", "--threads", "1", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "train.tsv: skipped 1 of 303 lines: no tab" in err
    assert "train.tsv: skipped 2 of 303 lines: more than one tab" in err


# --- seq2onnx data numbers --------------------------------------------------------------------
def test_numbers_data_splits_are_disjoint_and_train_has_every_small_number(tmp_path):
    out = tmp_path / "numbers"
    args = ["data", "numbers", "--out", str(out), "--size", "2500", "--valid-size", "90", "--test-size", "90",
            "--seed", "4"]
    assert cli_main(args) == 0
    split = {}
    for name in ("train", "valid", "test"):
        rows = (out / f"{name}.tsv").read_text(encoding="utf-8").splitlines()
        assert all(row.count("\t") == 1 for row in rows)
        split[name] = [row.split("\t")[0] for row in rows]
    assert [len(split[n]) for n in ("train", "valid", "test")] == [2500, 90, 90]
    sets = {n: set(v) for n, v in split.items()}
    assert all(len(sets[n]) == len(split[n]) for n in sets)                 # no number twice in a split
    assert not sets["train"] & sets["valid"] and not sets["train"] & sets["test"] and not sets["valid"] & sets["test"]
    small = {number_pair(n).split("\t")[0] for n in range(1000)}
    assert small <= sets["train"] and not small & (sets["valid"] | sets["test"])
    assert "four hundred and ninety-five thousand, five hundred and seventeen\t" \
           "vierhundertfünfundneunzigtausendfünfhundertsiebzehn" == number_pair(495517)
    # every band of large numbers is sampled: 4, 5 and 6 digits ("thousand" with 1, 2, 3-digit heads)
    heads = [s.split(" thousand")[0] for s in sets["train"] if " thousand" in s]
    assert any(h in EN[1:] for h in heads) and any("hundred" in h for h in heads)
    assert any(h not in EN and "hundred" not in h for h in heads)
    # deterministic by seed, and the seed matters
    again = tmp_path / "again"
    assert cli_main([*args[:3], str(again), *args[4:]]) == 0
    assert (again / "train.tsv").read_bytes() == (out / "train.tsv").read_bytes()
    other = tmp_path / "other"
    assert cli_main([*args[:3], str(other), *args[4:-1], "5"]) == 0
    assert (other / "valid.tsv").read_bytes() != (out / "valid.tsv").read_bytes()
    assert DE[4] in (out / "train.tsv").read_text(encoding="utf-8")


def test_numbers_data_repeat_small_weights_the_short_inputs(tmp_path):
    out = tmp_path / "numbers"
    assert cli_main(["data", "numbers", "--out", str(out), "--size", "5000", "--repeat-small", "3",
                     "--valid-size", "30", "--test-size", "30", "--seed", "2"]) == 0
    train = [row.split("\t")[0] for row in (out / "train.tsv").read_text(encoding="utf-8").splitlines()]
    counts = Counter(train)
    small = {number_pair(n).split("\t")[0] for n in range(1000)}
    assert len(train) == 5000
    assert {counts[s] for s in small} == {3}                                # every number below 1000, 3 times
    assert len(train) - 3 * len(small) == 2000 and all(counts[s] == 1 for s in counts if s not in small)
    held_out = set((out / "valid.tsv").read_text(encoding="utf-8").split("\n")) | \
        set((out / "test.tsv").read_text(encoding="utf-8").split("\n"))
    assert not {row.split("\t")[0] for row in held_out if row} & set(train)


def test_numbers_forms_are_the_ways_people_type_a_number():
    expected = {"canonical": "one thousand, two hundred and thirty-four",
                "Title Case": "One Thousand, Two Hundred And Thirty-Four",
                "UPPER CASE": "ONE THOUSAND, TWO HUNDRED AND THIRTY-FOUR",
                "space for hyphen": "one thousand, two hundred and thirty four",
                "without and": "one thousand, two hundred thirty-four",
                "without comma": "one thousand two hundred and thirty-four",
                "a hundred / a thousand": "a thousand, two hundred and thirty-four",
                "digits": "1234", "digits, separators": "1,234"}
    assert {name: render(1234) for name, render in FORMS.items()} == expected
    assert FORMS["a hundred / a thousand"](100) == "a hundred" and FORMS["a hundred / a thousand"](42) == "forty-two"
    assert FORMS["digits, separators"](495517) == "495,517" and FORMS["digits"](0) == "0"


def test_numbers_data_mixed_forms_in_train_and_valid_canonical_test(tmp_path):
    out = tmp_path / "numbers"
    assert cli_main(["data", "numbers", "--out", str(out), "--size", "4000", "--repeat-small", "2", "--forms", "mixed",
                     "--valid-size", "300", "--test-size", "30", "--seed", "3"]) == 0
    rows = {n: [r.split("\t") for r in (out / f"{n}.tsv").read_text(encoding="utf-8").splitlines()]
            for n in ("train", "valid", "test")}
    test_numbers = [int(n) for n in (out / TEST_NUMBERS_FILE).read_text().split()]
    assert [number_pair(n) for n in test_numbers] == ["\t".join(r) for r in rows["test"]]   # test: canonical
    for split in ("train", "valid"):
        sources = [s for s, _ in rows[split]]
        assert any(s.isdigit() for s in sources) and any("," in s and s.replace(",", "").isdigit() for s in sources)
        assert any(s.isupper() for s in sources) and any(s.istitle() for s in sources)
        assert any(" and " in s for s in sources) and any("thousand" in s and " and " not in s for s in sources)
    # the target is always num2words' German of the number the source says
    for source, target in rows["train"][:300]:
        if source.replace(",", "").isdigit():
            assert target == number_pair(int(source.replace(",", ""))).split("\t")[1]
    again = tmp_path / "again"
    assert cli_main(["data", "numbers", "--out", str(again), "--size", "4000", "--repeat-small", "2", "--forms",
                     "mixed", "--valid-size", "300", "--test-size", "30", "--seed", "3"]) == 0
    assert (again / "train.tsv").read_bytes() == (out / "train.tsv").read_bytes()       # deterministic by seed


def test_tokenizer_options_lowercase_and_split_digits_and_punctuation():
    texts = ["Forty-Two", "forty two", "1,234", "567,890", "zweiundvierzig", "eintausendzweihundertvierunddreißig"] * 20
    plain = train_tokenizer(texts, 60)
    tok = train_tokenizer(texts, 60, lowercase=True, split_digits=True, split_punctuation=True)
    assert tok.encode("FORTY-TWO").ids == tok.encode("Forty-Two").ids == tok.encode("forty-two").ids
    assert plain.encode("FORTY-TWO").ids != plain.encode("forty-two").ids
    assert [t for t in tok.encode("1,234").tokens if t != "▁"] == ["1", ",", "2", "3", "4"]
    assert [t for t in tok.encode("495517").tokens if t != "▁"] == list("495517")
    assert "-" in tok.encode("forty-two").tokens
    for text in ("forty-two", "1,234", "zweiundvierzig"):
        assert tok.decode(tok.encode(text).ids) == text                       # decoding restores the text
    # the options travel in tokenizer.json: the runtime's reader applies them too
    assert tokenizer_from_json(tok.to_str()).encode("Forty-Two").ids == tok.encode("forty-two").ids
    grouped = train_tokenizer(texts, 60, split_digits=True, group_digits=True)
    assert grouped.encode("1234").ids == grouped.encode("1,234").ids != tok.encode("1234").ids
    assert grouped.normalizer.normalize_str("1234567 or 42, 999 and 1000") == "1,234,567 or 42, 999 and 1,000"


# --- validation cadence, early stopping (the budget and the progress bar: test_budget.py) ---------
def test_validation_cadence_follows_the_budget():
    from seq2onnx.training.train_args import DEFAULT_VALID_INTERVAL, TrainArgs
    assert TrainArgs(out="r").validation_every() == (DEFAULT_VALID_INTERVAL, None)
    assert TrainArgs(out="r", max_minutes=20).validation_every() == (None, 2.0)   # ten validations in a budget
    assert TrainArgs(out="r", max_minutes=20, valid_interval=300).validation_every() == (300, None)
    assert TrainArgs(out="r", valid_minutes=5).validation_every() == (None, 5)
    with pytest.raises(Seq2OnnxError, match="both --valid-interval and --valid-minutes"):
        TrainArgs(out="r", train="t", valid="v", valid_interval=3, valid_minutes=1).check()


def test_valid_minutes_validates_by_the_clock(tiny_data_dir, tmp_path):
    from seq2onnx.training.train import TrainArgs, train
    out = tmp_path / "run"
    # the first step is past a 1e-9-minute interval: a validation at step 1; later ones are spaced out so that
    # validation takes at most its share of the time (training/budget.py; how many depends on the machine's
    # speed), and the last step is validated at the end
    train(TrainArgs(out=str(out), train=str(tiny_data_dir / "train.tsv"), valid=str(tiny_data_dir / "valid.tsv"),
                    preset="tiny", vocab_size=TINY_VOCAB, max_tokens=512, max_steps=6, valid_minutes=1e-9,
                    valid_decode_max=0, best_metric="loss", keep_last=0, threads=1, quiet=True))
    records = MetricsLog(out / "metrics.jsonl").read()
    steps = [r["step"] for r in records if r["kind"] == "valid"]
    assert steps[0] == 1 and steps[-1] == 6 and steps == sorted(set(steps))
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"    # losses only: no scores to draw


def test_patience_stops_a_run_that_no_longer_improves(tiny_data_dir, tmp_path, capsys):
    from seq2onnx.training.train import TrainArgs, train
    # lr 0: the weights never change, so the validation loss never improves after the first validation
    args = TrainArgs(out=str(tmp_path / "run"), train=str(tiny_data_dir / "train.tsv"),
                     valid=str(tiny_data_dir / "valid.tsv"), preset="tiny", vocab_size=TINY_VOCAB, max_tokens=512,
                     lr_factor=0.0, max_steps=100, valid_interval=5, valid_decode_max=0, best_metric="loss",
                     patience=2, keep_last=0, threads=1)
    result = train(args)
    assert result.step == 15 and result.best["step"] == 5
    assert "early stop at step 15: loss has not improved in 2 validations (--patience)" in capsys.readouterr().err
    # resumed, it stops again at once: the count of validations without improvement is in the checkpoint
    assert train(dataclasses.replace(args, resume=True, max_steps=200)).step == 15


# --- real text: the system's gettext catalogs -----------------------------------------------------
def test_gettext_data_is_a_disjoint_split_of_real_catalogs(tmp_path, capsys):
    from seq2onnx.runtime.cli.main import main as cli_main
    from seq2onnx.training.gettext_data import catalog_files
    if not catalog_files("de"):
        pytest.skip("no German gettext catalogs under /usr/share/locale on this machine")
    assert cli_main(["data", "gettext", "--out", str(tmp_path)]) == 0
    splits = {s: read_tsv(str(tmp_path / f"{s}.tsv"))[0] for s in ("train", "valid", "test")}
    sources = {s: {src for src, _ in pairs} for s, pairs in splits.items()}
    assert len(splits["train"]) > 1000 and len(splits["valid"]) > 30 and len(splits["test"]) > 30
    assert not sources["train"] & sources["test"] and not sources["train"] & sources["valid"]
    assert not sources["valid"] & sources["test"]
    assert "wrote train " in capsys.readouterr().err


def test_gettext_data_skips_an_unreadable_catalog_and_names_it(tmp_path, capsys):
    from seq2onnx.runtime.cli.main import main as cli_main
    locale = tmp_path / "locale" / "xx" / "LC_MESSAGES"
    locale.mkdir(parents=True)
    (locale / "broken.mo").write_bytes(b"not a catalog at all")
    out = tmp_path / "new" / "out"                  # a missing --out is created, as --plot-attention's is
    assert cli_main(["data", "gettext", "--lang", "xx", "--locale-dir", str(tmp_path / "locale"),
                     "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "skipped an unreadable catalog: broken.mo" in err
    assert all((out / f"{s}.tsv").read_text() == "" for s in ("train", "valid", "test"))
    assert cli_main(["data", "gettext", "--lang", "yy", "--locale-dir", str(tmp_path / "locale"),
                     "--out", str(out)]) == 2
    assert "no gettext catalogs for language 'yy'" in capsys.readouterr().err


def test_label_smoothed_loss_is_torch_cross_entropy_with_label_smoothing():
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, requires_grad=True)
    labels = torch.randint(1, 11, (3, 5), generator=g)
    labels[0, 3:] = 0                                            # pad id 0
    loss, nll = label_smoothed_loss(logits, labels, pad_id=0, smoothing=0.1)
    flat, flat_labels = logits.reshape(-1, 11), labels.reshape(-1)
    want = F.cross_entropy(flat, flat_labels, ignore_index=0, label_smoothing=0.1, reduction="sum")
    want_nll = F.cross_entropy(flat, flat_labels, ignore_index=0, reduction="sum")
    torch.testing.assert_close(loss, want)
    torch.testing.assert_close(nll, want_nll.detach())
    grad, = torch.autograd.grad(loss, logits)
    want_grad, = torch.autograd.grad(want, logits)
    torch.testing.assert_close(grad, want_grad)


def test_initialisations_draw_the_spreads_docs_training_names():
    cfg = ModelConfig.preset("small", vocab_size=1000, pad_id=0)
    xavier_ffn = (6 / (128 + 512)) ** 0.5 / 3 ** 0.5          # the std of Xavier-uniform for a 128 x 512 matrix
    want = {"normal-unit": (0.02, 128 ** -0.5), "xavier": (xavier_ffn, 128 ** -0.5), "normal": (0.02, 0.02),
            "xavier-normal": (xavier_ffn, 0.02)}
    for init, (matrix_std, embedding_std) in want.items():
        torch.manual_seed(0)
        model = Transformer(cfg, init=init)
        w1, emb = model.encoder_layers[0].ffn.w1, model.src_embed.weight
        assert abs(w1.weight.std().item() - matrix_std) < 0.03 * matrix_std, init
        assert abs(emb[1:].std().item() - embedding_std) < 0.03 * embedding_std, init
        assert not emb[0].any() and not w1.bias.any()                       # pad row and biases 0
        assert model.output_projection.weight is emb                        # still tied
    # "auto" (the default): Marian's N(0, 0.02) from d_model 128 up, unit embeddings below
    assert resolve_init("auto", 128) == "normal" and resolve_init("auto", 64) == "normal-unit"
    assert TrainArgs(out="r", train="t", valid="v").init == "auto"
    torch.manual_seed(0)
    assert abs(Transformer(cfg).src_embed.weight[1:].std().item() - 0.02) < 0.03 * 0.02
    tiny = ModelConfig.preset("tiny", vocab_size=1000, pad_id=0)
    assert abs(Transformer(tiny).src_embed.weight[1:].std().item() - 64 ** -0.5) < 0.03 * 64 ** -0.5
    with pytest.raises(ValueError, match="unknown init 'kaiming'"):
        Transformer(cfg, init="kaiming")
    with pytest.raises(Seq2OnnxError, match="unknown --init 'kaiming'"):
        TrainArgs(out="r", train="t", valid="v", init="kaiming").check()


def test_numbers_data_repeat_below_20_weights_the_words_of_their_own(tmp_path):
    out = tmp_path / "numbers"
    assert cli_main(["data", "numbers", "--out", str(out), "--size", "5000", "--repeat-small", "3",
                     "--repeat-below-20", "10", "--valid-size", "30", "--test-size", "30", "--seed", "2"]) == 0
    counts = Counter(row.split("\t")[0] for row in (out / "train.tsv").read_text(encoding="utf-8").splitlines())
    assert sum(counts.values()) == 5000
    assert {counts[number_pair(n).split("\t")[0]] for n in range(20)} == {10}
    assert {counts[number_pair(n).split("\t")[0]] for n in range(20, 1000)} == {3}
    assert cli_main(["data", "numbers", "--out", str(tmp_path / "x"), "--repeat-small", "3",
                     "--repeat-below-20", "2"]) == 2
