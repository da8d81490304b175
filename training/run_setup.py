"""Before the first step: the run folder, the data, the tokenizer and the model config.

A run folder `DIR` holds config.json (the ModelConfig), tokenizer.json, metrics.jsonl, last.pt,
best.pt, step_{N}.pt, summary.json (how the run ended, training/report.py) and curves.png (when
matplotlib is installed). A new run refuses a folder that already holds a run; `--resume` continues
one from DIR/last.pt with its own config and tokenizer.
A run killed before its first checkpoint (no last.pt yet) is started again from step 0 by `--resume`,
with the config.json and tokenizer.json it had written: the same run as an uninterrupted one.
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch.distributed as dist

from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.errors import Seq2OnnxError

from .atomic import remove_stale_temps, write_text_atomic
from .checkpoint import STEP_FILE, has_resume_state, load_checkpoint
from .data import BatchStream, Example, SkipCounts, encode_pairs, read_parallel, read_tsv
from .tokenizer import Tokenizer, load_tokenizer, special_ids, tokenizer_from_json, train_tokenizer
from .train_args import TrainArgs

RUN_FILES = ("last.pt", "best.pt", "config.json", "tokenizer.json", "metrics.jsonl")
# every file a run writes (atomically, except metrics.jsonl's appends): their temp files are a kill's leftovers
WRITTEN = re.compile(r"^(last\.pt|best\.pt|step_\d+\.pt|config\.json|tokenizer\.json|metrics\.jsonl|curves\.png|"
                     r"summary\.json)$")


@dataclass
class DistInfo:
    """This process's place in a torchrun launch (rank 0 of 1 when not distributed)."""
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @classmethod
    def from_env(cls) -> "DistInfo":
        try:
            return cls(int(os.environ.get("RANK", 0)), int(os.environ.get("LOCAL_RANK", 0)),
                       int(os.environ.get("WORLD_SIZE", 1)))
        except ValueError:
            raise Seq2OnnxError("RANK / LOCAL_RANK / WORLD_SIZE are not integers: launch with torchrun")

    def barrier(self) -> None:
        if self.world_size > 1:
            dist.barrier()

    def broadcast(self, obj: Any) -> Any:
        """rank 0's `obj` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


@dataclass
class RunData:
    config: ModelConfig                # vocab size and special ids taken from the tokenizer
    tokenizer: Tokenizer
    tokenizer_json: str
    max_len: int                       # tokens per side, EOS included
    stream: BatchStream                # this rank's training batches
    valid_examples: List[Example]
    valid_refs: List[str]              # target texts of valid_examples


def holds_run(run_dir: Path) -> bool:
    if not run_dir.is_dir():
        return False
    return any((run_dir / n).exists() for n in RUN_FILES) or any(STEP_FILE.match(p.name) for p in run_dir.iterdir())


def _model_config(args: TrainArgs) -> ModelConfig:
    """The config --preset / --config asks for (the paper's base model when neither)."""
    try:
        if args.config:
            if not os.path.isfile(args.config):
                raise Seq2OnnxError(f"model config not found: {args.config}: pass a ModelConfig JSON file")
            with open(args.config, encoding="utf-8") as f:
                return ModelConfig.from_dict(json.load(f))
        if args.preset:
            return ModelConfig.preset(args.preset)
        return ModelConfig()
    except (ValueError, TypeError) as e:   # json.JSONDecodeError is a ValueError
        raise Seq2OnnxError(f"bad model config {args.config or args.preset}: {e}: fix it or use --preset")


def check_run_dir(args: TrainArgs) -> Optional[Dict[str, Any]]:
    """Check the --out folder (nothing is written yet) -> the checkpoint to resume, if any."""
    run_dir = Path(args.out)
    if run_dir.exists() and not run_dir.is_dir():
        raise Seq2OnnxError(f"--out {run_dir} is a file: pass a folder")
    ckpt = None
    if args.resume:
        last = run_dir / "last.pt"
        if not last.is_file():
            if not holds_run(run_dir):
                raise Seq2OnnxError(f"nothing to resume in {run_dir} (no last.pt): drop --resume to start a new run")
            if (run_dir / "best.pt").exists() or any(STEP_FILE.match(p.name) for p in run_dir.iterdir()):
                raise Seq2OnnxError(f"{last} is missing but {run_dir} holds other checkpoints: copy the newest "
                                    "step_N.pt to last.pt to resume from it")
            saved = _saved_config(run_dir)             # killed before its first checkpoint: from step 0
        else:
            ckpt = load_checkpoint(last)
            if not has_resume_state(ckpt):
                raise Seq2OnnxError(f"{last} has no optimizer/data state to resume from: start a new run")
            saved = ckpt["config"]
        if (args.preset or args.config) and saved is not None:
            wanted = _model_config(args).to_dict()
            fixed = ("vocab_size", "pad_id", "bos_id", "eos_id", "unk_id")   # come from the tokenizer
            if {k: v for k, v in wanted.items() if k not in fixed} != {k: v for k, v in saved.items() if k not in fixed}:
                raise Seq2OnnxError(f"--preset/--config differ from the model of the run in {run_dir}: "
                                    "drop them when resuming (the run's own config is used)")
    elif holds_run(run_dir):
        raise Seq2OnnxError(f"{run_dir} already holds a training run: pass --resume to continue it, "
                            "or choose another --out")
    return ckpt


def _saved_config(run_dir: Path) -> Optional[Dict[str, Any]]:
    """DIR/config.json of a run that has not checkpointed yet (None when it was not written either)."""
    path = run_dir / "config.json"
    if not path.is_file():
        return None
    try:
        return ModelConfig.from_json(str(path)).to_dict()
    except (ValueError, TypeError) as e:
        raise Seq2OnnxError(f"{path} is not a model config ({e}): delete {run_dir} and start the run again")


def _read(args: TrainArgs, side: str):
    tsv = getattr(args, side)
    if tsv:
        return read_tsv(tsv)
    return read_parallel(getattr(args, f"{side}_src"), getattr(args, f"{side}_tgt"))


def _report(counts: SkipCounts, kept: int, side: str, d: DistInfo, quiet: bool) -> None:
    if d.rank != 0:
        return
    for line in counts.report():                 # skipped lines are always reported
        print(f"warning: {side} data: {line}", file=sys.stderr)
    if not quiet:
        print(f"{side} data: {kept} pairs of {counts.read} lines", file=sys.stderr)


def load_run_data(args: TrainArgs, d: DistInfo, resume_ckpt: Optional[Dict[str, Any]]) -> RunData:
    run_dir = Path(args.out)
    train_pairs, train_counts = _read(args, "train")
    valid_pairs, valid_counts = _read(args, "valid")
    for side, pairs, counts in (("training", train_pairs, train_counts), ("validation", valid_pairs, valid_counts)):
        if not pairs:
            raise Seq2OnnxError(f"no usable {side} pairs in {counts.name} ({counts.summary()}): "
                                "expect UTF-8 text with 'source<TAB>target' per line")

    # tokenizer: the run's own when resuming, a given file, or trained here by rank 0 and sent to the others
    restart = args.resume and resume_ckpt is None        # killed before its first checkpoint: from step 0
    if resume_ckpt is not None:
        tok_json = resume_ckpt["tokenizer"]
    elif restart and (run_dir / "tokenizer.json").is_file():
        tok_json = (run_dir / "tokenizer.json").read_text(encoding="utf-8")
    elif args.tokenizer:
        try:
            tok_json = load_tokenizer(args.tokenizer).to_str()
        except Exception as e:  # noqa: BLE001 - tokenizers raises plain Exception for bad files
            raise Seq2OnnxError(f"cannot load --tokenizer {args.tokenizer}: {str(e)[:200]}: pass a tokenizer.json")
    else:
        tok_json = None
        if d.rank == 0:
            texts = [s for s, _ in train_pairs] + [t for _, t in train_pairs]
            tok_json = train_tokenizer(texts, args.vocab_size, args.lowercase, args.split_digits,
                                       args.split_punctuation, args.group_digits).to_str()
        tok_json = d.broadcast(tok_json)
    tok = tokenizer_from_json(tok_json)
    try:
        ids = special_ids(tok)
    except ValueError as e:
        raise Seq2OnnxError(str(e))
    if resume_ckpt is not None:
        cfg = ModelConfig.from_dict(resume_ckpt["config"])
    elif restart and _saved_config(run_dir) is not None:
        cfg = ModelConfig.from_dict(_saved_config(run_dir))
    else:
        cfg = ModelConfig.from_dict({**_model_config(args).to_dict(), "vocab_size": tok.get_vocab_size(), **ids})

    max_len = min(args.max_len, cfg.max_positions)
    train_examples, _ = encode_pairs(tok, train_pairs, ids["eos_id"], max_len, train_counts)
    valid_examples, valid_kept = encode_pairs(tok, valid_pairs, ids["eos_id"], max_len, valid_counts)
    _report(train_counts, len(train_examples), "training", d, args.quiet)
    _report(valid_counts, len(valid_examples), "validation", d, args.quiet)
    for side, examples, counts in (("training", train_examples, train_counts),
                                   ("validation", valid_examples, valid_counts)):
        if not examples:
            raise Seq2OnnxError(f"no usable {side} pairs in {counts.name} ({counts.summary()}): "
                                f"the rest are over --max-len {max_len} tokens; raise --max-len")
    # all checks passed: now the folder is written (a failed start leaves no half-made run behind)
    if d.rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in remove_stale_temps(run_dir, WRITTEN):
            print(f"note: removed {name}, left in {run_dir} by a killed run", file=sys.stderr)
        if restart:
            print(f"note: {run_dir} has no last.pt (the run stopped before its first checkpoint): "
                  "starting it again from step 0", file=sys.stderr)
        if resume_ckpt is None:
            write_text_atomic(run_dir / "tokenizer.json", tok_json)
            write_text_atomic(run_dir / "config.json", json.dumps(cfg.to_dict(), indent=2) + "\n")
    d.barrier()
    stream = BatchStream(train_examples, args.max_tokens, args.seed, ids, d.rank, d.world_size,
                         maxi_batch=args.maxi_batch)
    return RunData(cfg, tok, tok_json, max_len, stream, valid_examples, [t for _, t in valid_kept])
