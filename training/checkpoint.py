"""Checkpoints: the `*.pt` format of docs/CONTRACTS.md, atomic saving, loading, averaging, rotation.

    format          "seq2onnx-checkpoint"
    format_version  1
    config          ModelConfig.to_dict()
    model           state_dict (fp32)
    tokenizer       the tokenizer.json text
    train_meta      {step, epoch, metrics, args, seq2onnx_version, torch_version, time}
    -- resume state (absent in averaged checkpoints) --
    optimizer, scheduler, rng, data_state

A run folder keeps `last.pt`, `best.pt` and the last K `step_{N}.pt`.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

from seq2onnx.runtime import __version__
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.errors import Seq2OnnxError

from .atomic import atomic_open

FORMAT = "seq2onnx-checkpoint"
FORMAT_VERSION = 1
RESUME_KEYS = ("optimizer", "scheduler", "rng", "data_state")
STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


def make_checkpoint(config: ModelConfig, model_state: Dict[str, torch.Tensor], tokenizer_json: str,
                    step: int, epoch: int, metrics: Dict[str, Any], args: Dict[str, Any],
                    resume: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The checkpoint dict; `resume` holds optimizer / scheduler / rng / data_state."""
    ckpt = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": config.to_dict(),
        "model": {k: v.detach().to("cpu", torch.float32) if v.is_floating_point() else v.detach().cpu()
                  for k, v in model_state.items()},
        "tokenizer": tokenizer_json,
        "train_meta": {"step": step, "epoch": epoch, "metrics": dict(metrics), "args": dict(args),
                       "seq2onnx_version": __version__, "torch_version": str(torch.__version__),
                       "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    }
    if resume is not None:
        missing = set(RESUME_KEYS) - set(resume)
        if missing:
            raise ValueError(f"resume state lacks {sorted(missing)}")
        ckpt.update({k: resume[k] for k in RESUME_KEYS})
    return ckpt


def save_checkpoint(ckpt: Dict[str, Any], path: os.PathLike) -> None:
    """Write atomically (temp file in the same folder, fsync, os.replace): a kill at any moment
    leaves either the old file or the new one, never a torn one."""
    with atomic_open(path, "wb") as f:
        torch.save(ckpt, f)


def load_checkpoint(path: os.PathLike, map_location: Any = "cpu") -> Dict[str, Any]:
    """Load and check a checkpoint; any problem is a one-line Seq2OnnxError."""
    path = Path(path)
    if not path.is_file():
        raise Seq2OnnxError(f"checkpoint not found: {path}: pass the path of a .pt file written by seq2onnx train")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many kinds for a file that is not a checkpoint
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Seq2OnnxError(f"{path} is not a seq2onnx checkpoint (torch.load failed: {reason[:200]}): "
                            "pass a .pt file written by seq2onnx train or seq2onnx average")
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise Seq2OnnxError(f"{path} is not a seq2onnx checkpoint (no format '{FORMAT}'): "
                            "pass a .pt file written by seq2onnx train or seq2onnx average")
    if ckpt.get("format_version") != FORMAT_VERSION:
        raise Seq2OnnxError(f"{path} has checkpoint format_version {ckpt.get('format_version')!r}, this seq2onnx "
                            f"reads version {FORMAT_VERSION}: use the seq2onnx version that wrote it")
    missing = [k for k in ("config", "model", "tokenizer", "train_meta") if k not in ckpt]
    if missing:
        raise Seq2OnnxError(f"{path} is a damaged checkpoint (missing {', '.join(missing)}): use another checkpoint")
    return ckpt


def has_resume_state(ckpt: Dict[str, Any]) -> bool:
    return all(k in ckpt for k in RESUME_KEYS)


def average_checkpoints(paths: Sequence[os.PathLike]) -> Dict[str, Any]:
    """Element-wise mean of the weights of `paths` (same config), as in the paper's 5 / 20 averaging.

    The result is a checkpoint without resume state; its train_meta is that of the last path,
    plus `averaged_from` (the file names).
    """
    if not paths:
        raise Seq2OnnxError("no checkpoints to average: pass at least one")
    ckpts = [load_checkpoint(p) for p in paths]
    first = ckpts[0]
    for p, c in zip(paths[1:], ckpts[1:]):
        if c["config"] != first["config"] or set(c["model"]) != set(first["model"]):
            raise Seq2OnnxError(f"{p} holds a different model than {paths[0]}: average checkpoints of one run")
    averaged = {}
    for name, t0 in first["model"].items():
        if t0.is_floating_point():
            total = torch.zeros_like(t0, dtype=torch.float64)
            for c in ckpts:
                total += c["model"][name].double()
            averaged[name] = (total / len(ckpts)).to(t0.dtype)
        else:
            averaged[name] = ckpts[-1]["model"][name].clone()
    last = ckpts[-1]
    meta = dict(last["train_meta"])
    meta["averaged_from"] = [Path(p).name for p in paths]
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "config": last["config"], "model": averaged,
            "tokenizer": last["tokenizer"], "train_meta": meta}


# --- a run folder's checkpoints ------------------------------------------------------------
def step_checkpoints(run_dir: os.PathLike) -> List[Path]:
    """`step_{N}.pt` files of a run folder, oldest (smallest N) first."""
    run_dir = Path(run_dir)
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := STEP_FILE.match(p.name))] \
        if run_dir.is_dir() else []
    return [p for _, p in sorted(found)]


def save_step_checkpoint(ckpt: Dict[str, Any], run_dir: os.PathLike, step: int, keep_last: int) -> Path:
    """Write step_{step}.pt and delete older step checkpoints beyond the newest `keep_last`."""
    path = Path(run_dir) / f"step_{step}.pt"
    save_checkpoint(ckpt, path)
    rotate_step_checkpoints(run_dir, keep_last)
    return path


def rotate_step_checkpoints(run_dir: os.PathLike, keep_last: int) -> None:
    """Delete step checkpoints beyond the newest `keep_last` (0: keep all)."""
    if keep_last > 0:
        for old in step_checkpoints(run_dir)[:-keep_last]:
            old.unlink()
