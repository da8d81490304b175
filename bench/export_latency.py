"""Export time and per-step decoder latency: the ONNX step graph vs PyTorch `decode_step`, side by side.

    python bench/export_latency.py                       # presets tiny, small, base; opset 18
    python bench/export_latency.py --presets small --opsets 18 20 --batch 1 8

For each preset, a model with random weights (fixed seed) is saved as a checkpoint and exported with
`seq2onnx export` (run_export: trace, check, parity, write; fp32 only), then one decoder step is timed
at each batch size, with a cache of --past positions and a source of --src positions:
  * torch: model.decode_step (torch.set_num_threads(--threads), inference mode)
  * onnx:  decoder_step.onnx in onnxruntime, CPU provider, intra_op_num_threads=--threads
Reported: the median of 3 rounds x --reps timed calls (each block after --warmup calls), the two systems
timed in alternating blocks.
A second table times creating the decoder session from the plain graph (ORT optimises it at every load)
and from the graph onnxruntime saved after ORT_ENABLE_ALL optimisation (optimized_model_filepath),
with the step latency of both and whether the saved graph holds contrib (com.microsoft) ops, which
ties it to onnxruntime builds and providers that have them.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import onnx
import onnxruntime as ort
import torch

from seq2onnx.export.commands import ExportOptions, run_export
from seq2onnx.export.onnx_export import GraphNames
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.training.checkpoint import make_checkpoint, save_checkpoint
from seq2onnx.training.model import Transformer

VOCAB = {"tiny": 1000, "small": 8000, "base": 8000}


def word_tokenizer_json(vocab_size: int) -> str:
    """A WordLevel tokenizer <pad> <s> </s> <unk> w4 ... w{V-1}: specials at the ids ModelConfig expects."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>"])}
    vocab.update({f"w{i}": i for i in range(4, vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok.to_str()


def session(path: Path, threads: int, level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            save_to: Path = None) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.graph_optimization_level = level
    if save_to is not None:
        opts.optimized_model_filepath = str(save_to)
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def step_inputs(cfg: ModelConfig, batch: int, src: int, past: int):
    g = torch.Generator().manual_seed(0)
    h, dh, n = cfg.n_heads, cfg.head_dim, cfg.decoder_layers
    ids = torch.randint(4, cfg.vocab_size, (batch, 1), generator=g)
    mask = torch.ones(batch, src, dtype=torch.long)
    pasts = [(torch.randn(batch, h, past, dh, generator=g), torch.randn(batch, h, past, dh, generator=g))
             for _ in range(n)]
    cross = [(torch.randn(batch, h, src, dh, generator=g), torch.randn(batch, h, src, dh, generator=g))
             for _ in range(n)]
    names = GraphNames.for_config(cfg)
    flat = [t.numpy() for kv in pasts for t in kv] + [t.numpy() for kv in cross for t in kv]
    feed = dict(zip(names.decoder_inputs, [ids.numpy(), mask.numpy()] + flat))
    return (ids, mask, pasts, cross), feed


def time_steps(model: Transformer, sess: ort.InferenceSession, cfg: ModelConfig, batch: int, src: int, past: int,
               warmup: int, reps: int, rounds: int = 3) -> Dict[str, float]:
    """Median ms of one decoder step. Each round times a block of torch calls then a block of onnx calls
    (blocks, not alternating calls: one library's idle worker threads spinning would slow the other)."""
    torch_args, feed = step_inputs(cfg, batch, src, past)
    calls = {"torch": lambda: model.decode_step(*torch_args), "onnx": lambda: sess.run(None, feed)}
    times: Dict[str, List[float]] = {"torch": [], "onnx": []}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, call in calls.items():
                time.sleep(0.3)            # let the other library's worker threads go idle
                for i in range(warmup + reps):
                    t = time.perf_counter()
                    call()
                    if i >= warmup:
                        times[name].append(time.perf_counter() - t)
    return {k: 1000 * statistics.median(v) for k, v in times.items()}


def contrib_ops(path: Path) -> List[str]:
    return sorted({n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node
                   if n.domain not in ("", "ai.onnx")})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=["tiny", "small", "base"], choices=list(VOCAB))
    p.add_argument("--opsets", nargs="+", type=int, default=[18])
    p.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    p.add_argument("--src", type=int, default=32)
    p.add_argument("--past", type=int, default=32)
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads of both (1: on a small shared machine, OpenMP threads that wait "
                        "for a descheduled sibling make torch many times slower)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=50)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    rows, load_rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in a.presets:
            cfg = ModelConfig.preset(preset, vocab_size=VOCAB[preset], dropout=0.0)
            torch.manual_seed(0)
            model = Transformer(cfg).eval()
            ckpt = Path(tmp) / f"{preset}.pt"
            save_checkpoint(make_checkpoint(cfg, model.state_dict(), word_tokenizer_json(cfg.vocab_size), 0, 0,
                                            {}, {}), ckpt)
            for opset in a.opsets:
                out = Path(tmp) / f"{preset}-{opset}"
                result = run_export(ExportOptions(ckpt, out, opset=opset),
                                    log=lambda m: print(f"  {preset} opset {opset}: {m}", file=sys.stderr))
                torch.set_num_threads(a.threads)
                dec = out / "decoder_step.onnx"
                sess = session(dec, a.threads)
                for batch in a.batch:
                    ms = time_steps(model, sess, cfg, batch, a.src, a.past, a.warmup, a.reps)
                    rows.append((preset, f"{model.num_parameters() / 1e6:.1f}M", opset, result.seconds,
                                 result.stage_seconds.get("trace", 0.0), batch, ms["torch"], ms["onnx"]))
                # the ORT-optimised graph: load time, step latency, portability
                saved = out.parent / f"{out.name}-decoder_step.ortopt.onnx"
                t = time.perf_counter()
                session(dec, a.threads, save_to=saved)
                load_plain = time.perf_counter() - t
                t = time.perf_counter()
                sess_opt = session(saved, a.threads, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
                load_opt = time.perf_counter() - t
                ms_plain = time_steps(model, sess, cfg, 1, a.src, a.past, a.warmup, a.reps)["onnx"]
                ms_opt = time_steps(model, sess_opt, cfg, 1, a.src, a.past, a.warmup, a.reps)["onnx"]
                load_rows.append((preset, opset, 1000 * load_plain, 1000 * load_opt, ms_plain, ms_opt,
                                  ", ".join(contrib_ops(saved)) or "none"))
    print(f"\nDecoder step latency, median of {a.reps} (src {a.src}, past {a.past}, {a.threads} threads, "
          f"onnxruntime {ort.__version__}, torch {torch.__version__})\n")
    print("| preset | params | opset | export s (trace s) | batch | torch decode_step ms | onnx step ms | torch/onnx |")
    print("|---|---|---|---|---|---|---|---|")
    for preset, params, opset, export_s, trace_s, batch, t_ms, o_ms in rows:
        print(f"| {preset} | {params} | {opset} | {export_s:.1f} ({trace_s:.1f}) | {batch} | {t_ms:.3f} | "
              f"{o_ms:.3f} | {t_ms / o_ms:.2f}x |")
    print("\nDecoder session load and batch-1 step: plain graph vs the graph saved after ORT_ENABLE_ALL\n")
    print("| preset | opset | load plain ms | load pre-optimised ms | step plain ms | step pre-optimised ms "
          "| contrib ops in the saved graph |")
    print("|---|---|---|---|---|---|---|")
    for preset, opset, lp, lo, sp, so, ops in load_rows:
        print(f"| {preset} | {opset} | {lp:.0f} | {lo:.0f} | {sp:.3f} | {so:.3f} | {ops} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
