"""The training loop: `train(TrainArgs)` (the CLI `seq2onnx train` is a thin layer over it).

One optimizer step = `accum_steps` batches of about `max_tokens` tokens (per rank), the loss
summed over target tokens and divided by their number. Every `valid_interval` steps (or on the clock;
see `TrainArgs.validation_every` and training/budget.py, which bounds what validation costs): validation,
then last.pt, step_{N}.pt (the newest `keep_last` kept) and best.pt when `best_metric` improved (a tie:
when the validation loss is lower, `improves`). `patience` validations in a row without improvement end
the run early (fairseq's --patience). At the end: curves.png, summary.json and, when the model is
undertrained, a warning saying why and which flag to change (training/report.py).

Resuming (`resume=True`) restores model, optimizer, scheduler, step, RNG states (python, numpy,
torch) and the data position from DIR/last.pt: on CPU, with the same `threads`, a run killed and
resumed ends with exactly the weights of a run never interrupted.

Distributed data-parallel: launched by torchrun (WORLD_SIZE / RANK / LOCAL_RANK in the
environment), gloo on CPU and nccl on CUDA; rank r trains on batches r, r + world, ... and
only rank 0 writes files or validates.
"""
from __future__ import annotations

import random
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist

from seq2onnx.runtime.errors import Seq2OnnxError

from .atomic import copy_atomic
from .budget import ValidationClock
from .checkpoint import make_checkpoint, rotate_step_checkpoints, save_checkpoint, save_step_checkpoint
from .evaluate import greedy_translations, greedy_translations_within, translation_metrics, validation_loss
from .logs import MetricsLog, Progress, plot_curves
from .model import Transformer
from .optim import build_optimizer, label_smoothed_loss
from .report import report_run, stopped_by, undertrained
from .run_setup import DistInfo, RunData, check_run_dir, load_run_data
from .train_args import AMP_DTYPES, BEST_METRICS, TrainArgs


@dataclass
class TrainResult:
    run_dir: Path
    step: int
    epoch: int
    best: Dict[str, Any]                      # {"metric", "value", "step", "loss"}
    last_metrics: Dict[str, float]
    model: Transformer = field(repr=False)    # the trained model (this rank's copy)
    undertrained: List[str] = field(default_factory=list)   # why the model is undertrained (report.py); [] if not


def improves(name: str, metrics: Dict[str, float], best: Dict[str, Any]) -> bool:
    """Does a validation's `metrics` beat `best` ({"value", "loss"} of the best so far) at metric `name`?
    A tie (BLEU 0 against BLEU 0 early on) goes to the lower validation loss, as fairseq and HF Trainer do not
    but should: the first checkpoint must not stay best.pt because nothing could be decoded right yet."""
    old = best.get("value")
    if old is None:
        return True
    new = metrics[name]
    if new != old:
        return BEST_METRICS[name](new, old) == new
    return name != "loss" and best.get("loss") is not None and metrics["loss"] < best["loss"]


def train(args: TrainArgs) -> TrainResult:
    """Train as `args` say; returns where the run is and its final model. Bad input: Seq2OnnxError."""
    args.check()
    dist_info = DistInfo.from_env()
    threads_before = torch.get_num_threads()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = _device(args, dist_info)
    if args.amp != "none" and device.type != "cuda":
        raise Seq2OnnxError(f"--amp {args.amp} needs a CUDA device: drop --amp on CPU")
    started_pg = False
    if dist_info.world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        started_pg = True
    try:
        return _Trainer(args, dist_info, device).run()
    finally:
        if started_pg:
            dist.destroy_process_group()
        torch.set_num_threads(threads_before)


def _device(args: TrainArgs, d: DistInfo) -> torch.device:
    want_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if want_cuda and not torch.cuda.is_available():
        raise Seq2OnnxError("--device cuda but no CUDA device is visible: use --device cpu")
    if want_cuda:
        torch.cuda.set_device(d.local_rank)
        return torch.device("cuda", d.local_rank)
    return torch.device("cpu")


def _rng_state() -> Dict[str, Any]:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(),
            "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _set_rng_state(state: Dict[str, Any]) -> None:
    random.setstate(state["python"])
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _Trainer:
    def __init__(self, args: TrainArgs, dist_info: DistInfo, device: torch.device):
        self.args, self.dist, self.device = args, dist_info, device
        self.is_main = dist_info.rank == 0
        self.run_dir = Path(args.out)
        resume_ckpt = check_run_dir(args)                       # nothing written before the data is read
        dist_info.barrier()                                     # every rank has looked before rank 0 writes
        data: RunData = load_run_data(args, dist_info, resume_ckpt)
        self.data, self.cfg, self.tok = data, data.config, data.tokenizer
        self.max_len = data.max_len

        torch.manual_seed(args.seed)                            # same initial weights on every rank
        random.seed(args.seed)
        np.random.seed(args.seed)
        self.model = Transformer(self.cfg, init=args.init).to(device)
        self.optimizer, self.scheduler = build_optimizer(self.model, self.cfg.d_model, args.warmup_steps,
                                                         args.lr_factor, tuple(args.adam_betas), args.adam_eps)
        self.stream = data.stream
        self.step, self.last_valid_step = 0, -1
        # the train loss logged every log_interval steps averages this window; it is checkpointed so that a
        # resumed run logs the figures of an uninterrupted one
        self.window = {"loss": 0.0, "steps": 0}
        self.best: Dict[str, Any] = {"metric": args.best_metric, "value": None, "step": None, "loss": None}
        self.bad_validations = 0                                # in a row, for --patience
        self.patience_hit = False
        # on the clock: how many validation sentences each validation decodes, fixed by the first (budget.py)
        self.decode_n: Optional[int] = None
        self.clock: Optional[ValidationClock] = None
        self.metrics_log = MetricsLog(self.run_dir / "metrics.jsonl")
        if resume_ckpt is not None:
            self._restore(resume_ckpt)
        else:
            torch.manual_seed(args.seed + dist_info.rank)       # dropout differs per rank
            if args.resume and self.is_main:                    # restarted from step 0: its records go
                self.metrics_log.truncate_after(0)
        self.ddp = None
        if dist_info.world_size > 1:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[device.index] if device.type == "cuda" else None)
        # fp16 needs loss scaling; its scale is not checkpointed and re-adapts within steps after a resume
        self.scaler = torch.amp.GradScaler("cuda", enabled=args.amp == "fp16")

    def _restore(self, ckpt: Dict[str, Any]) -> None:
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.stream.load_state_dict(ckpt["data_state"])
        meta = ckpt["train_meta"]
        self.step = self.last_valid_step = int(meta["step"])
        self.window = dict(meta.get("log_window", self.window))
        self.decode_n = meta.get("valid_decode_n")
        if meta.get("best", {}).get("metric") == self.args.best_metric:
            self.best = dict(meta["best"])
            self.bad_validations = int(meta.get("bad_validations", 0))
        _set_rng_state(ckpt["rng"])
        if self.is_main:
            self.metrics_log.truncate_after(self.step)
            self._finish_interrupted_save(meta)

    def _finish_interrupted_save(self, meta: Dict[str, Any]) -> None:
        """`_save` writes last.pt, then step_N.pt, then best.pt: a kill after last.pt leaves the other two
        behind. last.pt holds what they should: put it in their place, as the uninterrupted run did."""
        last = self.run_dir / "last.pt"
        step_file = self.run_dir / f"step_{self.step}.pt"
        if self.args.keep_last > 0 and not step_file.exists():
            copy_atomic(last, step_file)
            rotate_step_checkpoints(self.run_dir, self.args.keep_last)
        if meta.get("best", {}).get("step") == self.step:
            copy_atomic(last, self.run_dir / "best.pt")

    # --- one optimizer step -------------------------------------------------------------------
    def _train_step(self) -> Tuple[float, int]:
        """Run accum_steps batches and one update -> (loss per token, target tokens) of this rank."""
        args, model = self.args, self.ddp or self.model
        model.train()
        batches = [self.stream.next().to(self.device) for _ in range(args.accum_steps)]
        n_tokens = sum(b.n_tokens for b in batches)
        total = 0.0
        for i, b in enumerate(batches):
            sync = self.ddp is None or i == len(batches) - 1
            with (nullcontext() if sync else self.ddp.no_sync()):
                with torch.autocast("cuda", dtype=AMP_DTYPES[args.amp]) if args.amp != "none" else nullcontext():
                    logits = model(b.src_ids, b.src_mask, b.tgt_in)               # [B, T, V]
                    loss, _ = label_smoothed_loss(logits, b.labels, self.cfg.pad_id, args.label_smoothing)
                self.scaler.scale(loss / n_tokens).backward()
            total += loss.item()
        if args.clip_norm > 0:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), args.clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.step += 1
        return total / n_tokens, n_tokens

    # --- validation and checkpoints ----------------------------------------------------------
    def _validate(self, progress: Progress) -> Dict[str, float]:
        args, data, step = self.args, self.data, self.step
        began = time.monotonic()
        progress.validating(step, f"validating: loss on {len(data.valid_examples)} pairs", start=True)
        metrics = validation_loss(self.model, data.valid_examples, args.max_tokens, args.label_smoothing)
        n = min(args.valid_decode_max, len(data.valid_examples))
        if self.decode_n is not None:
            n = min(n, self.decode_n)
        sources = [e.src for e in data.valid_examples[:n]]

        def shown(done: int) -> None:
            progress.validating(step, f"validating: greedy decode {done}/{n} sentences")
        if n > 0 and self.clock is not None and self.decode_n is None:    # the first validation on the clock
            allowance = self.clock.decode_allowance(time.monotonic() - began)
            hyps = greedy_translations_within(self.model, self.tok, sources, self.max_len, allowance, shown)
            self.decode_n = len(hyps)
            if len(hyps) < n:
                progress.message(f"validation decodes {len(hyps)} of {n} sentences from now on: more would take "
                                 f"over {self.clock.share:.0%} of the {self.clock.interval:.0f} s between validations")
        else:
            hyps = greedy_translations(self.model, self.tok, sources, self.max_len, on_batch=shown) if n else []
        if hyps:
            metrics.update(translation_metrics(hyps, data.valid_refs[:len(hyps)]))
        metrics["n_decoded"] = len(hyps)
        progress.validated()
        return metrics

    def _improved(self, metrics: Dict[str, float]) -> bool:
        return improves(self.args.best_metric, metrics, self.best)

    def _save(self, metrics: Dict[str, float], improved: bool) -> None:
        args_dict = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.args).items()}
        ckpt = make_checkpoint(self.cfg, self.model.state_dict(), self.data.tokenizer_json, self.step,
                               self.stream.epoch, metrics, args_dict,
                               resume={"optimizer": self.optimizer.state_dict(),
                                       "scheduler": self.scheduler.state_dict(),
                                       "rng": _rng_state(), "data_state": self.stream.state_dict()})
        ckpt["train_meta"]["best"] = dict(self.best)
        ckpt["train_meta"]["log_window"] = dict(self.window)
        ckpt["train_meta"]["bad_validations"] = self.bad_validations
        ckpt["train_meta"]["valid_decode_n"] = self.decode_n
        last = self.run_dir / "last.pt"
        save_checkpoint(ckpt, last)
        if self.args.keep_last > 0:
            save_step_checkpoint(ckpt, self.run_dir, self.step, self.args.keep_last)
        if improved:
            copy_atomic(last, self.run_dir / "best.pt")

    def _validate_and_save(self, progress: Progress) -> Dict[str, float]:
        metrics: Dict[str, float] = {}
        began = time.monotonic()
        if self.is_main:
            metrics = self._validate(progress)
            improved = self._improved(metrics)
            if improved:
                self.best = {"metric": self.args.best_metric, "value": metrics[self.args.best_metric],
                             "step": self.step, "loss": metrics["loss"]}
            self.bad_validations = 0 if improved else self.bad_validations + 1
            # logged before the checkpoint: a kill in between leaves a record that a resume drops and logs again
            self.metrics_log.append({"kind": "valid", "step": self.step, "epoch": self.stream.epoch, **metrics,
                                     "best": self.best["value"]})
            self._save(metrics, improved)
            shown = "  ".join(f"{k} {v:.4g}" for k, v in metrics.items() if k != "n_decoded")
            progress.message(f"valid step {self.step}: {shown}  (best {self.best['metric']} {self.best['value']:.4g}"
                             f" at step {self.best['step']})")
        self.last_valid_step = self.step
        if self.dist.world_size > 1:
            dist.barrier()
        if self.clock is not None:
            self.clock.record(began, time.monotonic())
        return metrics

    def _should_stop(self, deadline: Optional[float]) -> bool:
        stop = self.step >= self.args.max_steps or (deadline is not None and time.monotonic() >= deadline)
        if self.args.patience and self.bad_validations >= self.args.patience and self.last_valid_step == self.step:
            stop = self.patience_hit = True
            if self.is_main and not self.args.quiet:
                print(f"early stop at step {self.step}: {self.args.best_metric} has not improved in "
                      f"{self.args.patience} validations (--patience)", file=sys.stderr)
        if self.dist.world_size > 1:                 # every rank stops at the same step
            flag = torch.tensor([int(stop)], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = bool(flag.item())
        return stop

    def _validation_due(self, every_steps: Optional[int]) -> bool:
        due = (self.step % every_steps == 0) if every_steps else self.clock.due(time.monotonic())
        if self.dist.world_size > 1 and self.clock is not None:   # clocks differ: rank 0 decides for all
            flag = torch.tensor([int(due)], device=self.device)
            dist.broadcast(flag, src=0)
            due = bool(flag.item())
        return due

    def _log_train(self, progress: Progress, lr: float, tokens: int, since: float) -> None:
        """A train record of the loss window (since the last one), on its log line and in metrics.jsonl."""
        tokens_per_s = tokens / max(time.monotonic() - since, 1e-9)
        mean_loss = self.window["loss"] / self.window["steps"]
        progress.show(self.step, mean_loss, lr, tokens_per_s)
        if self.is_main:
            self.metrics_log.append({"kind": "train", "step": self.step, "epoch": self.stream.epoch,
                                     "loss": mean_loss, "lr": lr, "tokens_per_s": tokens_per_s})
        self.window = {"loss": 0.0, "steps": 0}

    def run(self) -> TrainResult:
        args = self.args
        start = time.monotonic()
        end = start + 60 * args.max_minutes if args.max_minutes else None
        valid_steps, valid_minutes = args.validation_every()
        if valid_minutes:
            self.clock = ValidationClock(start, 60 * valid_minutes, end)
        progress = Progress(args.max_steps, self.step, args.quiet, enabled=self.is_main, start=start, end=end)
        last_metrics: Dict[str, float] = {}
        window_tokens, window_start = 0, time.monotonic()
        try:
            while not self._should_stop(self.clock.train_until() if self.clock and end else end):
                lr = self.scheduler.get_last_lr()[0]
                loss, n_tokens = self._train_step()
                window_tokens += n_tokens * self.dist.world_size
                self.window = {"loss": self.window["loss"] + loss, "steps": self.window["steps"] + 1}
                progress.step(self.step, self.window["loss"] / self.window["steps"], lr)
                due = self._validation_due(valid_steps)
                # a validation closes the loss window too, so that a short run's curve has a training point at each
                if self.step % args.log_interval == 0 or (due and self.window["steps"]):
                    self._log_train(progress, lr, window_tokens, window_start)
                    window_tokens, window_start = 0, time.monotonic()
                if due:
                    last_metrics = self._validate_and_save(progress)
            if self.last_valid_step != self.step:
                if self.window["steps"]:
                    self._log_train(progress, lr, window_tokens, window_start)
                last_metrics = self._validate_and_save(progress)
        finally:
            progress.close()
        verdict_lines: List[str] = []
        if self.is_main:
            verdict_lines = self._finish(start, last_metrics or self._last_valid_record())
        return TrainResult(self.run_dir, self.step, self.stream.epoch, dict(self.best), last_metrics, self.model,
                           verdict_lines)

    def _last_valid_record(self) -> Dict[str, float]:
        valid = [r for r in self.metrics_log.read() if r.get("kind") == "valid"]
        return valid[-1] if valid else {}

    def _finish(self, start: float, metrics: Dict[str, float]) -> List[str]:
        """curves.png, summary.json, and what the user must know: the validations' cost, an undertrained model."""
        args = self.args
        if not plot_curves(self.run_dir / "metrics.jsonl", self.run_dir / "curves.png") and not args.quiet:
            print("note: curves.png not drawn: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        flag, value = stopped_by(self.step, args.max_steps, args.patience if self.patience_hit else None,
                                 args.max_minutes)
        verdict = undertrained(self.step, args.warmup_steps, flag, value, self.cfg.vocab_size, metrics,
                               args.best_metric)
        report_run(self.run_dir, {"step": self.step, "epoch": self.stream.epoch, "stopped_by": flag,
                                  "best": dict(self.best)}, metrics, time.monotonic() - start, self.clock, verdict,
                   args.quiet)
        return verdict.reasons
