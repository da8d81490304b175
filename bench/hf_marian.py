"""Map a seq2onnx checkpoint onto a HuggingFace `MarianMTModel`, exactly.

MarianMT is the Transformer of the paper, post-norm, with shared embeddings scaled by sqrt(D) and
tied to the output projection. Checked against transformers' modeling_marian.py, one by one:

  * LayerNorm placement: post-norm, LayerNorm(x + Sublayer(x)), no final LayerNorm and no
    LayerNorm on the embeddings -> same as ours with norm_first=False (pre-norm cannot be mapped).
  * embedding scale: scale_embedding=True multiplies by sqrt(d_model) -> same.
  * final_logits_bias: a zero buffer -> same as our bias-free output projection.
  * activation: relu (Marian's config default is swish/gelu; set explicitly).
  * LayerNorm epsilon: fixed at 1e-5 in Marian -> ours must be 1e-5.
  * attention: q scaled by head_dim^-0.5, heads = contiguous slices of D -> same.
  * the sinusoidal table is NOT the same layout: ours interleaves (sin, cos, sin, cos, ...), Marian
    puts all sines in the first half and all cosines in the second. Marian recomputes its table when
    a model is loaded (it is not saved), so it cannot be overwritten. Instead the model width is
    permuted: Marian's feature j is our feature PERM[j] (PERM = 0, 2, 4, ..., 1, 3, 5, ...).
    LayerNorm and every linear map are equivariant to a permutation of the residual stream when their
    weights are permuted alike, so the permuted model computes the same function (up to float
    summation order): embeddings and the tied projection get their columns permuted, linears reading
    the stream their input columns, linears writing it their output rows, LayerNorms their gamma/beta.
  * decoding: decoder_start_token_id = our BOS; forced_eos_token_id = None (Marian's default forces
    EOS at the last step, which would cut the fixed-length runs short).
`marian_from_transformer` checks the permuted table against Marian's own before returning.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):          # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.base_model import atomic_folder, load_model  # noqa: E402
from seq2onnx.runtime.package.config import ModelConfig  # noqa: E402
from seq2onnx.training.model import MultiHeadAttention, SubLayer, Transformer  # noqa: E402


def check_mappable(cfg: ModelConfig) -> None:
    problems = []
    if cfg.norm_first:
        problems.append("norm_first=True (Marian is post-norm)")
    if abs(cfg.layer_norm_eps - 1e-5) > 1e-12:
        problems.append(f"layer_norm_eps={cfg.layer_norm_eps} (Marian uses 1e-5)")
    if not (cfg.share_embeddings and cfg.tie_output_embedding):
        problems.append("untied embeddings (mapped here: shared source/target/output embedding only)")
    if problems:
        raise ValueError("this model cannot be mapped exactly onto MarianMT: " + "; ".join(problems))


def width_permutation(d_model: int) -> torch.Tensor:
    """PERM [D]: Marian feature j is our feature PERM[j] (sines first, then cosines)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def marian_config(cfg: ModelConfig):
    from transformers import MarianConfig

    check_mappable(cfg)
    return MarianConfig(
        vocab_size=cfg.vocab_size, decoder_vocab_size=cfg.vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers, decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff, decoder_ffn_dim=cfg.d_ff, activation_function="relu",
        max_position_embeddings=cfg.max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        pad_token_id=cfg.pad_id, bos_token_id=cfg.bos_id, eos_token_id=cfg.eos_id,
        decoder_start_token_id=cfg.bos_id, forced_eos_token_id=None)


@torch.no_grad()
def _copy_linear(dst: torch.nn.Linear, src: torch.nn.Linear, perm: torch.Tensor, reads: bool) -> None:
    """reads=True: src reads the residual stream (permute input columns), else writes it (output rows)."""
    if reads:
        dst.weight.copy_(src.weight[:, perm])
        dst.bias.copy_(src.bias)
    else:
        dst.weight.copy_(src.weight[perm, :])
        dst.bias.copy_(src.bias[perm])


@torch.no_grad()
def _copy_norm(dst: torch.nn.LayerNorm, src: SubLayer, perm: torch.Tensor) -> None:
    dst.weight.copy_(src.norm.weight[perm])
    dst.bias.copy_(src.norm.bias[perm])


def _copy_attention(dst, src: MultiHeadAttention, perm: torch.Tensor) -> None:
    for name in ("q_proj", "k_proj", "v_proj"):
        _copy_linear(getattr(dst, name), getattr(src, name), perm, reads=True)
    _copy_linear(dst.out_proj, src.out_proj, perm, reads=False)


@torch.no_grad()
def marian_from_transformer(model: Transformer):
    """A MarianMTModel (eval) computing the same function as model."""
    from transformers import MarianMTModel

    cfg = model.cfg
    hf = MarianMTModel(marian_config(cfg)).eval()
    perm = width_permutation(cfg.d_model)

    ours_pe = model.pe[:, perm]                                                     # [P, D]
    for table in (hf.model.encoder.embed_positions.weight, hf.model.decoder.embed_positions.weight):
        diff = (table - ours_pe).abs().max().item()
        if diff > 1e-5:
            raise AssertionError(f"Marian's sinusoidal table differs from ours permuted by {diff}")

    hf.model.shared.weight.copy_(model.src_embed.weight[:, perm])                  # tied to lm_head
    hf.final_logits_bias.zero_()
    for dst, src in zip(hf.model.encoder.layers, model.encoder_layers):
        _copy_attention(dst.self_attn, src.self_attn, perm)
        _copy_norm(dst.self_attn_layer_norm, src.sub_attn, perm)
        _copy_linear(dst.fc1, src.ffn.w1, perm, reads=True)
        _copy_linear(dst.fc2, src.ffn.w2, perm, reads=False)
        _copy_norm(dst.final_layer_norm, src.sub_ffn, perm)
    for dst, src in zip(hf.model.decoder.layers, model.decoder_layers):
        _copy_attention(dst.self_attn, src.self_attn, perm)
        _copy_norm(dst.self_attn_layer_norm, src.sub_self, perm)
        _copy_attention(dst.encoder_attn, src.cross_attn, perm)
        _copy_norm(dst.encoder_attn_layer_norm, src.sub_cross, perm)
        _copy_linear(dst.fc1, src.ffn.w1, perm, reads=True)
        _copy_linear(dst.fc2, src.ffn.w2, perm, reads=False)
        _copy_norm(dst.final_layer_norm, src.sub_ffn, perm)
    tied = (hf.lm_head.weight, hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight)
    if not all(torch.equal(t, hf.model.shared.weight) for t in tied):
        raise AssertionError("MarianMTModel did not tie lm_head / embed_tokens to the shared embedding")
    return hf


@torch.no_grad()
def marian_log_probs(hf, cfg: ModelConfig, sources, targets) -> np.ndarray:
    """The Marian model's teacher-forced log p(label), labels = target + [EOS]: [B, T+1] (compare with
    base_model.reference_log_probs)."""
    src = torch.tensor([list(s) for s in sources], dtype=torch.long)
    tgt = torch.tensor([list(t) for t in targets], dtype=torch.long)
    b = src.shape[0]
    tgt_in = torch.cat([torch.full((b, 1), cfg.bos_id), tgt], dim=1)
    labels = torch.cat([tgt, torch.full((b, 1), cfg.eos_id)], dim=1)
    logits = hf(input_ids=src, attention_mask=torch.ones_like(src), decoder_input_ids=tgt_in).logits
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[..., None])[..., 0].numpy()


def save_marian(checkpoint: Path, out_dir: Path) -> Path:
    """save_pretrained the mapped model into out_dir (temp folder beside, then rename)."""
    from transformers.utils import logging as hf_logging

    hf = marian_from_transformer(load_model(checkpoint))
    hf_logging.disable_progress_bar()
    return atomic_folder(out_dir, lambda tmp: hf.save_pretrained(str(tmp)))
