"""The decoder step's attention as onnxruntime's fused CPU ops, for the int8 variant's trace only.

training/model.py's FixedCacheStep is the PyTorch reference: an index_put into the cache and the plain
attention equation. This step type traces the same attention as onnxruntime's contrib ops
(runtime/package/graph_io.py FUSED_ATTENTION_OPS, docs/CONTRACTS.md), and the export's parity gate checks the graph
against the reference (export/commands.py `attention.fp32_parity`):
  self-attention   GroupQueryAttention over the fixed-capacity cache: seqlens_k = past_length (int32 [R], one per row:
                   rows may differ), total_sequence_length = max(past_length) + 1 (int32, 0-d); it writes row r's K/V
                   at position past_length[r], in place when present_i is bound to past_i's memory, and row r reads
                   only its positions 0 .. past_length[r] (the other output positions are unspecified)
  cross-attention  MultiHeadAttention: the G rows of a sentence as G queries [B, G, D] over its cross K/V [B, H, S, Dh]
                   (BNSH, already projected), key_padding_mask [B, S] int32 (1 = token). A masked key gets onnxruntime's
                   mask_filter_value (-10000) instead of the most negative float: both weigh exactly 0 after the
                   softmax in float32. The last layer keeps the plain equation: its weights are the cross_attention output.
"""
from __future__ import annotations

from typing import Tuple

import torch

from seq2onnx.training.model import KV, FixedCacheStep, MultiHeadAttention, padding_bias


class FusedAttentionStep(FixedCacheStep):
    """A FixedCacheStep that torch.onnx.export traces as GroupQueryAttention / MultiHeadAttention."""

    def __init__(self, past_length: torch.Tensor, capacity: int, rows: int, heads: int, src_mask: torch.Tensor,
                 dtype: torch.dtype):
        if not torch.onnx.is_in_onnx_export():
            raise RuntimeError("the fused attention ops exist only in the ONNX export: decode_step_fixed with the "
                               "default step_type computes the same in PyTorch")
        self.cross_bias = padding_bias(src_mask, dtype)                                   # [B, 1, 1, S] (last layer)
        # GroupQueryAttention: row r's past is seqlens_k[r] positions (its new K/V go to that position); every row's
        # query attends to its own 0 .. seqlens_k[r] only. total_sequence_length: the longest row's, + 1
        self.seqlens_k = past_length.to(torch.int32)                                      # [R]
        self.total_length = (past_length.max() + 1).to(torch.int32)                       # 0-d
        self.key_padding_mask = src_mask.to(torch.int32)                                  # [B, S]

    def self_attention(self, attn: MultiHeadAttention, x: torch.Tensor, cache: KV) -> Tuple[torch.Tensor, KV]:
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)                          # [R, 1, D] each
        out, k_cache, v_cache = torch.onnx.ops.symbolic_multi_out(
            "com.microsoft::GroupQueryAttention", [q, k, v, cache[0], cache[1], self.seqlens_k, self.total_length],
            {"num_heads": attn.n_heads, "kv_num_heads": attn.n_heads},
            dtypes=(q.dtype, cache[0].dtype, cache[1].dtype), shapes=(q.shape, cache[0].shape, cache[1].shape),
            version=1)
        return attn.out_proj(out), (k_cache, v_cache)

    def cross_attention(self, attn: MultiHeadAttention, x: torch.Tensor, kv: KV) -> torch.Tensor:
        r, _, d = x.shape
        q = attn.q_proj(x).reshape(kv[0].shape[0], -1, d)                                 # [B, G, D]
        out = torch.onnx.ops.symbolic("com.microsoft::MultiHeadAttention", [q, kv[0], kv[1], None,
                                      self.key_padding_mask], {"num_heads": attn.n_heads}, dtype=q.dtype,
                                      shape=q.shape, version=1)
        return attn.out_proj(out.reshape(r, 1, d))                                        # [R, 1, D]
