"""`seq2onnx train`, `seq2onnx average` and `seq2onnx data`: argparse over the Python API.

Option names follow fairseq / HF habits (--max-tokens, --lr-factor, --warmup-steps, --max-steps,
--keep-last, --seed). Bad input raises Seq2OnnxError: the dispatcher prints one line, no traceback.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from pathlib import Path
from typing import List, Optional

from seq2onnx.runtime.cli.main import OneLineParser as _Parser
from seq2onnx.runtime.package.config import PRESETS
from seq2onnx.runtime.errors import Seq2OnnxError


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


# --- seq2onnx train --------------------------------------------------------------------------
def train_parser() -> argparse.ArgumentParser:
    from .model import INIT_CHOICES
    from .train_args import BEST_METRICS, DEFAULT_VALID_INTERVAL, TrainArgs
    d = TrainArgs(out="")
    p = _Parser(prog="seq2onnx train", description="Train a Transformer (Vaswani et al., 2017) on parallel data. "
                "Multi-process: torchrun --nproc_per_node N -m seq2onnx.runtime.cli train ...")
    g = p.add_argument_group("data (a TSV with source<TAB>target per line, or two aligned files)")
    g.add_argument("--train", metavar="TSV", help="training pairs")
    g.add_argument("--train-src", metavar="FILE", help="training sources, one per line")
    g.add_argument("--train-tgt", metavar="FILE", help="training targets, aligned with --train-src")
    g.add_argument("--valid", metavar="TSV", help="validation pairs")
    g.add_argument("--valid-src", metavar="FILE")
    g.add_argument("--valid-tgt", metavar="FILE")
    g.add_argument("--max-len", type=_positive_int, default=d.max_len,
                   help="max tokens per side, EOS included; longer pairs are skipped and counted (default %(default)s)")
    g = p.add_argument_group("model")
    g.add_argument("--out", required=True, metavar="DIR", help="run folder (checkpoints, metrics, tokenizer)")
    g.add_argument("--preset", choices=list(PRESETS), help="model size (default: the paper's base model)")
    g.add_argument("--config", metavar="JSON", help="a ModelConfig JSON file instead of --preset")
    g.add_argument("--tokenizer", metavar="JSON", help="reuse this tokenizer.json instead of training one")
    g.add_argument("--vocab-size", type=_positive_int, default=d.vocab_size, help="BPE pieces (default %(default)s)")
    g.add_argument("--init", choices=list(INIT_CHOICES), default=d.init,
                   help="how the weights start: weight matrices N(0, 0.02) or Xavier, embeddings N(0, d_model^-1/2) "
                        "(unit) or N(0, 0.02) (normal); auto: normal from d_model 128 up (real text), normal-unit "
                        "below (tiny models); see docs/TRAINING.md (default %(default)s)")
    g.add_argument("--lowercase", action="store_true", help="the tokenizer lower-cases its input (and so its output)")
    g.add_argument("--split-digits", action="store_true", help="the tokenizer makes every digit its own piece")
    g.add_argument("--split-punctuation", action="store_true",
                   help="the tokenizer makes every punctuation character its own piece")
    g.add_argument("--group-digits", action="store_true",
                   help="the tokenizer puts thousands separators into digit runs (1234567 reads as 1,234,567)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--max-tokens", type=_positive_int, default=d.max_tokens,
                   help="padded tokens per batch and process (default %(default)s)")
    g.add_argument("--maxi-batch", type=int, default=d.maxi_batch,
                   help="shuffle, then sort by length in pools of this many batches' worth of examples, as Marian "
                        "does; 0 sorts the whole epoch at once, as fairseq does (default %(default)s)")
    g.add_argument("--accum-steps", type=_positive_int, default=d.accum_steps,
                   help="batches per optimizer step (gradient accumulation, default %(default)s)")
    g.add_argument("--lr-factor", type=float, default=d.lr_factor,
                   help="lr = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (default %(default)s)")
    g.add_argument("--warmup-steps", type=_positive_int, default=d.warmup_steps, help="(default %(default)s)")
    g.add_argument("--adam-betas", type=float, nargs=2, default=list(d.adam_betas), metavar=("B1", "B2"))
    g.add_argument("--adam-eps", type=float, default=d.adam_eps)
    g.add_argument("--label-smoothing", type=float, default=d.label_smoothing, help="(default %(default)s)")
    g.add_argument("--clip-norm", type=float, default=d.clip_norm, help="max gradient norm, 0: off (default %(default)s)")
    g.add_argument("--amp", choices=["none", "bf16", "fp16"], default=d.amp, help="autocast on CUDA")
    g = p.add_argument_group("length, validation, checkpoints")
    g.add_argument("--max-steps", type=_positive_int, default=d.max_steps, help="(default %(default)s)")
    g.add_argument("--max-minutes", type=float, help="stop after this many minutes of training")
    g.add_argument("--valid-interval", type=_positive_int, metavar="N",
                   help="validate and save every N steps (default: a tenth of --max-minutes when given, "
                        f"else {DEFAULT_VALID_INTERVAL})")
    g.add_argument("--valid-minutes", type=float, metavar="M", help="validate and save every M minutes instead")
    g.add_argument("--patience", type=int, default=d.patience, metavar="N",
                   help="stop when --best-metric has not improved in N validations in a row (default: never)")
    g.add_argument("--valid-decode-max", type=int, default=d.valid_decode_max,
                   help="greedy-decode at most N validation sentences for BLEU/chrF/exact match (default %(default)s)")
    g.add_argument("--best-metric", choices=list(BEST_METRICS), default=d.best_metric,
                   help="what best.pt is best at (default %(default)s)")
    g.add_argument("--keep-last", type=int, default=d.keep_last, help="step_N.pt files kept (default %(default)s)")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its last.pt")
    g = p.add_argument_group("reproducibility and output")
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--threads", type=_positive_int, help="torch CPU threads (fix it for bit-identical resumes)")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default=d.device)
    g.add_argument("--log-interval", type=_positive_int, default=d.log_interval)
    g.add_argument("--quiet", action="store_true", help="no progress output")
    return p


def train_main(argv: List[str]) -> int:
    from .train import train
    from .train_args import TrainArgs
    ns = train_parser().parse_args(argv)
    names = {f.name for f in fields(TrainArgs)}
    args = TrainArgs(**{k: v for k, v in vars(ns).items() if k in names})
    args.adam_betas = tuple(args.adam_betas)
    result = train(args)
    if result.best["value"] is not None and not args.quiet:
        print(f"done: step {result.step}; best {result.best['metric']} {result.best['value']:.4g} "
              f"at step {result.best['step']}; checkpoints in {result.run_dir}", file=sys.stderr)
    return 0


# --- seq2onnx average ------------------------------------------------------------------------
def average_main(argv: List[str]) -> int:
    from .checkpoint import average_checkpoints, save_checkpoint
    p = _Parser(prog="seq2onnx average", description="Average the weights of the last K step checkpoints "
                "of a run (the paper averaged the last 5 or 20), or of the checkpoint files given.")
    p.add_argument("inputs", nargs="+", metavar="PATH",
                   help="a run folder of seq2onnx train (its last --last step_N.pt are averaged), "
                        "or two or more checkpoint files")
    p.add_argument("--last", type=_positive_int, metavar="K",
                   help="with a run folder: how many (default 5; all of them when it holds fewer)")
    p.add_argument("--out", required=True, metavar="FILE", help="the averaged checkpoint (.pt)")
    ns = p.parse_args(argv)
    chosen = _checkpoints_to_average([Path(i) for i in ns.inputs], ns.last)
    out = Path(ns.out)
    if not out.parent.is_dir():
        raise Seq2OnnxError(f"folder of --out not found: {out.parent}: create it first")
    save_checkpoint(average_checkpoints(chosen), out)
    print(f"averaged {', '.join(p.name for p in chosen)} -> {out}", file=sys.stderr)
    return 0


def _checkpoints_to_average(inputs: List[Path], last: Optional[int]) -> List[Path]:
    """The files `seq2onnx average` averages: a run folder's newest `last` (5) step_N.pt (all of them when it holds
    fewer: a short run's sequence of commands still goes through), or the files given."""
    from .checkpoint import step_checkpoints
    if len(inputs) > 1:
        if last is not None:
            raise Seq2OnnxError("--last picks step checkpoints of a run folder: drop it when naming the files")
        for path in inputs:
            if not path.is_file():
                raise Seq2OnnxError(f"checkpoint not found: {path}: pass two or more checkpoint files (.pt), "
                                    "or one run folder")
        return inputs
    run_dir, last = inputs[0], last or 5
    if run_dir.is_file():
        raise Seq2OnnxError(f"{run_dir} is one checkpoint file, and averaging needs several: pass its run folder "
                            f"({run_dir.parent}) to average its last --last step_N.pt, or two or more .pt files")
    if not run_dir.is_dir():
        raise Seq2OnnxError(f"run folder not found: {run_dir}: pass the --out folder of seq2onnx train, "
                            "or two or more checkpoint files")
    found = step_checkpoints(run_dir)
    if not found:
        raise Seq2OnnxError(f"no step_N.pt checkpoints in {run_dir}: train with --keep-last K (K >= 1)")
    if len(found) < last:           # a short run: its checkpoints are what there is to average
        which = f"averaging those {len(found)}" if len(found) > 1 else "the average is its weights"
        print(f"note: {run_dir} holds {len(found)} step checkpoint{'s' if len(found) > 1 else ''}, fewer than "
              f"--last {last}: {which}", file=sys.stderr)
    return found[-last:]


# --- seq2onnx data ---------------------------------------------------------------------------
def data_main(argv: List[str]) -> int:
    from .gettext_data import LOCALE_DIR, write_gettext_data
    from .numbers import FORM_CHOICES, NumbersSpec, write_numbers_data
    d = NumbersSpec()
    p = _Parser(prog="seq2onnx data", description="Write a built-in parallel data set.")
    sub = p.add_subparsers(dest="dataset", metavar="DATASET", parser_class=_Parser)
    n = sub.add_parser("numbers", help="integers written out in English -> German (num2words), 0..999,999")
    n.add_argument("--out", required=True, metavar="DIR", help="folder for train.tsv, valid.tsv, test.tsv")
    n.add_argument("--size", type=_positive_int, default=d.size,
                   help="training pairs, every number below 1000 included (default %(default)s)")
    n.add_argument("--valid-size", type=int, default=d.valid_size, help="(default %(default)s)")
    n.add_argument("--test-size", type=int, default=d.test_size, help="(default %(default)s)")
    n.add_argument("--repeat-small", type=_positive_int, default=d.repeat_small, metavar="N",
                   help="each number below 1000 appears N times in train: more weight on the short inputs "
                        "(default %(default)s)")
    n.add_argument("--repeat-below-20", type=_positive_int, default=None, metavar="N",
                   help="each number below 20 appears N times in train (at least --repeat-small; default: "
                        "--repeat-small): the words no larger number teaches, 'zero' above all")
    n.add_argument("--forms", choices=FORM_CHOICES, default=d.forms,
                   help="words: num2words' English; mixed: train and valid numbers each in a random form people "
                        "type (case, hyphens, 'and', commas, 'a hundred', digits); test stays words (default %(default)s)")
    n.add_argument("--seed", type=int, default=d.seed)
    n.add_argument("--force", action="store_true", help="overwrite existing split files in --out")
    g = sub.add_parser("gettext", help="real UI messages English -> LANG from the system's gettext catalogs "
                       "(<locale dir>/LANG/LC_MESSAGES/*.mo), split by a hash of the source")
    g.add_argument("--out", required=True, metavar="DIR", help="folder for train.tsv, valid.tsv, test.tsv")
    g.add_argument("--lang", default="de", help="target language folder name (default %(default)s)")
    g.add_argument("--locale-dir", default=LOCALE_DIR, help="where the catalogs are (default %(default)s)")
    g.add_argument("--force", action="store_true", help="overwrite existing split files in --out")
    ns = p.parse_args(argv)
    if ns.dataset is None:
        raise Seq2OnnxError("no data set named: use `seq2onnx data numbers --out DIR` or `seq2onnx data gettext --out DIR`")
    if ns.dataset == "gettext":
        counts, report = write_gettext_data(Path(ns.out), ns.lang, ns.locale_dir, overwrite=ns.force)
        left_out = ", ".join(f"{n} {why}" for why, n in report.left_out.items())
        print(f"read {report.entries} messages from {len(report.files)} catalogs; left out: {left_out}", file=sys.stderr)
        for name in report.unreadable:
            print(f"skipped an unreadable catalog: {name}", file=sys.stderr)
        print(f"wrote {', '.join(f'{k} {v}' for k, v in counts.items())} pairs to {ns.out}", file=sys.stderr)
        return 0
    counts = write_numbers_data(Path(ns.out), NumbersSpec(ns.size, ns.valid_size, ns.test_size, ns.seed,
                                                                  ns.repeat_small, ns.forms,
                                                                  ns.repeat_below_20 or 0),
                                overwrite=ns.force)
    print(f"wrote {', '.join(f'{k} {v}' for k, v in counts.items())} pairs to {ns.out}", file=sys.stderr)
    return 0
