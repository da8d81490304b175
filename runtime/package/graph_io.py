"""The input and output names of a package's two graphs (docs/CONTRACTS.md), written once: the exporter
names the graphs it writes with them (export/onnx_export.py), the runtime binds and checks them
(session.py). numpy-free and torch-free.

Three decoder step contracts (manifest.decoder_format maps a package's format_version to one):
  1  past_key_i / past_value_i [R, H, P, Dh] in, present_* [R, H, P+1, Dh] out: the cache grows by a
     Concat every step.
  2  a fixed-capacity cache: past_length (int64, 0-d) in, past_* [R, H, C, Dh] in and present_* [R, H, C, Dh]
     out, the step's K/V written at position past_length (a ScatterND that writes in place when
     present_i is bound to past_i's memory); and cross_attention [R, S] out, the last decoder layer's
     cross-attention weights averaged over heads.
  3  2 with past_length int64 [R], one per row (rows of one step may stand at different positions, as when a
     server adds sentences to a running batch): row r's K/V are written at position past_length[r], its query
     attends to positions 0 .. past_length[r] and is at position past_length[r]. The rest as 2.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List

from .config import ModelConfig

ID_INPUTS = ("input_ids", "attention_mask", "encoder_attention_mask")      # int64 [batch, len]
PAST_LENGTH = "past_length"             # the cache positions already written, int64: 0-d (contract 2), [R] (contract 3)
CROSS_ATTENTION = "cross_attention"     # contracts 2, 3: float32 [R, S]
DECODER_FORMATS = (1, 2, 3)             # the decoder step contracts (above); manifest.decoder_format maps a package's
DECODER_FORMAT = 3                      # format_version to one. What export writes
# The decoder step that `seq2onnx export` writes runs its attention as onnxruntime's fused ops
# (export/fused_attention.py FusedAttentionStep): GroupQueryAttention over the self-attention cache, MultiHeadAttention for
# the cross-attention of every layer but the last (whose weights are the cross_attention output).
FUSED_ATTENTION_DOMAIN = "com.microsoft"
FUSED_ATTENTION_OPS = ("GroupQueryAttention", "MultiHeadAttention")
# onnxruntime 1.19 and 1.20 compute GroupQueryAttention over a cache they are not given in place wrongly (log-probs
# off by 6 on the benchmark model); 1.21 is the first that matches PyTorch (pyproject.toml's lower bound)
MIN_ONNXRUNTIME = (1, 21)


def cache_names(prefix: str, layers: int) -> List[str]:
    """cache_names("past", 2) -> [past_key_0, past_value_0, past_key_1, past_value_1]"""
    return [f"{prefix}_{kv}_{i}" for i in range(layers) for kv in ("key", "value")]


@dataclass(frozen=True)
class GraphNames:
    encoder_inputs: List[str]       # input_ids, attention_mask                        [batch, src_len] int64
    encoder_outputs: List[str]      # cross_key_i, cross_value_i                       [batch, heads, src_len, head_dim]
    decoder_inputs: List[str]       # input_ids [rows, 1], encoder_attention_mask, (past_length,) past_*, cross_*
    decoder_outputs: List[str]      # log_probs [rows, vocab], present_*, (cross_attention)

    @classmethod
    def for_config(cls, cfg: ModelConfig, format_version: int) -> "GraphNames":
        if format_version not in DECODER_FORMATS:
            raise ValueError(f"no decoder step contract for format_version {format_version!r}")
        n = cfg.decoder_layers
        fixed = format_version >= 2
        return cls(
            encoder_inputs=["input_ids", "attention_mask"],
            encoder_outputs=cache_names("cross", n),
            decoder_inputs=["input_ids", "encoder_attention_mask"] + [PAST_LENGTH] * fixed
            + cache_names("past", n) + cache_names("cross", n),
            decoder_outputs=["log_probs"] + cache_names("present", n) + [CROSS_ATTENTION] * fixed,
        )
