"""ModelConfig: the one description of the architecture.

It lives on the light side (no torch) so that training builds the model from it,
export writes it into the package manifest, and the runtime reads it back:
nothing about the model is guessed twice.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, Dict, Optional


@dataclass
class ModelConfig:
    """Encoder-decoder Transformer (Vaswani et al., 2017). Defaults = the paper's base model."""

    vocab_size: int = 8000
    d_model: int = 512            # width of every sub-layer output and embedding
    n_heads: int = 8              # h; d_k = d_v = d_model / h
    d_ff: int = 2048              # inner width of the position-wise FFN
    encoder_layers: int = 6       # N
    decoder_layers: int = 6
    dropout: float = 0.1          # P_drop: sub-layer outputs and embedding sums
    attention_dropout: float = 0.0  # on attention weights (the paper uses none)
    max_positions: int = 1024     # rows of the sinusoidal table
    norm_first: bool = False      # False: post-norm LayerNorm(x + Sublayer(x)) as in the paper
    layer_norm_eps: float = 1e-5
    share_embeddings: bool = True       # one embedding for source and target (joint vocabulary)
    tie_output_embedding: bool = True   # target embedding == pre-softmax linear (paper 3.4)
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3
    # --- the variants of models trained elsewhere (export/hf_convert.py); the defaults are the paper's ---
    activation: str = "relu"            # the FFN's: relu (paper), gelu, swish (= silu; HF Marian)
    sinusoid: str = "interleaved"       # PE layout, sinusoidal_positions(): interleaved (paper), halves, fairseq
    position_offset: int = 0            # the first token's row of the PE table (fairseq/M2M100: pad_id + 1)
    embed_scale: bool = True            # token embeddings x sqrt(d_model) (paper 3.4); False: x 1
    final_logits_bias: bool = False     # a bias added to the logits (HF Marian's final_logits_bias)
    decoder_start_id: Optional[int] = None   # the decoder's first input; None: bos_id (Marian: pad, M2M100: eos)
    src_vocab_size: Optional[int] = None     # the source vocabulary (Marian separate_vocabs); None: vocab_size

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_field(f.name, _KINDS[str(f.type)], getattr(self, f.name))
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            if getattr(self, name) >= self.vocab_size:
                raise ValueError(f"{name} must be below vocab_size ({self.vocab_size}), got {getattr(self, name)}")
        if self.decoder_start_id is not None and self.decoder_start_id >= self.vocab_size:
            raise ValueError(f"decoder_start_id must be below vocab_size ({self.vocab_size}), "
                             f"got {self.decoder_start_id}")
        if self.src_vocab_size is not None and self.share_embeddings and self.src_vocab_size != self.vocab_size:
            raise ValueError(f"share_embeddings needs src_vocab_size == vocab_size, got {self.src_vocab_size} "
                             f"and {self.vocab_size}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError("dropout and attention_dropout must be in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def start_id(self) -> int:
        """The decoder's first input token."""
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    @property
    def source_vocab_size(self) -> int:
        """Source ids are below this (the encoder's embedding rows)."""
        return self.vocab_size if self.src_vocab_size is None else self.src_vocab_size

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ModelConfig":
        """A manifest's or checkpoint's config; one written before a field existed gets the field's default."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown ModelConfig fields: {', '.join(unknown)}")
        return cls(**d)

    @classmethod
    def from_json(cls, path: str) -> "ModelConfig":
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "ModelConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


class _OptionalInt:
    """The kind of an Optional[int] field (typing's Optional[int] objects are cached, not unique: no `is` test)."""


_KINDS = {"int": int, "float": float, "bool": bool, "str": str,   # the fields' annotations (postponed: strings)
          "Optional[int]": _OptionalInt}
CHOICES = {"activation": ("relu", "gelu", "swish"), "sinusoid": ("interleaved", "halves", "fairseq")}
# Bounds of the numbers a runtime builds things from (graph I/O names per layer, buffers per head,
# position and token): far above any real model (Transformer-big: 1024 wide, 16 heads, 6 layers), low
# enough that a model folder cannot make the runtime build billions of names or buffers without end.
RANGES = {
    "vocab_size": (1, 1 << 24), "d_model": (1, 1 << 16), "n_heads": (1, 1 << 10), "d_ff": (1, 1 << 20),
    "encoder_layers": (1, 1024), "decoder_layers": (1, 1024), "max_positions": (1, 1 << 20),
    "pad_id": (0, 1 << 24), "bos_id": (0, 1 << 24), "eos_id": (0, 1 << 24), "unk_id": (0, 1 << 24),
    "layer_norm_eps": (1e-12, 1.0), "position_offset": (0, 1 << 24), "decoder_start_id": (0, 1 << 24),
    "src_vocab_size": (1, 1 << 24),
}


def _check_field(name: str, kind: type, value: Any) -> None:
    """value is of the field's kind (a bool is no integer here; an integer is a fine float), finite and
    within RANGES; a str is one of CHOICES; an Optional[int] is None or such an integer."""
    if kind is _OptionalInt:
        if value is None:
            return
        kind = int
    if kind is str:
        if value not in CHOICES[name]:
            raise ValueError(f"{name} must be one of {', '.join(CHOICES[name])}, got {value!r}")
        return
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return
    low, high = RANGES.get(name, (-math.inf, math.inf))
    if not isinstance(value, int if kind is int else (int, float)) or isinstance(value, bool) \
            or not (math.isfinite(value) and low <= value <= high):
        what = "an integer" if kind is int else "a finite number"
        raise ValueError(f"{name} must be {what}" + (f" in [{low}, {high}]" if name in RANGES else "")
                         + f", got {value!r}")


PRESETS: Dict[str, Dict[str, Any]] = {
    # for tests and demos: trains in seconds on a CPU
    "tiny": dict(d_model=64, n_heads=4, d_ff=256, encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=512),
    # a small real model (a few MB): the shipped numbers model is of this size
    "small": dict(d_model=128, n_heads=4, d_ff=512, encoder_layers=3, decoder_layers=3, dropout=0.1, max_positions=512),
    # the paper's base model
    "base": dict(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6, dropout=0.1, max_positions=1024),
}
