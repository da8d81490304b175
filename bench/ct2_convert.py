"""Convert a seq2onnx checkpoint into a CTranslate2 model, weight for weight.

CTranslate2's TransformerSpec describes exactly this architecture; the converter sets every
variable of the spec from our state dict:

  ours                                   CTranslate2 spec
  src_embed / tgt_embed  [V, D]          encoder.embeddings[0] / decoder.embeddings  (scale_embeddings: x sqrt(D))
  pe (sinusoidal, interleaved) [P, D]    encoder/decoder.position_encodings.encodings (given explicitly)
  self_attn q,k,v_proj  [D, D] each      self_attention.linear[0]  fused [3D, D]
  self_attn out_proj                     self_attention.linear[1]
  cross_attn q_proj                      attention.linear[0]
  cross_attn k,v_proj                    attention.linear[1]       fused [2D, D]
  cross_attn out_proj                    attention.linear[2]
  ffn w1 / w2                            ffn.linear_0 / ffn.linear_1
  sub_self / sub_cross / sub_ffn .norm   self_attention / attention / ffn .layer_norm
  encoder_norm / decoder_norm (pre-norm) encoder / decoder .layer_norm
  output_projection [V, D] (no bias)     decoder.projection

post-norm (norm_first False) maps to pre_norm=False, where CTranslate2 computes
LayerNorm(x + Sublayer(x)) and has no final LayerNorm, as our model does.

The model is saved in float32; CTranslate2 quantizes it to int8 when loaded with compute_type="int8".

    python bench/ct2_convert.py CHECKPOINT OUT_DIR
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List

import numpy as np
import torch

if __package__ in (None, ""):          # run as a script: python bench/ct2_convert.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.base_model import atomic_folder, load_model  # noqa: E402
from seq2onnx.training.checkpoint import load_checkpoint  # noqa: E402
from seq2onnx.training.model import MultiHeadAttention, SubLayer, Transformer  # noqa: E402


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().float().numpy().copy()


def _set_linear(spec, *linears: torch.nn.Linear) -> None:
    """One CTranslate2 linear from one or several of ours, fused along the output dimension."""
    spec.weight = np.concatenate([_np(lin.weight) for lin in linears], axis=0)        # [sum(out), in]
    if all(lin.bias is not None for lin in linears):
        spec.bias = np.concatenate([_np(lin.bias) for lin in linears], axis=0)


def _set_norm(spec, sub: SubLayer) -> None:
    spec.gamma, spec.beta = _np(sub.norm.weight), _np(sub.norm.bias)


def _set_self_attention(spec, attn: MultiHeadAttention, sub: SubLayer) -> None:
    _set_linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj)
    _set_linear(spec.linear[1], attn.out_proj)
    _set_norm(spec.layer_norm, sub)


def transformer_spec(model: Transformer, tokens: List[str]):
    """The ctranslate2 TransformerSpec holding every weight of model; tokens: id -> token string."""
    from ctranslate2.specs import common_spec, transformer_spec as ts

    cfg = model.cfg
    if len(tokens) != cfg.vocab_size:
        raise ValueError(f"the vocabulary has {len(tokens)} tokens but the model {cfg.vocab_size}")
    spec = ts.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers), cfg.n_heads,
        pre_norm=cfg.norm_first, activation=common_spec.Activation.RELU)
    pe = _np(model.pe)                                                              # [max_positions, D]

    enc = spec.encoder
    enc.embeddings[0].weight = _np(model.src_embed.weight)
    enc.scale_embeddings = True                    # Embedding(ids) * sqrt(D), as Transformer._embed
    enc.position_encodings.encodings = pe
    for layer_spec, layer in zip(enc.layer, model.encoder_layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.sub_attn)
        _set_linear(layer_spec.ffn.linear_0, layer.ffn.w1)
        _set_linear(layer_spec.ffn.linear_1, layer.ffn.w2)
        _set_norm(layer_spec.ffn.layer_norm, layer.sub_ffn)

    dec = spec.decoder
    dec.embeddings.weight = _np(model.tgt_embed.weight)
    dec.scale_embeddings = True
    dec.position_encodings.encodings = pe
    dec.start_from_zero_embedding = False          # the first decoder input is BOS, embedded as usual
    for layer_spec, layer in zip(dec.layer, model.decoder_layers):
        _set_self_attention(layer_spec.self_attention, layer.self_attn, layer.sub_self)
        cross = layer_spec.attention
        _set_linear(cross.linear[0], layer.cross_attn.q_proj)
        _set_linear(cross.linear[1], layer.cross_attn.k_proj, layer.cross_attn.v_proj)
        _set_linear(cross.linear[2], layer.cross_attn.out_proj)
        _set_norm(cross.layer_norm, layer.sub_cross)
        _set_linear(layer_spec.ffn.linear_0, layer.ffn.w1)
        _set_linear(layer_spec.ffn.linear_1, layer.ffn.w2)
        _set_norm(layer_spec.ffn.layer_norm, layer.sub_ffn)
    _set_linear(dec.projection, model.output_projection)

    if cfg.norm_first:                             # pre-norm stacks end with a LayerNorm
        for spec_norm, norm in ((enc.layer_norm, model.encoder_norm), (dec.layer_norm, model.decoder_norm)):
            spec_norm.gamma, spec_norm.beta = _np(norm.weight), _np(norm.bias)

    spec.config.unk_token = tokens[cfg.unk_id]
    spec.config.bos_token = tokens[cfg.bos_id]
    spec.config.eos_token = tokens[cfg.eos_id]
    spec.config.decoder_start_token = tokens[cfg.bos_id]   # decoding starts from BOS (CONTRACTS.md)
    spec.config.add_source_bos = False                     # our sources already end with EOS
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    return spec


def convert(checkpoint: Path, out_dir: Path, tokens: List[str]) -> Path:
    """Write the CTranslate2 model folder out_dir (temp folder beside, then rename)."""
    spec = transformer_spec(load_model(checkpoint), tokens)
    spec.validate()
    spec.optimize(quantization="float32")
    return atomic_folder(out_dir, lambda tmp: spec.save(str(tmp)))


def checkpoint_tokens(path: Path) -> List[str]:
    """id -> token string, from the tokenizer stored in the checkpoint."""
    from tokenizers import Tokenizer

    ckpt = load_checkpoint(path)
    tok = Tokenizer.from_str(ckpt["tokenizer"])
    n = ckpt["config"]["vocab_size"]
    tokens = [tok.id_to_token(i) for i in range(n)]
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        raise ValueError(f"the tokenizer has no token for ids {missing[:5]}...: it must cover the model's {n} ids")
    return tokens


def score(translator, tokens: List[str], sources, targets) -> np.ndarray:
    """CTranslate2's teacher-forced log p(label), labels = target + [EOS]: [B, T+1] (compare with
    base_model.reference_log_probs)."""
    res = translator.score_batch([[tokens[i] for i in s] for s in sources], [[tokens[i] for i in t] for t in targets])
    return np.array([r.log_probs for r in res], dtype=np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out_dir", type=Path)
    args = ap.parse_args(argv)
    print(convert(args.checkpoint, args.out_dir, checkpoint_tokens(args.checkpoint)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
