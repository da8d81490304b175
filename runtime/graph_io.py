"""The input and output names of a package's two graphs (docs/CONTRACTS.md), written once: the exporter
names the graphs it writes with them (export/onnx_export.py), the runtime binds and checks them
(session.py). numpy-free and torch-free."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from .config import ModelConfig

ID_INPUTS = ("input_ids", "attention_mask", "encoder_attention_mask")      # int64 [batch, len]


def cache_names(prefix: str, layers: int) -> List[str]:
    """cache_names("past", 2) -> [past_key_0, past_value_0, past_key_1, past_value_1]"""
    return [f"{prefix}_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]


@dataclass(frozen=True)
class GraphNames:
    encoder_inputs: List[str]       # input_ids, attention_mask                        [batch, src_len] int64
    encoder_outputs: List[str]      # cross_key_i, cross_value_i                       [batch, heads, src_len, head_dim]
    decoder_inputs: List[str]       # input_ids [rows, 1], encoder_attention_mask, past_*, cross_*
    decoder_outputs: List[str]      # log_probs [rows, vocab], present_*

    @classmethod
    def for_config(cls, cfg: ModelConfig) -> "GraphNames":
        n = cfg.decoder_layers
        return cls(
            encoder_inputs=["input_ids", "attention_mask"],
            encoder_outputs=cache_names("cross", n),
            decoder_inputs=["input_ids", "encoder_attention_mask"] + cache_names("past", n) + cache_names("cross", n),
            decoder_outputs=["log_probs"] + cache_names("present", n),
        )
