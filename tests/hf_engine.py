"""An Engine (runtime/engine/base.py) that runs a transformers encoder-decoder model itself, so that the
runtime's one decoding loop (decode_steps: its searches and filters) can be compared with that model's own
generate(): the same float32 log-probs on both sides, the search rules alone differ.

    encode(input_ids [B, S], attention_mask [B, S]) -> (encoder mask [B, S], [encoder states [B, S, d]])
    step(input_ids [R, 1], encoder_mask [R, S], past, cross [R, S, d]) -> (log_probs [R, V] numpy, past)
        past: [the model's EncoderDecoderCache], whose rows follow the R rows
    take(values, index [R']) -> values gathered along axis 0 (the cache reordered in place: one owner)

Also the tiny random models the tests build (`tiny_marian`, `tiny_m2m100`): d_model 64, 2 layers, a vocabulary of
300, weights N(0, 0.12) (large enough that the output depends on the input), and a pull towards EOS after some
tokens (`_pull_to_eos`), so that hypotheses end at varied lengths. Test code only: the runtime never imports torch.
"""
from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import torch

from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.engine.base import Engine

VOCAB = 300


class HFEngine(Engine):
    """decode_steps' Engine over a transformers *ForConditionalGeneration model (eval mode, CPU, float32)."""

    def __init__(self, model: Any):
        self.model = model.eval()

    @torch.no_grad()
    def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> Tuple[Any, List[Any]]:
        ids, mask = torch.from_numpy(input_ids), torch.from_numpy(attention_mask)
        states = self.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state   # [B, S, d]
        return mask, [states]

    @torch.no_grad()
    def step(self, input_ids: np.ndarray, encoder_mask: Any, past: Optional[List[Any]], cross: List[Any],
             with_attention: bool = False) -> Tuple[Any, ...]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache

        cache = past[0] if past is not None else EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self.model(encoder_outputs=(cross[0],), attention_mask=encoder_mask,
                         decoder_input_ids=torch.from_numpy(np.ascontiguousarray(input_ids)),
                         past_key_values=cache, use_cache=True, return_dict=True)
        # as generate: the last position's logits in float32, then log_softmax
        logits = out.logits[:, -1, :].to(dtype=torch.float32)
        log_probs = torch.nn.functional.log_softmax(logits, dim=-1)                          # [R, V]
        return log_probs.numpy().copy(), [out.past_key_values]

    def take(self, values: List[Any], index: np.ndarray) -> List[Any]:
        idx = torch.from_numpy(np.asarray(index, dtype=np.int64))
        taken = []
        for v in values:
            if isinstance(v, torch.Tensor):
                taken.append(v.index_select(0, idx))
            else:                                                  # the cache: every layer's self and cross K/V
                v.reorder_cache(idx)
                taken.append(v)
        return taken


def _pull_to_eos(model: Any, eos: int, strength: float, seed: int) -> None:
    """A tenth of the target tokens (the triggers) lead to EOS next: their decoder embeddings gain a direction u
    that the output row of EOS gains too, so that hypotheses end a few tokens after a trigger, at varied lengths."""
    g = torch.Generator().manual_seed(seed + 1)
    embed, out = model.get_decoder().embed_tokens.weight, model.get_output_embeddings().weight
    u = torch.randn(embed.shape[1], generator=g)
    u /= u.norm()
    triggers = 4 + torch.randperm(VOCAB - 5, generator=g)[:VOCAB // 10]       # no special token (ids < 4, V-1)
    with torch.no_grad():
        embed[triggers] += strength * u / (embed.shape[1] ** 0.5)
        out[eos] += strength * u


def _randomize(model: Any, std: float, seed: int) -> None:
    """Weights N(0, std) (biases and LayerNorms too, around their identity): outputs that depend on the input."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g) * std
            p.copy_(1.0 + noise * 0.5 if "layer_norm" in name and name.endswith("weight") else noise)


def tiny_marian(seed: int = 0, std: float = 0.12, eos_pull: float = 4.0) -> Tuple[Any, ModelConfig]:
    """A random MarianMTModel (pad = decoder start = V-1, EOS = 0) and the runtime's ModelConfig for its ids."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    pad, eos = VOCAB - 1, 0
    cfg = MarianConfig(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                       pad_token_id=pad, eos_token_id=eos, decoder_start_token_id=pad, forced_eos_token_id=None,
                       dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=True)
    model = MarianMTModel(cfg).eval()
    _randomize(model, std, seed)
    _pull_to_eos(model, eos, eos_pull, seed)
    model.generation_config = GenerationConfig(decoder_start_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    config = ModelConfig(vocab_size=VOCAB, d_model=64, n_heads=4, d_ff=128, encoder_layers=2, decoder_layers=2,
                         max_positions=64, pad_id=pad, bos_id=pad, eos_id=eos, unk_id=1, decoder_start_id=pad, src_vocab_size=VOCAB)
    return model, config


def tiny_m2m100(seed: int = 0, std: float = 0.12, eos_pull: float = 2.0) -> Tuple[Any, ModelConfig]:
    """A random M2M100ForConditionalGeneration (pad 1, BOS 0, EOS 2 = decoder start, untied output projection) and
    the runtime's ModelConfig for its ids."""
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    torch.manual_seed(seed)
    bos, pad, eos = 0, 1, 2
    cfg = M2M100Config(vocab_size=VOCAB, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
                       pad_token_id=pad, bos_token_id=bos, eos_token_id=eos, decoder_start_token_id=eos,
                       dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0,
                       decoder_layerdrop=0.0, scale_embedding=True, tie_word_embeddings=False)
    model = M2M100ForConditionalGeneration(cfg).eval()
    _randomize(model, std, seed)
    _pull_to_eos(model, eos, eos_pull, seed)
    model.generation_config = GenerationConfig(decoder_start_token_id=eos, eos_token_id=eos, pad_token_id=pad,
                                               bos_token_id=bos)
    config = ModelConfig(vocab_size=VOCAB, d_model=64, n_heads=4, d_ff=128, encoder_layers=2, decoder_layers=2,
                         max_positions=64, pad_id=pad, bos_id=bos, eos_id=eos, unk_id=3, decoder_start_id=eos, src_vocab_size=VOCAB)
    return model, config
