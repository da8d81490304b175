"""ModelConfig: the one description of the architecture.

It lives on the light side (no torch) so that training builds the model from it,
export writes it into the package manifest, and the runtime reads it back:
nothing about the model is guessed twice.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict


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

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_field(f.name, _KINDS[f.type], getattr(self, f.name))
        for name in ("pad_id", "bos_id", "eos_id", "unk_id"):
            if getattr(self, name) >= self.vocab_size:
                raise ValueError(f"{name} must be below vocab_size ({self.vocab_size}), got {getattr(self, name)}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0 or not 0.0 <= self.attention_dropout < 1.0:
            raise ValueError("dropout and attention_dropout must be in [0, 1)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "ModelConfig":
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


_KINDS = {"int": int, "float": float, "bool": bool}       # the fields' annotations (postponed: strings)
# Bounds of the numbers a runtime builds things from (graph I/O names per layer, buffers per head,
# position and token): far above any real model (Transformer-big: 1024 wide, 16 heads, 6 layers), low
# enough that a model folder cannot make the runtime build billions of names or buffers without end.
_RANGES = {
    "vocab_size": (1, 1 << 24), "d_model": (1, 1 << 16), "n_heads": (1, 1 << 10), "d_ff": (1, 1 << 20),
    "encoder_layers": (1, 1024), "decoder_layers": (1, 1024), "max_positions": (1, 1 << 20),
    "pad_id": (0, 1 << 24), "bos_id": (0, 1 << 24), "eos_id": (0, 1 << 24), "unk_id": (0, 1 << 24),
    "layer_norm_eps": (1e-12, 1.0),
}


def _check_field(name: str, kind: type, value: Any) -> None:
    """value is of the field's kind (a bool is no integer here; an integer is a fine float), finite and
    within _RANGES."""
    if kind is bool:
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false, got {value!r}")
        return
    low, high = _RANGES.get(name, (-math.inf, math.inf))
    if not isinstance(value, int if kind is int else (int, float)) or isinstance(value, bool) \
            or not (math.isfinite(value) and low <= value <= high):
        what = "an integer" if kind is int else "a finite number"
        raise ValueError(f"{name} must be {what}" + (f" in [{low}, {high}]" if name in _RANGES else "")
                         + f", got {value!r}")


PRESETS: Dict[str, Dict[str, Any]] = {
    # for tests and demos: trains in seconds on a CPU
    "tiny": dict(d_model=64, n_heads=4, d_ff=256, encoder_layers=2, decoder_layers=2, dropout=0.0, max_positions=512),
    # a small real model (a few MB): the shipped numbers model is of this size
    "small": dict(d_model=128, n_heads=4, d_ff=512, encoder_layers=3, decoder_layers=3, dropout=0.1, max_positions=512),
    # the paper's base model
    "base": dict(d_model=512, n_heads=8, d_ff=2048, encoder_layers=6, decoder_layers=6, dropout=0.1, max_positions=1024),
}
