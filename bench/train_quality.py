"""Trainer quality on real text: seq2onnx's trainer against HF transformers' MarianMTModel, same budget.

    python bench/train_quality.py                      # the duel: 20 and 60 minutes, both systems side by side
    python bench/train_quality.py --minutes 5 20       # other budgets
    python bench/train_quality.py --ablate --steps 600 # one change at a time, a fixed number of steps (below)

The setup (one rule each, both systems):
  * data: `seq2onnx data gettext --lang de`: English -> German UI messages from the system's gettext catalogs,
    split by a hash of the source (training/gettext_data.py);
  * tokenizer: ours, BPE 8000, trained once on the training pairs, used by both;
  * model: `--preset small` dims (d_model 128, 4 heads, FFN 512, 3 + 3 layers, dropout 0.1), post-norm, ReLU,
    sinusoidal positions, embeddings scaled by sqrt(d_model), shared and tied;
  * recipe: Adam (0.9, 0.98, 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * 1000^-1.5), label smoothing 0.1,
    the loss summed over target tokens / their number, gradient clip 1.0, batches of 4096 padded tokens:
    the very same batches in the same order (training/data.py's BatchStream) for both;
  * budget: wall clock, validation included, one thread each, the two running at the same time. The schedule
    does not depend on the budget, so the 20-minute figures are the 60-minute run at its 20th minute (the
    test decode is not counted);
  * test: greedy decoding of the test split, sacrebleu chrF and BLEU, exact match.

seq2onnx runs through its real trainer (`seq2onnx.training.train.train`, as `seq2onnx train` does), stopped by
`max_minutes` and resumed for the next budget. HF Marian runs in a plain PyTorch loop below.

--ablate trains either system for `--steps` steps (800 by default) with one part of the initialisation
changed at a time (ABLATIONS), on the same batches, and reports the training loss along the way.

Writes bench/results/train_quality.{json,md} and train_quality.png (validation loss, both systems);
--ablate writes bench/results/train_ablation.{json,md}. The work folder is bench/.cache/train_quality.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RESULTS = ROOT / "bench" / "results"
WORK = ROOT / "bench" / ".cache" / "train_quality"
RECIPE = dict(preset="small", vocab_size=8000, warmup_steps=1000, max_tokens=4096, label_smoothing=0.1,
              clip_norm=1.0, adam_betas=(0.9, 0.98), adam_eps=1e-9, seed=1, max_len=256,
              # the recorded duel sorted each epoch whole (the trainer's default); --maxi-batch N
              # reaches the workers through the environment, as --test-max does
              maxi_batch=int(os.environ.get("TRAIN_QUALITY_MAXI_BATCH", "0")))
# seq2onnx's --init (the trainer's default unless --init says otherwise); HF Marian keeps its own N(0, 0.02)
if "TRAIN_QUALITY_INIT" in os.environ:
    RECIPE["init"] = os.environ["TRAIN_QUALITY_INIT"]
VALID_INTERVAL = 200          # steps, both systems
SYSTEMS = ("seq2onnx", "hf-marian")


# --- shared set-up ----------------------------------------------------------------------------
def prepare(work: Path) -> Dict[str, Path]:
    """The gettext split and the shared tokenizer, made once."""
    from seq2onnx.training.data import read_tsv
    from seq2onnx.training.gettext_data import write_gettext_data
    from seq2onnx.training.tokenizer import train_tokenizer

    data = work / "data"
    paths = {s: data / f"{s}.tsv" for s in ("train", "valid", "test")}
    paths["tokenizer"] = work / "tokenizer.json"
    if not all(p.exists() for p in paths.values()):
        data.mkdir(parents=True, exist_ok=True)
        counts, _ = write_gettext_data(data, "de", overwrite=True)
        print(f"gettext de: {counts}", file=sys.stderr)
        pairs, _ = read_tsv(str(paths["train"]))
        tok = train_tokenizer([s for s, _ in pairs] + [t for _, t in pairs], RECIPE["vocab_size"])
        paths["tokenizer"].write_text(tok.to_str(), encoding="utf-8")
    return paths


def test_scores(translate: Callable[[List[List[int]]], List[str]], tok, test_tsv: Path) -> Dict[str, float]:
    from seq2onnx.training.data import read_tsv
    from seq2onnx.training.evaluate import translation_metrics
    from seq2onnx.training.tokenizer import encode_source, special_ids

    pairs, _ = read_tsv(str(test_tsv))
    pairs = pairs[:int(os.environ.get("TRAIN_QUALITY_TEST_MAX", len(pairs)))]   # a smoke run decodes fewer
    eos = special_ids(tok)["eos_id"]
    sources = [encode_source(tok, s, eos)[:RECIPE["max_len"]] for s, _ in pairs]
    hyps = translate(sources)
    out = translation_metrics(hyps, [t for _, t in pairs])
    out["exact_match"] *= 100
    out["repetitive"] = 100 * sum(_repetitive(h) for h in hyps) / len(hyps)
    return out


def _repetitive(text: str) -> bool:
    """A hypothesis stuck in a loop: some 4-gram of characters makes up over half of it."""
    t = text.replace(" ", "")
    if len(t) < 16:
        return False
    grams = [t[i:i + 4] for i in range(len(t) - 3)]
    return max(grams.count(g) for g in set(grams)) * 4 > len(t) / 2


# --- ablations: the initialisation, one part at a time, on either system -----------------------------
# Each model is built with its own initialisation (seq2onnx's with init="xavier", fairseq's, the baseline of
# bench/results/train_ablation.md), then the named parts are drawn again. Biases 0 and the pad row 0 throughout.
def _marian_init_in_ours(model) -> None:
    """Every Linear and Embedding weight N(0, 0.02) (HF Marian's init_std), in module order."""
    import torch
    for module in model.modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, 0.0, 0.02)
            if getattr(module, "bias", None) is not None:
                torch.nn.init.zeros_(module.bias)
    with torch.no_grad():
        model.src_embed.weight[model.cfg.pad_id].zero_()


def _our_init_in_marian(model) -> None:
    """Xavier-uniform weight matrices, the shared embedding N(0, d^-1/2): seq2onnx's init="xavier"."""
    import torch
    d = model.config.d_model
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() > 1 and "embed" not in name:
            torch.nn.init.xavier_uniform_(p)
    torch.nn.init.normal_(model.model.shared.weight, 0.0, d ** -0.5)
    with torch.no_grad():
        model.model.shared.weight[model.config.pad_token_id].zero_()


def _marian_embedding_in_ours(model) -> None:
    import torch
    torch.nn.init.normal_(model.src_embed.weight, 0.0, 0.02)
    with torch.no_grad():
        model.src_embed.weight[model.cfg.pad_id].zero_()


def _marian_matrices_in_ours(model) -> None:
    """N(0, 0.02) weight matrices, embeddings kept: seq2onnx's init="normal-unit"."""
    import torch
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and m is not model.output_projection:   # that one is the embedding
            torch.nn.init.normal_(m.weight, 0.0, 0.02)


# (system, weight matrices, embedding, the redraw): "own" is the system's own draw
ABLATIONS = [
    ("seq2onnx", "Xavier (own)", "N(0, d^-1/2) (own)", None),
    ("hf-marian", "N(0, 0.02) (own)", "N(0, 0.02) (own)", None),
    ("seq2onnx", "N(0, 0.02)", "N(0, 0.02)", _marian_init_in_ours),
    ("hf-marian", "Xavier", "N(0, d^-1/2)", _our_init_in_marian),
    ("seq2onnx", "Xavier (own)", "N(0, 0.02)", _marian_embedding_in_ours),
    ("seq2onnx", "N(0, 0.02)", "N(0, d^-1/2) (own)", _marian_matrices_in_ours),
]


def ablation_run(paths: Dict[str, Path], system: str, redraw: Optional[Callable], steps: int) -> Dict[str, Any]:
    """`steps` optimizer steps of the recipe on the shared batches, no validation: the training loss and the
    gradient norm before clipping, as means over windows of 25 steps."""
    import torch

    from seq2onnx.runtime.package.config import ModelConfig
    from seq2onnx.training.data import BatchStream, encode_pairs, read_tsv
    from seq2onnx.training.model import Transformer
    from seq2onnx.training.optim import build_optimizer, label_smoothed_loss
    from seq2onnx.training.tokenizer import load_tokenizer, special_ids

    tok = load_tokenizer(str(paths["tokenizer"]))
    ids = special_ids(tok)
    cfg = ModelConfig.preset(RECIPE["preset"], vocab_size=tok.get_vocab_size(), **ids)
    torch.manual_seed(RECIPE["seed"])
    if system == "seq2onnx":
        model = Transformer(cfg, init="xavier")
        forward = model
    else:
        from transformers import MarianMTModel
        from transformers.utils import logging as hf_logging

        from bench.hf_marian import marian_config
        hf_logging.set_verbosity_error()
        hf_cfg = marian_config(cfg)
        hf_cfg.dropout = cfg.dropout
        model = MarianMTModel(hf_cfg)
        forward = MarianAdapter(model, cfg)
    if redraw is not None:
        redraw(model)
    optimizer, scheduler = build_optimizer(model, cfg.d_model, RECIPE["warmup_steps"], 1.0, RECIPE["adam_betas"],
                                           RECIPE["adam_eps"])
    pairs, counts = read_tsv(str(paths["train"]))
    stream = BatchStream(encode_pairs(tok, pairs, ids["eos_id"], RECIPE["max_len"], counts)[0],
                         RECIPE["max_tokens"], RECIPE["seed"], ids, maxi_batch=RECIPE["maxi_batch"])
    model.train()
    curve, losses, norms = [], [], []
    for step in range(1, steps + 1):
        b = stream.next()
        loss, _ = label_smoothed_loss(forward(b.src_ids, b.src_mask, b.tgt_in), b.labels, cfg.pad_id,
                                      RECIPE["label_smoothing"])
        (loss / b.n_tokens).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), RECIPE["clip_norm"]).item())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        losses.append(loss.item() / b.n_tokens)
        if step % 25 == 0:
            curve.append([step, sum(losses) / len(losses), sum(norms) / len(norms)])
            print(f"{system} step {step}: loss {curve[-1][1]:.3f} grad norm {curve[-1][2]:.2f}",
                  file=sys.stderr, flush=True)
            losses, norms = [], []
    return {"curve": curve}


# --- seq2onnx: its own trainer ------------------------------------------------------------------
def run_seq2onnx(paths: Dict[str, Path], run_dir: Path, budgets: List[float]) -> Dict[str, Any]:
    import torch

    from seq2onnx.training.evaluate import greedy_translations
    from seq2onnx.training.logs import MetricsLog
    from seq2onnx.training.tokenizer import load_tokenizer
    from seq2onnx.training.train import TrainArgs, train

    tok = load_tokenizer(str(paths["tokenizer"]))
    args = dict(out=str(run_dir), train=str(paths["train"]), valid=str(paths["valid"]),
                tokenizer=str(paths["tokenizer"]), threads=1, valid_interval=VALID_INTERVAL, valid_decode_max=0,
                best_metric="loss", keep_last=0, quiet=True, log_interval=50,
                **{k: v for k, v in RECIPE.items() if k != "vocab_size"})
    snapshots, spent = [], 0.0
    for i, budget in enumerate(budgets):
        result = train(TrainArgs(**args, resume=i > 0, max_minutes=budget - spent))
        spent = budget
        model = result.model
        scores = test_scores(lambda src: greedy_translations(model, tok, src, RECIPE["max_len"]), tok, paths["test"])
        snapshots.append({"budget_minutes": budget, "steps": result.step, **scores})
        torch.save(model.state_dict(), run_dir / f"weights_{budget:g}min.pt")
    records = MetricsLog(run_dir / "metrics.jsonl").read()
    return _summary(records, snapshots)


# --- HF Marian: a plain PyTorch loop -------------------------------------------------------------
class MarianAdapter:
    """What training/evaluate.validation_loss needs of a model: .cfg, parameters(), train/eval, forward."""

    def __init__(self, hf, cfg):
        self.hf, self.cfg = hf, cfg

    def __call__(self, src_ids, src_mask, tgt_in):
        return self.hf(input_ids=src_ids, attention_mask=src_mask, decoder_input_ids=tgt_in).logits

    def parameters(self):
        return self.hf.parameters()

    @property
    def training(self):
        return self.hf.training

    def train(self, mode=True):
        self.hf.train(mode)

    def eval(self):
        self.hf.eval()


def run_marian(paths: Dict[str, Path], run_dir: Path, budgets: List[float]) -> Dict[str, Any]:
    import torch
    from transformers import MarianMTModel
    from transformers.utils import logging as hf_logging

    from bench.hf_marian import marian_config
    from seq2onnx.runtime.package.config import ModelConfig
    from seq2onnx.training.data import BatchStream, encode_pairs, read_tsv
    from seq2onnx.training.evaluate import validation_loss
    from seq2onnx.training.logs import MetricsLog
    from seq2onnx.training.optim import build_optimizer, label_smoothed_loss
    from seq2onnx.training.tokenizer import decode, load_tokenizer, special_ids

    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    tok = load_tokenizer(str(paths["tokenizer"]))
    ids = special_ids(tok)
    cfg = ModelConfig.preset(RECIPE["preset"], vocab_size=tok.get_vocab_size(), **ids)
    hf_cfg = marian_config(cfg)
    hf_cfg.dropout = cfg.dropout                      # marian_config is for inference: dropout 0
    torch.manual_seed(RECIPE["seed"])
    hf = MarianMTModel(hf_cfg)
    model = MarianAdapter(hf, cfg)
    optimizer, scheduler = build_optimizer(hf, cfg.d_model, RECIPE["warmup_steps"], 1.0,
                                           RECIPE["adam_betas"], RECIPE["adam_eps"])

    def examples(name):
        pairs, counts = read_tsv(str(paths[name]))
        return encode_pairs(tok, pairs, ids["eos_id"], RECIPE["max_len"], counts)[0]
    stream = BatchStream(examples("train"), RECIPE["max_tokens"], RECIPE["seed"], ids,
                         maxi_batch=RECIPE["maxi_batch"])
    valid = examples("valid")
    run_dir.mkdir(parents=True, exist_ok=True)
    log = MetricsLog(run_dir / "metrics.jsonl")
    log.truncate_after(0)

    def translate(sources):
        hf.eval()
        out: List[str] = [""] * len(sources)
        order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
        with torch.no_grad():
            for start in range(0, len(order), 64):
                idx = order[start:start + 64]
                batch = [sources[i] for i in idx]
                width = max(len(s) for s in batch)
                src = torch.tensor([s + [ids["pad_id"]] * (width - len(s)) for s in batch])
                gen = hf.generate(input_ids=src, attention_mask=(src != ids["pad_id"]).long(), num_beams=1,
                                  do_sample=False, max_new_tokens=min(RECIPE["max_len"], 2 * width + 10),
                                  decoder_start_token_id=ids["bos_id"], eos_token_id=ids["eos_id"],
                                  pad_token_id=ids["pad_id"])
                for i, row in zip(idx, gen.tolist()):
                    row = row[1:]
                    row = row[:row.index(ids["eos_id"])] if ids["eos_id"] in row else row
                    out[i] = decode(tok, [t for t in row if t != ids["pad_id"]])
        hf.train()
        return out

    def validate():
        log.append({"kind": "valid", "step": step,
                    **validation_loss(model, valid, RECIPE["max_tokens"], RECIPE["label_smoothing"])})

    snapshots, step, window, window_tokens, window_start = [], 0, [], 0, time.monotonic()
    spent, t0 = 0.0, time.monotonic()                  # training seconds before t0; the test decodes do not count
    hf.train()
    while True:
        if spent + time.monotonic() - t0 >= 60 * budgets[len(snapshots)]:
            paused = time.monotonic()
            spent += paused - t0
            validate()
            snapshots.append({"budget_minutes": budgets[len(snapshots)], "steps": step,
                              **test_scores(translate, tok, paths["test"])})
            if len(snapshots) == len(budgets):
                break
            t0 = time.monotonic()
            # the open window goes on: its clock skips the snapshot (restarted here, it would keep the tokens of its
            # steps before the snapshot and overstate the window's tokens/s)
            window_start += t0 - paused
        b = stream.next()
        logits = model(b.src_ids, b.src_mask, b.tgt_in)
        loss, _ = label_smoothed_loss(logits, b.labels, cfg.pad_id, RECIPE["label_smoothing"])
        (loss / b.n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), RECIPE["clip_norm"])
        lr = scheduler.get_last_lr()[0]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        step += 1
        window.append(loss.item() / b.n_tokens)
        window_tokens += b.n_tokens
        if step % 50 == 0:                              # as our trainer logs: the window's time includes validation
            log.append({"kind": "train", "step": step, "loss": sum(window) / len(window), "lr": lr,
                        "tokens_per_s": window_tokens / (time.monotonic() - window_start)})
            window, window_tokens, window_start = [], 0, time.monotonic()
        if step % VALID_INTERVAL == 0:
            validate()
    return _summary(log.read(), snapshots)


def _summary(records: List[Dict[str, Any]], snapshots: List[Dict[str, Any]]) -> Dict[str, Any]:
    """Per snapshot: the validation loss at its step and the mean target tokens/s of the windows up to it."""
    train = [r for r in records if r["kind"] == "train"]
    valid = [r for r in records if r["kind"] == "valid"]
    for snap in snapshots:
        speeds = [r["tokens_per_s"] for r in train if r["step"] <= snap["steps"]]
        snap["tokens_per_s"] = sum(speeds) / len(speeds) if speeds else None
        snap["valid_loss"] = [r["loss"] for r in valid if r["step"] <= snap["steps"]][-1]
    return {"snapshots": snapshots,
            "train_curve": [[r["step"], r["loss"]] for r in train],
            "valid_curve": [[r["step"], r["loss"]] for r in valid]}


RUNNERS = {"seq2onnx": run_seq2onnx, "hf-marian": run_marian}


# --- driver ---------------------------------------------------------------------------------------
def worker(ns) -> None:
    import torch
    torch.set_num_threads(1)
    paths = prepare(Path(ns.work))
    t0 = time.monotonic()
    if ns.ablation is not None:
        system, _, _, redraw = ABLATIONS[ns.ablation]
        out = ablation_run(paths, system, redraw, ns.steps)
    else:
        out = RUNNERS[ns.system](paths, Path(ns.run_dir), ns.minutes)
    out["wall_s"] = time.monotonic() - t0
    Path(ns.result).write_text(json.dumps(out), encoding="utf-8")


def launch(work: Path, tag: str, *args: str) -> subprocess.Popen:
    run_dir = work / "runs" / tag
    if run_dir.exists():
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
    cmd = [sys.executable, __file__, "--worker", "--work", str(work), "--run-dir", str(run_dir),
           "--result", str(work / f"{tag}.json"), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(cmd, env=env)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, nargs="+", default=[20.0, 60.0])
    p.add_argument("--steps", type=int, help="with --ablate: steps per run")
    p.add_argument("--ablate", type=int, nargs="*", metavar="I",
                   help="run these rows of ABLATIONS (default all): " +
                        "; ".join(f"{i}: {a[0]}, {a[1]}, {a[2]}" for i, a in enumerate(ABLATIONS)))
    p.add_argument("--work", default=str(WORK))
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the last run's results")
    p.add_argument("--test-max", type=int, help="decode only the first N test pairs (a smoke run)")
    p.add_argument("--maxi-batch", type=int, help="batches sorted together, both systems (default 0: the whole "
                                                      "epoch, as the recorded run)")
    p.add_argument("--init", help="seq2onnx's weight init (training/model.py INITS; default: the trainer's)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--system", choices=SYSTEMS, help=argparse.SUPPRESS)
    p.add_argument("--ablation", type=int, help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    ns = p.parse_args()
    if ns.worker:
        worker(ns)
        return
    work = Path(ns.work)
    if ns.test_max:
        os.environ["TRAIN_QUALITY_TEST_MAX"] = str(ns.test_max)
    if ns.maxi_batch is not None:
        os.environ["TRAIN_QUALITY_MAXI_BATCH"] = str(ns.maxi_batch)
        RECIPE["maxi_batch"] = ns.maxi_batch
    if ns.init is not None:
        os.environ["TRAIN_QUALITY_INIT"] = RECIPE["init"] = ns.init
    prepare(work)
    if ns.ablate is not None:
        ablate(work, ns.ablate or list(range(len(ABLATIONS))), ns.steps or 800)
    else:
        duel(work, sorted(ns.minutes), ns.report_only)


def _pairs(work: Path, jobs: List[tuple]) -> List[Dict[str, Any]]:
    """Run the (tag, worker args...) jobs two at a time (one per core) -> their results, in order."""
    results = []
    for i in range(0, len(jobs), 2):
        procs = [(job[0], launch(work, *job)) for job in jobs[i:i + 2]]
        for tag, proc in procs:
            if proc.wait() != 0:
                raise SystemExit(f"worker {tag} failed")
            results.append(json.loads((work / f"{tag}.json").read_text()))
    return results


def ablate(work: Path, rows: List[int], steps: int) -> None:
    jobs = [(f"ablate-{i}", "--ablation", str(i), "--steps", str(steps)) for i in rows]
    marks = [m for m in (200, 400, 600, 700, 800, 1000, 1500, 2000) if m <= steps]
    table = []
    for i, res in zip(rows, _pairs(work, jobs)):
        system, matrices, embedding, _ = ABLATIONS[i]
        at = {int(s): loss for s, loss, _ in res["curve"]}
        table.append({"system": system, "matrices": matrices, "embedding": embedding, "steps": steps,
                      "train_loss": {m: at[m] for m in marks}, "curve": res["curve"]})
    lines = ["| system | weight matrices | embedding | " + " | ".join(f"loss @{m}" for m in marks) + " |",
             "|---|---|---|" + "---:|" * len(marks)]
    lines += [f"| {r['system']} | {r['matrices']} | {r['embedding']} | " +
              " | ".join(f"{r['train_loss'][m]:.2f}" for m in marks) + " |" for r in table]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "train_ablation.json").write_text(json.dumps({"recipe": RECIPE, "rows": table}, indent=2) + "\n")
    (RESULTS / "train_ablation.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def duel(work: Path, budgets: List[float], report_only: bool = False) -> None:
    jobs = [(f"duel-{system}", "--system", system, "--minutes", *map(str, budgets)) for system in SYSTEMS]
    if report_only:                     # the workers' results of the last run, reported again
        results = {system: json.loads((work / f"duel-{system}.json").read_text()) for system in SYSTEMS}
    else:
        results = dict(zip(SYSTEMS, _pairs(work, jobs)))
    runs = []
    for budget in budgets:
        for system in SYSTEMS:
            snap = next(s for s in results[system]["snapshots"] if s["budget_minutes"] == budget)
            runs.append({"system": system, **{k: snap[k] for k in ("budget_minutes", "steps", "tokens_per_s",
                         "valid_loss", "chrf", "bleu", "exact_match", "repetitive")}})
    head = ["| budget | system | steps | target tokens/s | valid loss | chrF | BLEU | exact % | looping % |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines = head + [f"| {r['budget_minutes']:g} min | {r['system']} | {r['steps']} | {r['tokens_per_s'] or 0:.0f} | "
                    f"{r['valid_loss']:.3f} | {r['chrf']:.1f} | {r['bleu']:.1f} | {r['exact_match']:.1f} | "
                    f"{r['repetitive']:.1f} |" for r in runs]
    for budget in budgets:
        ours, peer = (next(r for r in runs if r["system"] == s and r["budget_minutes"] == budget) for s in SYSTEMS)
        lines.append(f"\n{budget:g} min, seq2onnx / hf-marian: chrF {ours['chrf'] - peer['chrf']:+.1f}, "
                     f"BLEU {ours['bleu'] - peer['bleu']:+.1f}, tokens/s x{(ours['tokens_per_s'] or 0) / (peer['tokens_per_s'] or 1):.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    curves = {s: results[s]["valid_curve"] for s in SYSTEMS}
    (RESULTS / "train_quality.json").write_text(json.dumps(
        {"recipe": RECIPE, "valid_interval": VALID_INTERVAL, "runs": runs, "valid_curves": curves}, indent=2) + "\n")
    (RESULTS / "train_quality.md").write_text("\n".join(lines) + "\n")
    plot(curves, budgets, runs, RESULTS / "train_quality.png")
    print("\n".join(lines))


def plot(curves: Dict[str, List[List[float]]], budgets: List[float], runs: List[Dict[str, Any]], png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for k, (system, curve) in enumerate(curves.items()):
        line, = ax.plot([s for s, _ in curve], [v for _, v in curve], label=system)
        for r in runs:
            if r["system"] == system:
                ax.axvline(r["steps"], color=line.get_color(), ls=":", lw=0.8)
                ax.annotate(f"{r['budget_minutes']:g} min: chrF {r['chrf']:.1f}", (r["steps"], r["valid_loss"]),
                            textcoords="offset points", xytext=(4, 14 - 22 * k), color=line.get_color(), fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (label-smoothed, per token)")
    ax.set_title("gettext en->de, --preset small, one thread each, side by side")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


if __name__ == "__main__":
    main()
