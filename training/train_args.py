"""`TrainArgs`: everything `seq2onnx train` takes, and the checks of options that cannot work together.

Its own module so that the run's setup (training/run_setup.py) and the loop (training/train.py) both read it
without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from seq2onnx.runtime.errors import Seq2OnnxError

from .data import MAXI_BATCH
from .model import INIT_CHOICES

BEST_METRICS = {"exact_match": max, "bleu": max, "chrf": max, "loss": min}
AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
DEFAULT_VALID_INTERVAL = 1000


@dataclass
class TrainArgs:
    """Everything `seq2onnx train` takes; the field names are the CLI options with '-' for '_'."""

    out: str
    # data: a TSV (source<TAB>target) or two aligned files, for training and for validation
    train: Optional[str] = None
    train_src: Optional[str] = None
    train_tgt: Optional[str] = None
    valid: Optional[str] = None
    valid_src: Optional[str] = None
    valid_tgt: Optional[str] = None
    max_len: int = 256                 # tokens per side, EOS included; longer pairs are skipped and counted
    # model and tokenizer
    preset: Optional[str] = None       # tiny | small | base; neither preset nor config: the paper's base
    config: Optional[str] = None       # a ModelConfig JSON file (e.g. DIR/config.json of another run)
    tokenizer: Optional[str] = None    # reuse this tokenizer.json instead of training one
    vocab_size: int = 8000             # BPE pieces, specials included (a small corpus may give fewer)
    lowercase: bool = False            # tokenizer options (training/tokenizer.py), for a tokenizer trained here
    split_digits: bool = False
    split_punctuation: bool = False
    group_digits: bool = False
    init: str = "auto"                 # how the weights start (training/model.py INIT_CHOICES; the paper is silent)
    # optimisation (paper section 5.3-5.4)
    max_tokens: int = 4096             # padded tokens per batch and rank
    maxi_batch: int = MAXI_BATCH       # batches' worth of examples sorted by length together (0: the whole epoch)
    accum_steps: int = 1               # batches per optimizer step
    lr_factor: float = 1.0
    warmup_steps: int = 4000
    adam_betas: Tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    label_smoothing: float = 0.1
    clip_norm: float = 1.0             # max gradient L2 norm; 0 disables clipping
    amp: str = "none"                  # none | bf16 | fp16 (CUDA only)
    # length of the run
    max_steps: int = 100_000
    max_minutes: Optional[float] = None
    # validation and checkpoints
    valid_interval: Optional[int] = None    # validate and save every N steps (and at the end) ...
    valid_minutes: Optional[float] = None   # ... or every M minutes; neither: see validation_every()
    valid_decode_max: int = 500        # greedy-decode at most this many validation sentences (0: none); on the
                                       # clock, fewer when more would cost too much (training/budget.py)
    best_metric: str = "bleu"          # exact_match | bleu | chrf | loss
    keep_last: int = 5                 # step_{N}.pt files kept (0: none written)
    patience: int = 0                  # stop after N validations in a row without improvement (0: never)
    resume: bool = False
    # reproducibility and output
    seed: int = 1
    threads: Optional[int] = None      # torch.set_num_threads; fix it for bit-identical resumes
    device: str = "auto"               # auto | cpu | cuda
    log_interval: int = 50
    quiet: bool = False

    def check(self) -> None:
        """One-line Seq2OnnxError for options that cannot work together."""
        if self.preset and self.config:
            raise Seq2OnnxError("both --preset and --config given: pass only one")
        for side in ("train", "valid"):
            tsv, src, tgt = getattr(self, side), getattr(self, f"{side}_src"), getattr(self, f"{side}_tgt")
            if tsv and (src or tgt):
                raise Seq2OnnxError(f"--{side} and --{side}-src/--{side}-tgt given: pass a TSV or two aligned files")
            if not tsv and not (src and tgt):
                raise Seq2OnnxError(f"no {side} data: pass --{side} FILE.tsv or --{side}-src and --{side}-tgt")
        if self.best_metric not in BEST_METRICS:
            raise Seq2OnnxError(f"unknown --best-metric {self.best_metric!r}: choose one of {', '.join(BEST_METRICS)}")
        if self.init not in INIT_CHOICES:
            raise Seq2OnnxError(f"unknown --init {self.init!r}: choose one of {', '.join(INIT_CHOICES)}")
        if self.amp not in ("none", *AMP_DTYPES):
            raise Seq2OnnxError(f"unknown --amp {self.amp!r}: choose none, bf16 or fp16")
        if self.device not in ("auto", "cpu", "cuda"):
            raise Seq2OnnxError(f"unknown --device {self.device!r}: choose auto, cpu or cuda")
        if self.valid_interval is not None and self.valid_minutes is not None:
            raise Seq2OnnxError("both --valid-interval and --valid-minutes given: pass only one")
        for name in ("max_len", "max_tokens", "accum_steps", "warmup_steps", "max_steps", "valid_interval",
                     "log_interval"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise Seq2OnnxError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.max_tokens < self.max_len:
            raise Seq2OnnxError(f"--max-tokens {self.max_tokens} is below --max-len {self.max_len}: "
                                "a batch must hold the longest pair; raise --max-tokens or lower --max-len")
        if self.valid_decode_max < 0:
            raise Seq2OnnxError(f"--valid-decode-max must be >= 0, got {self.valid_decode_max}")
        if self.valid_decode_max == 0 and self.best_metric != "loss":
            raise Seq2OnnxError(f"--best-metric {self.best_metric} needs greedy decodes: set --valid-decode-max "
                                "above 0 or use --best-metric loss")
        if self.threads is not None and self.threads < 1:
            raise Seq2OnnxError(f"--threads must be >= 1, got {self.threads}")
        for name in ("max_minutes", "valid_minutes"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise Seq2OnnxError(f"--{name.replace('_', '-')} must be > 0, got {getattr(self, name)}")
        if self.maxi_batch < 0:
            raise Seq2OnnxError(f"--maxi-batch must be >= 0, got {self.maxi_batch}")
        if self.patience < 0:
            raise Seq2OnnxError(f"--patience must be >= 0, got {self.patience}")

    def validation_every(self) -> Tuple[Optional[int], Optional[float]]:
        """(steps, minutes) between validations, one of them None.

        --valid-interval N or --valid-minutes M when given; otherwise a tenth of --max-minutes (so that a short
        run on a CPU still validates ten times, training/budget.py), and every DEFAULT_VALID_INTERVAL steps
        without --max-minutes.
        """
        if self.valid_interval is not None or self.valid_minutes is not None:
            return self.valid_interval, self.valid_minutes
        if self.max_minutes is not None:
            return None, self.max_minutes / 10
        return DEFAULT_VALID_INTERVAL, None
