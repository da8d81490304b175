"""The benchmarked model: a Transformer with random weights, a WordLevel tokenizer, a checkpoint.

Speed does not depend on what the weights learned, so the benchmark needs no training run: the
model is built from a ModelConfig preset with a fixed seed and saved in the checkpoint format of
docs/CONTRACTS.md, which every system below is built from (our exporter, the CTranslate2 and
Marian converters, our PyTorch reference).

The model's own initialisation gives a degenerate random model: its output hardly depends on the
input (one token repeated, the same for most sources), which makes token comparisons between
engines weak. random_model() reshapes the random weights so that the greedy output varies with the
source and the step (at base size ~14 distinct tokens in 24 steps) while staying well conditioned
(float32 and float64 teacher-forced log-probs agree to ~2e-5, so engines agree up to real near-ties):
  * embeddings x2: the token signal outweighs the near-constant low-frequency sinusoid dimensions;
  * q_proj x2: less uniform attention (uniform attention averages token information away);
  * FFN w2 rows centred: removes the input-independent part W2 . mean(ReLU(...));
  * decoder FFN w2 x8 and cross-attention out_proj x0.3: the next token depends on the current one
    more than on the (step-independent) source summary;
  * biases ~ N(0, 0.05) and LayerNorm gamma ~ 1 + N(0, 0.1) (the init sets them to 0 and 1), so a
    converter that drops a bias or swaps a LayerNorm is caught.
Sharper settings (q x8) gave more varied outputs but an ill-conditioned model (fp32 vs fp64 log-probs
differing by ~1), on which no two engines agree.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import List, Sequence

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.training import checkpoint
from seq2onnx.training.model import Transformer

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]   # ids 0..3, as the config's pad/bos/eos/unk ids say
RECIPE = "random_model v3"                      # change when random_model changes: rebuilds cached models


@dataclass
class BenchModel:
    """What every engine adapter is built from."""
    checkpoint: Path          # seq2onnx checkpoint (*.pt)
    config: ModelConfig
    tokens: List[str]         # id -> token string (CTranslate2 speaks in token strings)
    key: str                  # identifies recipe + config + seed: artifacts built from it are reused


def make_tokenizer(vocab_size: int) -> Tokenizer:
    """A WordLevel tokenizer of exactly vocab_size entries: the 4 specials, then w4, w5, ..."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(SPECIALS)
    return tok


def random_model(cfg: ModelConfig, seed: int) -> Transformer:
    """The model's own initialisation, reshaped so the output depends on the input (module doc)."""
    torch.manual_seed(seed)
    model = Transformer(cfg, init="xavier").eval()   # the weights every recorded benchmark ran on
    with torch.no_grad():
        for name, p in model.named_parameters():     # tied embeddings are listed once
            if "embed" in name:
                p.mul_(2.0)
            elif name.endswith("q_proj.weight"):
                p.mul_(2.0)
            elif name.endswith("w2.weight"):            # [D, d_ff]: each output row sums to 0
                p.sub_(p.mean(dim=1, keepdim=True))
                if name.startswith("decoder"):
                    p.mul_(8.0)
            elif "cross_attn.out_proj.weight" in name:
                p.mul_(0.3)
            elif name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.1)
            elif name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.05)
    return model


def atomic_write(path: Path, write) -> None:
    """write(tmp_path) into a temp file beside path, then os.replace it onto path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def atomic_folder(out_dir: Path, write) -> Path:
    """write(tmp_folder) into a temp folder beside out_dir, then swap it in place of out_dir."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=out_dir.name + ".tmp"))
    try:
        write(tmp)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def save_checkpoint(model: Transformer, tokenizer: Tokenizer, path: Path, seed: int) -> None:
    """The CONTRACTS.md checkpoint (training/checkpoint.py writes it, atomically)."""
    ckpt = checkpoint.make_checkpoint(model.cfg, model.state_dict(), tokenizer.to_str(), step=0, epoch=0,
                                      metrics={}, args={"random_weights_seed": seed})
    path.parent.mkdir(parents=True, exist_ok=True)
    checkpoint.save_checkpoint(ckpt, path)


def prepare(folder: Path, preset: str = "base", vocab_size: int = 8000, seed: int = 0) -> BenchModel:
    """Build (or reuse, when the same preset/vocab/seed is cached) the benchmark checkpoint in folder."""
    cfg = ModelConfig.preset(preset, vocab_size=vocab_size, dropout=0.0)
    ckpt = folder / "model.pt"
    stamp = folder / "model.json"
    wanted = {"recipe": RECIPE, "preset": preset, "vocab_size": vocab_size, "seed": seed, "config": cfg.to_dict()}
    tokenizer = make_tokenizer(vocab_size)
    if not (ckpt.exists() and stamp.exists() and json.loads(stamp.read_text()) == wanted):
        save_checkpoint(random_model(cfg, seed), tokenizer, ckpt, seed)
        atomic_write(stamp, lambda tmp: Path(tmp).write_text(json.dumps(wanted, indent=1)))
    tokens = [tokenizer.id_to_token(i) for i in range(vocab_size)]
    key = hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]
    return BenchModel(ckpt, cfg, tokens, key)


def load_model(path: Path) -> Transformer:
    """The PyTorch model of a checkpoint, in eval mode."""
    ckpt = checkpoint.load_checkpoint(path)
    model = Transformer(ModelConfig.from_dict(ckpt["config"]))
    model.load_state_dict(ckpt["model"])
    return model.eval()


@torch.no_grad()
def reference_log_probs(model: Transformer, sources: Sequence[Sequence[int]],
                        targets: Sequence[Sequence[int]]) -> np.ndarray:
    """Teacher-forced log p(label) at every target position, labels = target + [EOS].

    sources: equal-length id lists (no padding); targets: equal-length id lists. -> [B, T+1]
    The converters are checked against this: it tests every weight at every position.
    """
    cfg = model.cfg
    src = torch.tensor([list(s) for s in sources], dtype=torch.long)                # [B, S]
    tgt = torch.tensor([list(t) for t in targets], dtype=torch.long)                # [B, T]
    b = src.shape[0]
    tgt_in = torch.cat([torch.full((b, 1), cfg.bos_id), tgt], dim=1)                 # [B, T+1]
    labels = torch.cat([tgt, torch.full((b, 1), cfg.eos_id)], dim=1)                 # [B, T+1]
    logp = torch.log_softmax(model(src, torch.ones_like(src), tgt_in).float(), dim=-1)   # [B, T+1, V]
    return logp.gather(-1, labels[..., None])[..., 0].numpy()
