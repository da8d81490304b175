"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), in one file.

Notation: B batch, S source length, T target length, P cached (past) target length,
D = d_model, H heads, Dh = D / H (= d_k = d_v), V vocabulary size.

The model exposes the cut the ONNX export follows:
    encode(src_ids, src_mask)            -> memory [B, S, D]
    cross_kv(memory)                     -> per decoder layer (K, V) [B, H, S, Dh], computed once
    decode_step(ids, src_mask, past, cross) -> log-probs of the next token, new self-attention cache
    decode_step_fixed(ids, src_mask, past_length, cache, cross) -> the same over a fixed-capacity cache, each
                                         row at its own past_length [R], and the cross-attention weights
                                         (the decoder step graphs of contracts 2 and 3)
and the full teacher-forced forward() used in training. decode_step over a growing cache
computes exactly what forward() computes for the last position (tests/training/test_model.py).
"""
from __future__ import annotations

import math
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from seq2onnx.runtime.package.config import ModelConfig

KV = Tuple[torch.Tensor, torch.Tensor]  # (keys, values), each [B, H, len, Dh]


def sinusoidal_positions(n_positions: int, d_model: int, layout: str = "interleaved", offset: int = 0) -> torch.Tensor:
    """The rows offset .. offset + n - 1 of a sinusoid table -> [n, D], in one of three layouts (i < D/2):
    interleaved (paper 3.5): PE[pos, 2i] = sin(pos / 10000^(2i/D)),  PE[pos, 2i+1] = cos(pos / 10000^(2i/D))
    halves (HF Marian):      PE[pos, i]  = sin(pos / 10000^(2i/D)),  PE[pos, D/2+i] = cos(pos / 10000^(2i/D))
    fairseq (M2M100, NLLB):  PE[pos, i]  = sin(pos * e^(-i ln(10000) / (D/2-1))),  PE[pos, D/2+i] = cos(...);
                             tokens start at row offset (= padding_idx + 1)
    """
    if d_model % 2:
        raise ValueError(f"d_model must be even for sinusoidal positions, got {d_model}")
    half = d_model // 2
    pos = torch.arange(offset, offset + n_positions, dtype=torch.float64)[:, None]       # [n, 1]
    i = torch.arange(half, dtype=torch.float64)[None, :]                                 # [1, D/2]
    if layout == "fairseq":
        angle = pos * torch.exp(i * -(math.log(10000.0) / (half - 1)))                   # [n, D/2]
    else:
        angle = pos / torch.pow(10000.0, 2 * i / d_model)                                # [n, D/2]
    if layout == "interleaved":
        return torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1).reshape(n_positions, d_model).float()
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1).float()               # sin | cos halves


def padding_bias(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Key-padding mask [B, S] (1 = token, 0 = pad) -> additive bias [B, 1, 1, S].

    Masked keys get the dtype's most negative finite value (never -inf, never a constant
    that overflows fp16), so a row never turns into NaN.
    """
    neg = torch.finfo(dtype).min
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(mask[:, None, None, :].bool(), zero, torch.full((), neg, dtype=dtype, device=mask.device))


def causal_bias(t: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """[1, 1, T, T]: position i may attend to positions <= i."""
    allowed = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    return torch.zeros(t, t, dtype=dtype, device=device).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def attention_weights(q: torch.Tensor, k: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k) + bias).   q [B,H,Tq,Dh], k [B,H,Tk,Dh] -> [B,H,Tq,Tk], rows sum to 1."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])       # [B,H,Tq,Tk]
    if bias is not None:
        scores = scores + bias
    return torch.softmax(scores, dim=-1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: Optional[torch.Tensor],
              dropout_p: float = 0.0) -> torch.Tensor:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + bias) V.   q [B,H,Tq,Dh], k/v [B,H,Tk,Dh]."""
    if torch.onnx.is_in_onnx_export():
        # the plain equation: a graph onnxruntime's optimizer recognises and fuses
        return torch.matmul(attention_weights(q, k, bias), v)
    # same function; on CUDA it runs flash / memory-efficient kernels
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q,K,V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h heads split the feature dimension D into h slices of Dh, one per head.
    """

    def __init__(self, d_model: int, n_heads: int, attention_dropout: float):
        super().__init__()
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.attention_dropout = attention_dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:     # [B, T, D] -> [B, H, T, Dh]
        b, t, _ = x.shape
        return x.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> KV:          # [B, T, D] -> 2 x [B, H, T, Dh]
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def forward(self, x: torch.Tensor, kv: KV, bias: Optional[torch.Tensor]) -> torch.Tensor:
        q = self.split_heads(self.q_proj(x))                                  # [B, H, Tq, Dh]
        p = self.attention_dropout if self.training else 0.0
        out = attention(q, kv[0], kv[1], bias, p)                             # [B, H, Tq, Dh]
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))

    def forward_per_sentence(self, x: torch.Tensor, kv: KV, bias: torch.Tensor,
                             need_weights: bool = False):
        """One query per row against the keys/values of its sentence, shared by the sentence's rows.

        x [R, 1, D] with R = B * G rows, row = sentence * G + g (G = R / B: the beams, 1 for greedy);
        kv (K, V) [B, H, S, Dh] and bias [B, 1, 1, S]: one per sentence. The G rows of a sentence
        become G query positions of one attention over its S keys, so the K/V are read once per
        sentence and each head multiplies [G, Dh] x [Dh, S] instead of G times [1, Dh] x [Dh, S].
        G = 1 (B = R) is exactly forward(). G is read from the shapes: the ONNX graph keeps it dynamic.
        need_weights (inference): also return the attention weights averaged over heads, [R, S].
        """
        r, _, d = x.shape
        b = kv[0].shape[0]
        q = self.q_proj(x).reshape(b, -1, self.n_heads, self.head_dim).transpose(1, 2)   # [B, H, G, Dh]
        if need_weights:
            weights = attention_weights(q, kv[0], bias)                                  # [B, H, G, S]
            out = torch.matmul(weights, kv[1])
        else:
            p = self.attention_dropout if self.training else 0.0
            out = attention(q, kv[0], kv[1], bias, p)                                    # [B, H, G, Dh]
        out = self.out_proj(out.transpose(1, 2).reshape(r, 1, d))                        # [B, G, H, Dh] -> [R, 1, D]
        if not need_weights:
            return out
        return out, weights.mean(dim=1).reshape(r, kv[0].shape[2])                       # [B, G, S] -> [R, S]


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}     # ModelConfig.activation; gelu: the exact (erf)


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied at each position (the paper's ReLU, or GELU / swish)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu"):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.activation(self.w1(x)))


class SubLayer(nn.Module):
    """Residual + LayerNorm around a sub-layer.

    post-norm (paper): LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm:          x + Dropout(Sublayer(LayerNorm(x)))
    """

    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def input(self, x: torch.Tensor) -> torch.Tensor:
        """What the sub-layer itself reads."""
        return self.norm(x) if self.norm_first else x

    def output(self, x: torch.Tensor, sublayer_out: torch.Tensor) -> torch.Tensor:
        y = x + self.dropout(sublayer_out)
        return y if self.norm_first else self.norm(y)


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        self.sub_attn = SubLayer(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps)
        self.sub_ffn = SubLayer(cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps)

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:   # x [B, S, D]
        h = self.sub_attn.input(x)
        x = self.sub_attn.output(x, self.self_attn(h, self.self_attn.project_kv(h), bias))
        return self.sub_ffn.output(x, self.ffn(self.sub_ffn.input(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation)
        args = (cfg.d_model, cfg.dropout, cfg.norm_first, cfg.layer_norm_eps)
        self.sub_self, self.sub_cross, self.sub_ffn = SubLayer(*args), SubLayer(*args), SubLayer(*args)

    def forward(self, x: torch.Tensor, past: Optional[KV], self_bias: Optional[torch.Tensor],
                cross: KV, cross_bias: torch.Tensor, per_sentence: bool = False) -> Tuple[torch.Tensor, KV]:
        """x [B, T, D]; past (K, V) [B, H, P, Dh] or None -> (x [B, T, D], present [B, H, P+T, Dh]).

        per_sentence (one decoding step, T = 1): x and past have R rows, cross and cross_bias one per
        sentence (B' = R / G rows), see MultiHeadAttention.forward_per_sentence."""
        h = self.sub_self.input(x)
        k, v = self.self_attn.project_kv(h)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        x = self.sub_self.output(x, self.self_attn(h, (k, v), self_bias))
        cross_attn = self.cross_attn.forward_per_sentence if per_sentence else self.cross_attn
        x = self.sub_cross.output(x, cross_attn(self.sub_cross.input(x), cross, cross_bias))
        x = self.sub_ffn.output(x, self.ffn(self.sub_ffn.input(x)))
        return x, (k, v)

    def step_fixed(self, x: torch.Tensor, cache: KV, cross: KV, step: "FixedCacheStep", need_weights: bool = False):
        """One decoding step over a fixed-capacity cache (decode_step_fixed): x [R, 1, D], cache (K, V) [R, H, C, Dh],
        cross (K, V) [B, H, S, Dh] one per sentence -> (x [R, 1, D], the cache with this step's K/V written), and
        with need_weights the cross-attention weights averaged over heads [R, S] (the plain attention then)."""
        h = self.sub_self.input(x)
        y, kv = step.self_attention(self.self_attn, h, cache)
        x = self.sub_self.output(x, y)
        h = self.sub_cross.input(x)
        weights = None
        if need_weights:
            y, weights = self.cross_attn.forward_per_sentence(h, cross, step.cross_bias, True)
        else:
            y = step.cross_attention(self.cross_attn, h, cross)
        x = self.sub_cross.output(x, y)
        x = self.sub_ffn.output(x, self.ffn(self.sub_ffn.input(x)))
        return (x, kv, weights) if need_weights else (x, kv)


class FixedCacheStep:
    """How the layers of one decode_step_fixed attend, with what they all need computed once: row r of the cache
    [R, H, C, Dh] holds positions 0 .. past_length[r]-1 (past_length: int64 [R], one per row) and this step writes
    its position past_length[r]. write_at: the index triple (rows [R, 1], heads [1, H], position [R, H]) of the
    index_put; self_bias [R, 1, 1, C] hides each row's positions after its past_length; cross_bias [B, 1, 1, S]
    the padding. The ONNX export's int8 variant traces onnxruntime's fused attention ops instead
    (export/fused_attention.py).
    """

    def __init__(self, past_length: torch.Tensor, capacity: int, rows: int, heads: int, src_mask: torch.Tensor,
                 dtype: torch.dtype):
        device = src_mask.device
        self.cross_bias = padding_bias(src_mask, dtype)                                   # [B, 1, 1, S]
        hidden = torch.arange(capacity, device=device)[None, :] > past_length[:, None]    # [R, C]
        self.self_bias = torch.zeros(hidden.shape, dtype=dtype, device=device).masked_fill(
            hidden, torch.finfo(dtype).min)[:, None, None, :]                             # [R, 1, 1, C]
        self.write_at = (torch.arange(rows, device=device)[:, None], torch.arange(heads, device=device)[None, :],
                         past_length[:, None].expand(rows, heads))                       # cache[r, h, past_length[r]]

    def self_attention(self, attn: MultiHeadAttention, x: torch.Tensor, cache: KV) -> Tuple[torch.Tensor, KV]:
        """x [R, 1, D], cache (K, V) [R, H, C, Dh] -> (out [R, 1, D], the cache with this step's K, V written at
        past_length[r]); row r's query attends to positions 0 .. past_length[r]."""
        k, v = attn.project_kv(x)                                                     # [R, H, 1, Dh]
        k, v = cache[0].index_put(self.write_at, k[:, :, 0]), cache[1].index_put(self.write_at, v[:, :, 0])
        return attn(x, (k, v), self.self_bias), (k, v)

    def cross_attention(self, attn: MultiHeadAttention, x: torch.Tensor, kv: KV) -> torch.Tensor:
        """x [R, 1, D] over each sentence's cross K/V [B, H, S, Dh] -> [R, 1, D] (forward_per_sentence)."""
        return attn.forward_per_sentence(x, kv, self.cross_bias)


# The paper does not say how the weights start. "normal" (HF Marian's: every weight matrix and the embeddings
# N(0, 0.02)) learns real text best at d_model 128 (the gettext duel: per step it matches HF Marian) but cannot
# learn the tiny model's toy task at d_model 64 at all; "normal-unit" (embeddings N(0, D^-1/2)) learns both, the
# real text more slowly; "xavier" (Xavier-uniform matrices, fairseq's choice) is the fastest on tiny synthetic
# tasks and falls behind on real text (bench/results/train_quality.md, train_ablation.md, tiny_learning.md).
# The default, "auto", is "normal" from AUTO_NORMAL_MIN_D_MODEL up (every preset a real corpus is trained with:
# small, base, big) and "normal-unit" below. docs/TRAINING.md.
INITS = {"normal-unit": ("normal", "unit"),     # name: (weight matrices, embeddings)
         "xavier": ("xavier", "unit"),
         "normal": ("normal", "normal"),
         "xavier-normal": ("xavier", "normal")}
INIT_CHOICES = ("auto", *INITS)
AUTO_NORMAL_MIN_D_MODEL = 128
INIT_STD = 0.02


def resolve_init(init: str, d_model: int) -> str:
    """"auto" -> "normal" for d_model >= AUTO_NORMAL_MIN_D_MODEL, else "normal-unit"; any other name as it is."""
    if init != "auto":
        return init
    return "normal" if d_model >= AUTO_NORMAL_MIN_D_MODEL else "normal-unit"


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, init: str = "auto"):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.src_embed = nn.Embedding(cfg.source_vocab_size, d, padding_idx=cfg.pad_id)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
        self.register_buffer("pe", sinusoidal_positions(cfg.max_positions, d, cfg.sinusoid, cfg.position_offset),
                             persistent=False)
        self.embed_scale = math.sqrt(d) if cfg.embed_scale else 1.0
        self.embed_dropout = nn.Dropout(cfg.dropout)
        self.encoder_layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        # pre-norm stacks end with a LayerNorm; post-norm outputs are normalised already
        self.encoder_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps) if cfg.norm_first else nn.Identity()
        # logits = x E^T (+ a bias over the vocabulary: HF Marian's final_logits_bias)
        self.output_projection = nn.Linear(d, cfg.vocab_size, bias=cfg.final_logits_bias)
        if init not in INIT_CHOICES:
            raise ValueError(f"unknown init {init!r}; choose one of {', '.join(INIT_CHOICES)}")
        self._init_weights(resolve_init(init, d))
        if cfg.tie_output_embedding:
            self.output_projection.weight = self.tgt_embed.weight

    def _init_weights(self, init: str) -> None:
        """INITS[init] = (weight matrices, embeddings); biases 0, pad rows 0."""
        matrices, embeddings = INITS[init]
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() > 1 and "embed" not in name:
                if matrices == "xavier":
                    nn.init.xavier_uniform_(p)
                else:
                    nn.init.normal_(p, mean=0.0, std=INIT_STD)
        # "unit": N(0, D^-1/2), so that times sqrt(D) in embed() the token vectors have unit variance
        std = self.cfg.d_model ** -0.5 if embeddings == "unit" else INIT_STD
        for emb in {id(self.src_embed): self.src_embed, id(self.tgt_embed): self.tgt_embed}.values():
            nn.init.normal_(emb.weight, mean=0.0, std=std)
            with torch.no_grad():
                emb.weight[self.cfg.pad_id].zero_()

    # --- building blocks -----------------------------------------------------------------
    def _embed(self, table: nn.Embedding, ids: torch.Tensor, offset=0) -> torch.Tensor:
        """Embedding(ids) * sqrt(D) (or * 1: embed_scale) + PE[offset : offset + T].   ids [B, T] -> [B, T, D]"""
        t = ids.shape[1]
        x = table(ids) * self.embed_scale + self.pe[offset:offset + t]
        return self.embed_dropout(x)

    def encode(self, src_ids: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src_ids [B, S] int64, src_mask [B, S] (1 = token) -> memory [B, S, D]"""
        x = self._embed(self.src_embed, src_ids)
        bias = padding_bias(src_mask, x.dtype)
        for layer in self.encoder_layers:
            x = layer(x, bias)
        return self.encoder_norm(x)

    def cross_kv(self, memory: torch.Tensor) -> List[KV]:
        """Encoder-decoder attention keys/values of every decoder layer, computed once per source."""
        return [layer.cross_attn.project_kv(memory) for layer in self.decoder_layers]

    def _decode(self, x: torch.Tensor, src_mask: torch.Tensor, cross: List[KV],
                past: Optional[List[KV]], self_bias: Optional[torch.Tensor],
                per_sentence: bool = False) -> Tuple[torch.Tensor, List[KV]]:
        cross_bias = padding_bias(src_mask, x.dtype)
        present = []
        for i, layer in enumerate(self.decoder_layers):
            x, kv = layer(x, None if past is None else past[i], self_bias, cross[i], cross_bias, per_sentence)
            present.append(kv)
        return self.decoder_norm(x), present

    # --- training: teacher forcing over the whole target -------------------------------------
    def forward(self, src_ids: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """src_ids/src_mask [B, S], tgt_in [B, T] (BOS + target) -> logits [B, T, V]"""
        memory = self.encode(src_ids, src_mask)
        x = self._embed(self.tgt_embed, tgt_in)
        x, _ = self._decode(x, src_mask, self.cross_kv(memory), None,
                            causal_bias(tgt_in.shape[1], x.dtype, x.device))
        return self.output_projection(x)

    # --- inference: one target position at a time --------------------------------------------
    def decode_step(self, input_ids: torch.Tensor, src_mask: torch.Tensor, past: List[KV],
                    cross: List[KV]) -> Tuple[torch.Tensor, List[KV]]:
        """input_ids [R, 1] (the previous token of each row), past (K, V) [R, H, P, Dh] per layer
        (P may be 0); cross (K, V) [B, H, S, Dh] per layer and src_mask [B, S], one per sentence,
        where R = B * G and row = sentence * G + g (G beams per sentence; B = R, G = 1, is a row
        per sentence as in greedy decoding, or replicated cross K/V).

        The position of input_ids is P, read from the cache. Returns float32 log-probs of the
        next token [R, V] and the present cache [R, H, P+1, Dh] per layer.
        """
        offset = past[0][0].shape[2]
        x = self._embed(self.tgt_embed, input_ids, offset)
        # one query sees all P+1 keys; the G rows of a sentence share its cross K/V
        x, present = self._decode(x, src_mask, cross, past, None, per_sentence=True)
        logits = self.output_projection(x[:, -1])                    # [R, V]
        return torch.log_softmax(logits.float(), dim=-1), present

    def decode_step_fixed(self, input_ids: torch.Tensor, src_mask: torch.Tensor, past_length: torch.Tensor,
                          cache: List[KV], cross: List[KV], step_type: type = FixedCacheStep
                          ) -> Tuple[torch.Tensor, List[KV], torch.Tensor]:
        """decode_step over a fixed-capacity cache (the decoder step of contracts 2 and 3, docs/CONTRACTS.md).

        cache (K, V) [R, H, C, Dh] per layer: row r holds its past at positions 0 .. past_length[r]-1 (past_length:
        int64 [R], each < C; rows may stand at different lengths); this step's K/V of row r are written at position
        past_length[r] and its query attends to positions 0 .. past_length[r], the rest hidden. Returns the
        log-probs [R, V] (those of decode_step for each row at its own length), the cache with those positions
        written [R, H, C, Dh] per layer, and the last decoder layer's cross-attention weights averaged over heads
        [R, S] (rows sum to 1). step_type: how the layers attend (FixedCacheStep; the export traces onnxruntime's
        fused ops with its own, which its parity gate checks against this one).
        """
        positions = self.pe.index_select(0, past_length)[:, None]                             # [R, 1, D]
        x = self.tgt_embed(input_ids) * self.embed_scale + positions                          # [R, 1, D]
        step = step_type(past_length, cache[0][0].shape[2], input_ids.shape[0], self.cfg.n_heads, src_mask, x.dtype)
        present, last = [], len(self.decoder_layers) - 1
        for i, layer in enumerate(self.decoder_layers):
            out = layer.step_fixed(x, cache[i], cross[i], step, need_weights=i == last)
            x = out[0]
            present.append(out[1])
        logits = self.output_projection(self.decoder_norm(x)[:, -1])                          # [R, V]
        return torch.log_softmax(logits.float(), dim=-1), present, out[2]

    def empty_cache(self, batch: int, device=None, dtype=torch.float32) -> List[KV]:
        shape = (batch, self.cfg.n_heads, 0, self.cfg.head_dim)
        return [(torch.zeros(shape, device=device, dtype=dtype), torch.zeros(shape, device=device, dtype=dtype))
                for _ in self.decoder_layers]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
