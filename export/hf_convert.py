"""`seq2onnx convert HF_MODEL_DIR OUT_DIR [--int8] [--fp16] [--parity-data FILE] [--overwrite]`

A MarianMT (OPUS-MT) or M2M100 / NLLB model in transformers' folder layout (what `save_pretrained` writes and
`hf download --local-dir` fetches) -> a seq2onnx model package, as CTranslate2's converters do it:
  load      config.json, the weights (model.safetensors or pytorch_model.bin), generation_config.json and the
            tokenizer files, from the folder only (never the network)
  validate  the architecture and every option; one we cannot honour is one line naming it
  map       the weights into training/model.py's Transformer, whose ModelConfig variant fields say how this
            architecture differs from the paper's (activation, sinusoid layout, pre-LN, embedding scale,
            logits bias, decoder start)
  save      export/commands.py's pipeline (trace, check, parity against our PyTorch, quantise) and one gate more
            before anything is written: the finished package's runtime against transformers itself
            (log-probs, then greedy and beam tokens at the model's own generation defaults)
Needs the [convert] extra (torch, transformers, sentencepiece, safetensors).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from seq2onnx.runtime.cli.main import OneLineParser
from seq2onnx.runtime.package.config import RANGES as MODEL_RANGES, ModelConfig
from seq2onnx.runtime.errors import Seq2OnnxError, first_line
from seq2onnx.runtime.package.manifest_fields import short
from seq2onnx.runtime.options import (LENGTH_PENALTY_RANGE, MAX_BEAM_SIZE, MAX_SUPPRESS_IDS, REPETITION_PENALTY_RANGE,
                                      DecodingOptions, OptionError)
from seq2onnx.runtime.package.manifest_records import Languages, Manifest, SourceCheckpoint, SourceModel, Tokenizers
from seq2onnx.training.model import Transformer, sinusoidal_positions

from seq2onnx.runtime.package.manifest import HF_WEIGHT_FILES, MANIFEST

from . import commands, hf_tokenizers, package, parity
from .beside import Job, beside
from .commands import ExportOptions, ExportResult, PackageContents
from .hf_tokenizers import DOWNLOAD

# model_type of config.json -> how its names map (NLLB's is m2m_100, with its own tokenizer)
KINDS = ("marian", "m2m_100")
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}
# config.json's sizes -> the ModelConfig field each becomes (its range: runtime/package/config.py)
CONFIG_SIZES = {"vocab_size": "vocab_size", "decoder_vocab_size": "vocab_size", "d_model": "d_model",
                "encoder_attention_heads": "n_heads", "decoder_attention_heads": "n_heads", "encoder_ffn_dim": "d_ff",
                "decoder_ffn_dim": "d_ff", "encoder_layers": "encoder_layers", "decoder_layers": "decoder_layers",
                "max_position_embeddings": "max_positions"}
OPTIONAL_SIZES = ("decoder_vocab_size",)
CONFIG_FLAGS = ("scale_embedding", "share_encoder_decoder_embeddings", "tie_word_embeddings", "add_final_layer_norm",
                "normalize_embedding", "layernorm_embedding", "add_bias_logits")
WEIGHT_INDEXES = tuple(n for n in HF_WEIGHT_FILES if n.endswith(".index.json"))
GATE_SENTENCES = 16            # synthetic sources of the gate against transformers, besides --parity-data lines
GATE_MAX_LENGTH = 48           # generated tokens the gate lets each run (the model's max_length if lower)
FINITE_BLOCK = 1 << 22         # load_hf_model checks this many weights at a time for NaN / inf
SCORE_TOLERANCE = 1e-4         # |our score - transformers'| of one hypothesis, fp32: per token of a greedy sum


def score_tolerance(beam: bool, length: int, tolerance: float = SCORE_TOLERANCE) -> float:
    """How far our score of a hypothesis may be from transformers': beam search compares the normalized score
    (sum / length ** length_penalty, generate()'s sequences_scores) within `tolerance`; greedy decoding the sum
    of the log-probs of `length` tokens and EOS, whose float32 rounding grows with the length."""
    return tolerance if beam else tolerance * (length + 1)


# --- load ------------------------------------------------------------------------------------------------
def read_config(folder: Path) -> Dict[str, Any]:
    """config.json of an HF model folder, its fields checked (check_config), or one line saying what is wrong.
    Every entry of the folder is checked first (hf_tokenizers.check_folder): transformers opens files by name."""
    if not folder.is_dir():
        raise Seq2OnnxError(f"{folder} is not a folder: pass a transformers model folder (e.g. from hf "
                            f"download Helsinki-NLP/opus-mt-en-de --local-dir {folder})")
    path = folder / "config.json"
    hf_tokenizers.check_folder(folder)
    config = hf_tokenizers.read_json(
        folder, "config.json", hf_tokenizers.MAX_SETTINGS_BYTES,
        missing=f"{folder} has no config.json: it is not a transformers model folder (download one with "
                "hf download MODEL --local-dir FOLDER)")
    if not isinstance(config, dict):
        raise Seq2OnnxError(f"{path} should be an object of settings, got {type(config).__name__}; {DOWNLOAD}")
    kind = config.get("model_type")
    if kind not in KINDS:
        raise Seq2OnnxError(f"{path}: model_type {short(kind)} cannot be converted; seq2onnx converts MarianMT "
                            "(OPUS-MT, model_type marian) and M2M100 / NLLB (model_type m2m_100)")
    check_config(path, config)
    return config


def _bad(path: Path, name: str, what: str, value: Any) -> Seq2OnnxError:
    return Seq2OnnxError(f"{path}: {name} should be {what}, got {short(value)}; {DOWNLOAD}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(path: Path, name: str, value: Any, low: int, high: int) -> None:
    if not _is_int(value) or not low <= value <= high:
        raise _bad(path, name, f"an integer in [{low}, {high}]", value)


def _check_ids(path: Path, name: str, value: Any, vocab: int, list_ok: bool = False) -> None:
    """value: a token id below `vocab` (list_ok: or a list of them)."""
    for i in (value if list_ok and isinstance(value, list) and value else [value]):
        if not _is_int(i) or not 0 <= i < vocab:
            raise _bad(path, name, f"a token id in [0, {vocab - 1}]" + (" or a list of them" if list_ok else ""),
                       value)


def check_config(path: Path, hf: Dict[str, Any]) -> None:
    """The fields of config.json that the converter reads: of their kind, in the ranges ModelConfig allows, ids
    within the vocabulary, and no number NaN or infinite (transformers would initialise weights with it)."""
    for name, value in hf.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise _bad(path, name, "a finite number", value)
    for name, ours in CONFIG_SIZES.items():
        if hf.get(name) is not None or name not in OPTIONAL_SIZES:
            _check_int(path, name, hf.get(name), *MODEL_RANGES[ours])
    act = hf.get("activation_function", "relu")
    if not isinstance(act, str) or act not in ACTIVATIONS:
        raise Seq2OnnxError(f"{path}: activation_function {short(act)} is not supported; seq2onnx runs "
                            f"{', '.join(sorted(ACTIVATIONS))}")
    for name in CONFIG_FLAGS:
        if hf.get(name) is not None and not isinstance(hf[name], bool):
            raise _bad(path, name, "true or false", hf[name])
    vocab = min(hf["vocab_size"], hf.get("decoder_vocab_size") or hf["vocab_size"])
    for name in ("pad_token_id", "eos_token_id"):
        _check_ids(path, name, hf.get(name), vocab)
    for name in ("bos_token_id", "decoder_start_token_id", "unk_token_id", "forced_eos_token_id"):
        if hf.get(name) is not None:
            _check_ids(path, name, hf[name], vocab)
    arch = hf.get("architectures")          # the manifest's source_model.architectures
    if arch is not None and not (isinstance(arch, list) and all(isinstance(a, str) for a in arch)):
        raise _bad(path, "architectures", "a list of class names", arch)


def read_generation_config(folder: Path, hf: Dict[str, Any]) -> None:
    """The decoding settings of generation_config.json (where the folder has none, transformers takes them from
    config.json), checked when read: of their kind and range, ids within the vocabulary. What seq2onnx cannot run
    is refused by generation_defaults, from transformers' own reading of the same file."""
    name = "generation_config.json"
    if os.path.lexists(folder / name):
        gen = hf_tokenizers.read_json(folder, name, hf_tokenizers.MAX_SETTINGS_BYTES)
        if not isinstance(gen, dict):
            raise Seq2OnnxError(f"{folder / name} should be an object of settings, got {type(gen).__name__}; "
                                f"{DOWNLOAD}")
    else:
        name, gen = "config.json", hf
    path = folder / name
    vocab = hf.get("decoder_vocab_size") or hf["vocab_size"]
    checks: Dict[str, Callable[[str, Any], None]] = {
        "num_beams": lambda n, v: _check_int(path, n, v, 1, MAX_BEAM_SIZE),
        "num_beam_groups": lambda n, v: _check_int(path, n, v, 1, MAX_BEAM_SIZE),
        "max_length": lambda n, v: _check_int(path, n, v, 1, 2**31 - 1),
        "max_new_tokens": lambda n, v: _check_int(path, n, v, 1, 2**31 - 1),
        "min_length": lambda n, v: _check_int(path, n, v, 0, 2**31 - 1),
        "min_new_tokens": lambda n, v: _check_int(path, n, v, 0, 2**31 - 1),
        "no_repeat_ngram_size": lambda n, v: _check_int(path, n, v, 0, 2**31 - 1),
        "encoder_no_repeat_ngram_size": lambda n, v: _check_int(path, n, v, 0, 2**31 - 1),
        "length_penalty": lambda n, v: _check_number(path, n, v, LENGTH_PENALTY_RANGE),
        "repetition_penalty": lambda n, v: _check_number(path, n, v, REPETITION_PENALTY_RANGE),
        "early_stopping": lambda n, v: _check_choice(path, n, v, (True, False, "never")),
        "suppress_tokens": lambda n, v: _check_id_list(path, n, v, vocab, nested=False),
        "begin_suppress_tokens": lambda n, v: _check_id_list(path, n, v, vocab, nested=False),
        "bad_words_ids": lambda n, v: _check_id_list(path, n, v, vocab, nested=True),
        "eos_token_id": lambda n, v: _check_ids(path, n, v, vocab, list_ok=True),
        "forced_eos_token_id": lambda n, v: _check_ids(path, n, v, vocab, list_ok=True),
        **{f: (lambda n, v: _check_ids(path, n, v, vocab)) for f in ("pad_token_id", "bos_token_id",
                                                                     "decoder_start_token_id", "forced_bos_token_id")},
        **{f: (lambda n, v: _check_choice(path, n, v, (True, False))) for f in ("do_sample", "renormalize_logits")},
    }
    for field_name, check in checks.items():
        if gen.get(field_name) is not None:
            check(field_name, gen[field_name])


def _check_choice(path: Path, name: str, value: Any, choices: Tuple[Any, ...]) -> None:
    if not any(value is c if isinstance(c, bool) else value == c for c in choices):
        raise _bad(path, name, " or ".join(json.dumps(c) for c in choices), value)


def _check_number(path: Path, name: str, value: Any, bounds: Tuple[float, float]) -> None:
    low, high = bounds
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not low <= value <= high:
        raise _bad(path, name, f"a number in [{low:g}, {high:g}]", value)


def _check_id_list(path: Path, name: str, value: Any, vocab: int, nested: bool) -> None:
    """A list of token ids (nested: of lists of them, each not empty), at most MAX_SUPPRESS_IDS in all."""
    what = "a list of lists of token ids" if nested else "a list of token ids"
    if not isinstance(value, list) or len(value) > MAX_SUPPRESS_IDS:
        raise _bad(path, name, f"{what} (at most {MAX_SUPPRESS_IDS})", value)
    for item in value:
        for i in (item if nested and isinstance(item, list) and item else [] if nested else [item]) or [None]:
            if not _is_int(i) or not 0 <= i < vocab:
                raise _bad(path, name, f"{what} in [0, {vocab - 1}]", value)


def check_weights(folder: Path) -> None:
    """The weights transformers may read: model.safetensors / pytorch_model.bin, or an index and the shards it
    names, each a regular file in the folder itself (an index naming ../x or /x is refused), or one line."""
    present = [n for n in HF_WEIGHT_FILES if os.path.lexists(folder / n)]
    if not present:
        raise Seq2OnnxError(f"{folder} has no weights (model.safetensors or pytorch_model.bin): download the "
                            "whole model folder")
    for name in present:
        hf_tokenizers.folder_file(folder, name)
        if name not in WEIGHT_INDEXES:
            continue
        index = hf_tokenizers.read_json(folder, name, hf_tokenizers.MAX_SETTINGS_BYTES)
        shards = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(shards, dict) or not shards:
            raise _bad(folder / name, "weight_map", "an object of tensor names and their files", shards)
        for shard in sorted({str(s) if isinstance(s, str) else "" for s in shards.values()}):
            hf_tokenizers.folder_file(folder, shard, missing=f"{folder / name} names the file {shard!r}, which the "
                                      f"folder does not hold; {DOWNLOAD}")


def load_hf_model(folder: Path) -> Any:
    """The transformers model of the folder, in float32 and eval mode, read from the folder alone (check_weights
    first), every weight finite and of the shape config.json implies; transformers' own reports held back."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
        from transformers import AutoModelForSeq2SeqLM
    except ImportError:
        raise Seq2OnnxError("seq2onnx convert needs transformers: pip install \"seq2onnx[convert]\" (in a checkout: "
                            "pip install \".[convert]\" -c constraints.txt)") from None
    check_weights(folder)
    transformers.logging.disable_progress_bar()          # the CLI's progress is its own stage lines
    try:
        with hf_tokenizers.quiet_transformers():
            model, info = AutoModelForSeq2SeqLM.from_pretrained(
                str(folder), local_files_only=True, dtype=torch.float32, ignore_mismatched_sizes=True,
                output_loading_info=True)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds
        raise Seq2OnnxError(f"transformers cannot load {folder} ({first_line(e) or type(e).__name__}): "
                            f"{DOWNLOAD}") from None
    for key, theirs, ours in info.get("mismatched_keys") or []:
        raise Seq2OnnxError(f"{folder}: the weight {key} has shape {tuple(theirs)}, config.json implies "
                            f"{tuple(ours)}: the folder's config and weights disagree; {DOWNLOAD}")
    missing = [k for k in info.get("missing_keys") or [] if "embed_positions" not in k]
    if missing:
        raise Seq2OnnxError(f"{folder}: the weights have no {sorted(missing)[0]} ({len(missing)} missing): it is not "
                            f"a complete MarianMT / M2M100 checkpoint; {DOWNLOAD}")
    for name, value in model.state_dict().items():
        # a block at a time: transformers leaves model.safetensors' tensors memory-mapped, and torch.isfinite of a
        # whole table makes float and bool temporaries of its size (1.7 GiB at NLLB-200's 1 GiB embedding)
        if value.is_floating_point() and not all(bool(torch.isfinite(block).all())
                                                 for block in value.reshape(-1).split(FINITE_BLOCK)):
            raise Seq2OnnxError(f"{folder}: the weight {name} holds NaN or infinite values; {DOWNLOAD}")
    return model.eval()


# --- validate -----------------------------------------------------------------------------------------------
def model_config(hf: Dict[str, Any]) -> ModelConfig:
    """Our ModelConfig of an HF Marian / M2M100 config.json, or one line naming what we cannot honour."""
    kind = hf["model_type"]

    def same(a: str, b: str) -> Any:
        if hf.get(a) != hf.get(b):
            raise Seq2OnnxError(f"config.json: {a} ({hf.get(a)}) differs from {b} ({hf.get(b)}); seq2onnx's "
                                "Transformer has one value for both")
        return hf[a]

    heads = same("encoder_attention_heads", "decoder_attention_heads")
    d_ff = same("encoder_ffn_dim", "decoder_ffn_dim")
    act = hf.get("activation_function", "relu")
    if act not in ACTIVATIONS:
        raise Seq2OnnxError(f"config.json: activation_function {act!r} is not supported; seq2onnx runs "
                            f"{', '.join(sorted(ACTIVATIONS))}")
    for flag in ("add_final_layer_norm", "normalize_embedding", "layernorm_embedding", "add_bias_logits"):
        if hf.get(flag):
            raise Seq2OnnxError(f"config.json: {flag} is set, which the {kind} architecture seq2onnx converts "
                                "does not have")
    marian = kind == "marian"
    pad, eos = hf["pad_token_id"], hf["eos_token_id"]
    start = hf.get("decoder_start_token_id", pad if marian else eos)
    separate = marian and not hf.get("share_encoder_decoder_embeddings", True)
    vocab = (hf.get("decoder_vocab_size") if marian else None) or hf["vocab_size"]   # the target side's
    try:
        return ModelConfig(
            vocab_size=vocab, d_model=hf["d_model"], n_heads=heads, d_ff=d_ff, encoder_layers=hf["encoder_layers"],
            decoder_layers=hf["decoder_layers"], dropout=0.0, attention_dropout=0.0,
            max_positions=hf["max_position_embeddings"], norm_first=not marian, layer_norm_eps=1e-5,
            share_embeddings=not separate, tie_output_embedding=hf.get("tie_word_embeddings", True),
            pad_id=pad, bos_id=start if marian else hf.get("bos_token_id", start), eos_id=eos,
            unk_id=hf.get("unk_token_id") if hf.get("unk_token_id") is not None else 1 if marian else 3,
            activation=ACTIVATIONS[act], sinusoid="halves" if marian else "fairseq",
            position_offset=0 if marian else pad + 1, embed_scale=bool(hf.get("scale_embedding", False)),
            final_logits_bias=marian, decoder_start_id=start,
            src_vocab_size=hf["vocab_size"] if separate else None)
    except (TypeError, ValueError) as e:
        raise Seq2OnnxError(f"config.json describes a model seq2onnx cannot build ({e})") from None


# --- map -----------------------------------------------------------------------------------------------------
def _layer_names(prefix: str, ours: str, decoder: bool) -> Dict[str, str]:
    """Our parameter name -> transformers' for one encoder / decoder layer."""
    names = {"self_attn": "self_attn", "sub_ffn.norm": "final_layer_norm", "ffn.w1": "fc1", "ffn.w2": "fc2"}
    names.update({"sub_self.norm": "self_attn_layer_norm", "cross_attn": "encoder_attn",
                  "sub_cross.norm": "encoder_attn_layer_norm"} if decoder else {"sub_attn.norm": "self_attn_layer_norm"})
    out = {}
    for a, b in names.items():
        for proj in (("q_proj", "k_proj", "v_proj", "out_proj") if a in ("self_attn", "cross_attn") else ("",)):
            for p in ("weight", "bias"):
                sub = f".{proj}" if proj else ""
                out[f"{ours}.{a}{sub}.{p}"] = f"{prefix}.{b}{sub}.{p}"
    return out


def transformer_from_hf(hf_model: Any, cfg: ModelConfig) -> Transformer:
    """Our Transformer holding the HF model's weights exactly (strict: every tensor of ours is set): the same tensors,
    not copies (built on the meta device, its parameters then assigned), so that the conversion holds the weights
    once however many models look at them."""
    hf = {k: v.detach().float() for k, v in hf_model.state_dict().items()}
    base = "model"
    names = {"src_embed.weight": f"{base}.encoder.embed_tokens.weight",
             "tgt_embed.weight": f"{base}.decoder.embed_tokens.weight",
             "output_projection.weight": "lm_head.weight"}
    if f"{base}.encoder.embed_tokens.weight" not in hf:
        names["src_embed.weight"] = names["tgt_embed.weight"] = f"{base}.shared.weight"
    if cfg.final_logits_bias:
        names["output_projection.bias"] = "final_logits_bias"
    if cfg.norm_first:
        names.update({f"{n}_norm.{p}": f"{base}.{n}.layer_norm.{p}" for n in ("encoder", "decoder")
                      for p in ("weight", "bias")})
    for i in range(cfg.encoder_layers):
        names.update(_layer_names(f"{base}.encoder.layers.{i}", f"encoder_layers.{i}", False))
    for i in range(cfg.decoder_layers):
        names.update(_layer_names(f"{base}.decoder.layers.{i}", f"decoder_layers.{i}", True))
    with torch.device("meta"):
        model = Transformer(cfg).eval()
    ours = model.state_dict()
    state = {}
    for name in ours:
        source = names.get(name)
        if source is None or source not in hf:
            raise Seq2OnnxError(f"the model folder has no weight for {name} ({source or 'unmapped'}): it is not a "
                                "complete MarianMT / M2M100 checkpoint")
        value = hf[source].reshape(ours[name].shape) if name == "output_projection.bias" else hf[source]
        if value.shape != ours[name].shape:
            raise Seq2OnnxError(f"{source} has shape {tuple(value.shape)}, config.json implies "
                                f"{tuple(ours[name].shape)}: the folder's config and weights disagree")
        state[name] = value
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_output_embedding:            # assign gives each name its own Parameter: tie them again
        model.output_projection.weight = model.tgt_embed.weight
    with torch.no_grad():                   # the model's own sinusoid table (its float32 rounding), from row offset
        table = hf_model.get_encoder().embed_positions
        weights = table.weight if hasattr(table, "weight") else table.weights
        rows = weights[cfg.position_offset:cfg.position_offset + cfg.max_positions].float()
        pe = sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.sinusoid, cfg.position_offset)
        pe[:len(rows)] = rows
        model.pe = pe
    return model


# --- generation defaults ------------------------------------------------------------------------------------
def generation_defaults(gen: Any, cfg: ModelConfig) -> Dict[str, Any]:
    """The decoding options (runtime/options.py DecodingOptions) that do what `model.generate()` does with this
    generation_config, or one line naming a setting seq2onnx cannot honour."""
    for name, off in (("do_sample", False), ("num_beam_groups", 1), ("diversity_penalty", 0.0),
                      ("penalty_alpha", None), ("constraints", None), ("force_words_ids", None),
                      ("exponential_decay_length_penalty", None), ("sequence_bias", None),
                      ("begin_suppress_tokens", None), ("encoder_no_repeat_ngram_size", 0)):
        value = getattr(gen, name, off)
        if value not in (off, None, [], 0, 1.0) or (name == "do_sample" and value):
            raise Seq2OnnxError(f"generation_config.json sets {name}={value!r}, which seq2onnx does not run: remove "
                                "it from generation_config.json to convert the model with plain beam search")
    def get(name: str, default: Any) -> Any:          # transformers 5 leaves unset fields None: its defaults
        value = getattr(gen, name, None)
        return default if value is None else value

    suppress = []
    for words in get("bad_words_ids", []):
        if len(words) != 1:
            raise Seq2OnnxError(f"generation_config.json: bad_words_ids holds {words}, a phrase of several tokens; "
                                "seq2onnx suppresses single tokens only")
        suppress.append(int(words[0]))
    suppress += [int(t) for t in get("suppress_tokens", [])]
    max_length = get("max_new_tokens", get("max_length", 20) - 1)
    forced_eos = get("forced_eos_token_id", None)
    if isinstance(forced_eos, list):
        forced_eos = forced_eos[0] if len(forced_eos) == 1 else forced_eos
    if forced_eos is not None and forced_eos != cfg.eos_id:
        raise Seq2OnnxError(f"generation_config.json: forced_eos_token_id {forced_eos} is not the model's EOS "
                            f"({cfg.eos_id})")
    early = get("early_stopping", False)
    options = {"beam_rules": "transformers", "beam_size": int(get("num_beams", 1)),
               "max_decoding_length": int(min(max_length, cfg.max_positions)),
               "min_decoding_length": int(max(0, get("min_length", 0) - 1)), "max_length_a": 0.0,
               "max_length_b": None, "length_penalty": float(get("length_penalty", 1.0)),
               "early_stopping": early if early in (True, False, "never") else False,
               "suppress_ids": sorted(set(suppress)), "forced_eos": forced_eos is not None,
               "renormalize": bool(get("renormalize_logits", False)),
               "no_repeat_ngram_size": int(get("no_repeat_ngram_size", 0)),
               "repetition_penalty": float(get("repetition_penalty", 1.0))}
    if options["min_decoding_length"] > options["max_decoding_length"]:
        options["min_decoding_length"] = options["max_decoding_length"]
    try:        # the runtime's own rule for a package's generation field (read_package checks it again)
        DecodingOptions(**options)
    except (OptionError, TypeError, ValueError) as e:
        raise Seq2OnnxError(f"generation_config.json gives a decoding option seq2onnx cannot run ({e}); "
                            f"{DOWNLOAD}") from None
    return options


# --- the gate against transformers ---------------------------------------------------------------------------
@torch.no_grad()
def check_log_probs(hf_model: Any, model: Transformer, sources: List[List[int]]) -> float:
    """Teacher-forced log-probs of our mapped PyTorch model against transformers' on `sources` (their first
    tokens as targets too) -> the max abs difference; above parity.FP32_TOLERANCE: ParityError. On one torch thread
    (hf_generate says why)."""
    with parity.one_torch_thread():
        worst = _max_log_prob_diff(hf_model, model, sources[:8])
    if not worst <= parity.FP32_TOLERANCE:
        raise parity.ParityError(f"the converted model's log-probs differ from transformers' by {worst:.3g} (> "
                                 f"{parity.FP32_TOLERANCE:g}); the package was not written")
    return worst


def _max_log_prob_diff(hf_model: Any, model: Transformer, sources: List[List[int]]) -> float:
    cfg = model.cfg
    worst = 0.0
    for src in sources:
        ids = torch.tensor([src])
        tgt = torch.tensor([[cfg.start_id] + [t for t in src[:-1] if t < cfg.vocab_size][:16]])
        ours = torch.log_softmax(model(ids, torch.ones_like(ids), tgt).float(), -1)
        theirs = torch.log_softmax(hf_model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                            decoder_input_ids=tgt).logits.float(), -1)
        worst = max(worst, float((ours - theirs).abs().max()))
    return worst


def hf_tokens(sequences: torch.Tensor, eos_id: int) -> List[List[int]]:
    """generate()'s sequences -> the generated ids: without the decoder start, the EOS and the padding after."""
    out = []
    for row in sequences.tolist():
        row = row[1:]
        if eos_id in row:
            row = row[:row.index(eos_id)]
        out.append(row)
    return out


@torch.no_grad()
def hf_generate(hf_model: Any, sources: List[List[int]], batch_size: int = 8,
                **options: Any) -> List[Tuple[List[int], float]]:
    """transformers' generate() on id sources, in batches of sources of similar length (right-padded as its
    tokenizers pad) -> per source (the generated ids without the decoder start and EOS, the hypothesis's score as
    generate() ranks it: sequences_scores with beams, the sum of the chosen tokens' processed log-probs without).
    On one torch thread, as the parity checks (parity.one_torch_thread): at OPUS-MT en-de's size greedy decoding of 8
    sources took 5 CPU seconds on one thread, 35 on two (busy 2 cores; 4x the wall time)."""
    with parity.one_torch_thread():
        return _hf_generate(hf_model, sources, batch_size, **options)


def _hf_generate(hf_model: Any, sources: List[List[int]], batch_size: int,
                 **options: Any) -> List[Tuple[List[int], float]]:
    pad, eos = hf_model.config.pad_token_id, hf_model.generation_config.eos_token_id
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: List[Any] = [None] * len(sources)
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        width = max(len(sources[i]) for i in batch)
        ids = torch.tensor([sources[i] + [pad] * (width - len(sources[i])) for i in batch])
        mask = torch.tensor([[1] * len(sources[i]) + [0] * (width - len(sources[i])) for i in batch])
        got = hf_model.generate(input_ids=ids, attention_mask=mask, output_scores=True, return_dict_in_generate=True,
                                do_sample=False, num_return_sequences=1, **options)
        generated = hf_tokens(got.sequences, eos)
        if getattr(got, "sequences_scores", None) is not None:
            scores = got.sequences_scores.tolist()
        else:   # greedy (its scores are the processed logits): the chosen tokens' log-probs, up to and with the EOS
            steps = chosen_log_probs(got.sequences, got.scores)
            scores = [float(row[:len(tokens) + 1].sum()) for row, tokens in zip(steps, generated)]
        for i, tokens, score in zip(batch, generated, scores):
            out[i] = (tokens, float(score))
    return out


def chosen_log_probs(sequences: Any, scores: Tuple[Any, ...]) -> Any:
    """Greedy generate()'s chosen tokens' log-probs [B, steps]: the log-softmax of each step's processed logits
    (`scores`, [B, V] a step) at the token taken, what compute_transition_scores(normalize_logits=True) means. Not
    that function itself: it takes the log-softmax across a transposed [B, V, steps] view, a strided reduction whose
    float32 sum over V drifts with the vocabulary's size: at NLLB's 256,206 entries, by more than SCORE_TOLERANCE a
    token, while the contiguous reduction that PyTorch and onnxruntime both run stays within the parity checks'."""
    taken = sequences[:, -len(scores):]
    return torch.stack([step.float().log_softmax(-1).gather(1, taken[:, t:t + 1])[:, 0]
                        for t, step in enumerate(scores)], dim=1)


def compare_generate(ours: List[Any], theirs: List[Tuple[List[int], float]], beam_size: int,
                     tolerance: float = SCORE_TOLERANCE) -> Dict[str, Any]:
    """The package's runtime (`ours`: our_decode's hypotheses of the gate's sources) against transformers' generate()
    (`theirs`: gate_generate's of the same sources and beam size) -> {sentences, identical, ties, max_score_diff
    (greedy: per token)}. A different hypothesis whose score is within score_tolerance of transformers' is a tie (two
    hypotheses the same up to float32 rounding), counted apart."""
    identical = ties = 0
    worst = 0.0
    for hyps, (tokens, score) in zip(ours, theirs):
        mine = hyps[0].normalized_score if beam_size > 1 else hyps[0].score
        diff = abs(score - mine) / score_tolerance(beam_size > 1, len(tokens), tolerance) * tolerance
        if list(hyps[0].tokens) == tokens:
            identical += 1
            worst = max(worst, diff)
        elif diff <= tolerance:
            ties += 1
    return {"sentences": len(theirs), "identical": identical, "ties": ties, "max_score_diff": worst}


def gate_generate(hf_model: Any, sources: List[List[int]], beam_size: int, max_length: int,
                  forced_bos: Optional[int]) -> List[Tuple[List[int], float]]:
    """transformers' generate() as the gate runs it: its generation_config, num_beams and max_length set as
    our_decode's."""
    return hf_generate(hf_model, sources, num_beams=beam_size, max_length=max_length + 1,
                       **({} if forced_bos is None else {"forced_bos_token_id": forced_bos}))


def our_decode(translator: Any, sources: List[List[int]], beam_size: int, max_length: int,
               forced_bos: Optional[int]) -> List[Any]:
    """The package's runtime (`translator`, over the package: its generation defaults, beam_size and
    max_decoding_length set) on `sources`: the hypotheses compare_generate compares."""
    extra = {} if forced_bos is None else {"forced_bos_id": forced_bos}
    return translator.translate_ids(sources, max_batch_size=8, beam_size=beam_size, max_decoding_length=max_length,
                                    **extra)


def transformers_gate(hf_model: Any, sources: List[List[int]], defaults: Dict[str, Any],
                      forced_bos: Optional[int], log_probs_diff: float) -> Callable[[Path, Dict[str, Any]], str]:
    """The check of the finished package before it is published: greedy and beam search (the model's beam size,
    or 4 when it decodes greedily) against transformers, tokens identical up to ties and scores within
    SCORE_TOLERANCE a token, or within the fp32 parity's log-prob tolerance where the model's own float32 noise raised
    it (parity.check_fp32): a score sums log-probs that each lie within it; the figures go into the manifest's
    source_model.parity (written after the gate).
    The two sides are computed apart (neither reads the other's numbers) and side by side: transformers' beam search
    in a forked child (export/beside.py), its greedy search here, the package (loaded once, its sessions on one
    onnxruntime thread) decoding both in a thread of its own: generate() is Python for the most part, which two
    threads of one process would take turns at."""
    def gate(staging: Path, manifest: Manifest) -> str:
        from seq2onnx.runtime.translator import Translator
        max_length = min(defaults["max_decoding_length"], GATE_MAX_LENGTH)
        fp32_parity = manifest.variants["fp32"].parity or {}
        tolerance = max(SCORE_TOLERANCE, float(fp32_parity.get("decoder_tolerance", SCORE_TOLERANCE)))
        figures: Dict[str, Any] = {"log_probs_max_abs_diff": log_probs_diff, "score_tolerance": tolerance}
        beam = max(defaults["beam_size"], 2)
        checks = (("greedy", 1), (f"beam{beam}", beam))
        with beside(lambda: gate_generate(hf_model, sources, beam, max_length, forced_bos),
                    "transformers' beam search") as their_beam, ThreadPoolExecutor(1) as pool:
            translator = Translator(staging, device="cpu", compute_type="float32", intra_threads=1)
            ours = [pool.submit(our_decode, translator, sources, k, max_length, forced_bos) for _, k in checks]
            theirs = {1: gate_generate(hf_model, sources, 1, max_length, forced_bos)}
            for (name, k), decoded in zip(checks, ours):
                got = compare_generate(decoded.result(), theirs[k] if k == 1 else their_beam.result(), k, tolerance)
                figures[name] = got
                if got["identical"] + got["ties"] < got["sentences"] or got["max_score_diff"] > tolerance:
                    raise parity.ParityError(
                        f"{name} against transformers: {got['identical']} of {got['sentences']} sentences identical "
                        f"({got['ties']} ties), score diff {got['max_score_diff']:.3g}; the package was not written")
        package.write_manifest(staging, dataclasses.replace(
            manifest, source_model=dataclasses.replace(manifest.source_model, parity=figures)))
        return (f"      gate vs transformers {getattr(sys.modules.get('transformers'), '__version__', '?')}: "
                + ", ".join(f"{k} {v['identical']}/{v['sentences']} identical ({v['ties']} ties)"
                            for k, v in figures.items() if isinstance(v, dict))
                + f", log-probs max diff {log_probs_diff:.2g}")
    return gate


# --- the command ------------------------------------------------------------------------------------------------
@dataclass
class ConvertOptions:
    model_dir: Path
    out_dir: Path
    int8: bool = False
    fp16: bool = False
    opset: int = commands.DEFAULT_OPSET
    overwrite: bool = False
    parity_data: Optional[Path] = None     # source sentences for the parity checks and the gate (else synthetic only)
    int8_validation: bool = True
    external_data: bool = False            # every graph's weights in a data file beside it (export/graph_files.py)
    few_rows: bool = False                 # int8: also a decoder step for steps of few rows (--few-rows)


def parse_args(argv: List[str]) -> ConvertOptions:
    p = OneLineParser(prog="seq2onnx convert", description=__doc__.split("\n\n")[0],
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", type=Path, help="a transformers model folder (hf download MODEL "
                   "--local-dir FOLDER): config.json, the weights, generation_config.json, the tokenizer files")
    p.add_argument("out_dir", type=Path, help="the model package folder to write")
    p.add_argument("--int8", action="store_true", help="also write the int8 (dynamic quantisation) variant")
    p.add_argument("--skip-int8-validation", action="store_true",
                   help="keep the int8 variant even when it fails its quality gate (its figures are recorded)")
    p.add_argument("--fp16", action="store_true", help="also write the float16 variant (for CUDA)")
    p.add_argument("--opset", type=int, default=commands.DEFAULT_OPSET, help="ONNX opset (default %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT_DIR if it holds a model package")
    p.add_argument("--parity-data", type=Path, metavar="FILE",
                   help="source sentences (one a line) for the parity checks and the gate against transformers, "
                        "besides synthetic ones")
    commands.add_external_data_arg(p)
    commands.add_few_rows_arg(p)
    a = p.parse_args(argv)
    commands.check_int8_args(p, a)
    return ConvertOptions(a.model_dir, a.out_dir, a.int8, a.fp16, a.opset, a.overwrite, a.parity_data,
                          not a.skip_int8_validation, a.external_data, a.few_rows)


def convert_main(argv: List[str]) -> int:
    opts = parse_args(argv)
    result = run_convert(opts, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    print(commands.summary(result), flush=True)
    return 0


def _gate_sources(cfg: ModelConfig, prefix: List[int], avoid: set, real: List[List[int]]) -> List[List[int]]:
    """The real sources, then GATE_SENTENCES synthetic ones (random non-special source ids, 2 to 30 of them,
    after the language prefix), each ending with EOS."""
    rng = np.random.default_rng(1234)
    words = [i for i in range(cfg.source_vocab_size) if i not in avoid]
    synthetic = [prefix + [int(x) for x in rng.choice(words, size=int(n))] + [cfg.eos_id]
                 for n in rng.integers(2, 31, size=GATE_SENTENCES)]
    return real + synthetic


def run_convert(opts: ConvertOptions, log: Callable[[str], None] = lambda msg: None) -> ExportResult:
    """An HF model folder -> a checked package at opts.out_dir; Seq2OnnxError (nothing written) on failure.
    Every file of the folder is read by the rule of hf_tokenizers.check_folder / read_json, every setting checked
    when it is read: a refusal comes before any export work."""
    start = time.perf_counter()
    folder = Path(opts.model_dir)
    hf_config = read_config(folder)
    cfg = model_config(hf_config)
    read_generation_config(folder, hf_config)
    # the tokenizers are converted (Python, seconds) in a child on the second core while the weights load here
    tokenizers = Job(lambda: hf_tokenizers.convert(folder, hf_config), "the tokenizers' conversion")
    try:
        export_opts = ExportOptions(folder, opts.out_dir, opts.int8, opts.fp16, opts.opset, opts.overwrite,
                                    opts.parity_data, opts.int8_validation, external_data=opts.external_data,
                                    few_rows=opts.few_rows)
        commands.check_opset(opts.opset)
        package.check_target(Path(opts.out_dir).absolute(), opts.overwrite)
        hf_model = load_hf_model(folder)
        defaults = generation_defaults(hf_model.generation_config, cfg)
        model = transformer_from_hf(hf_model, cfg)
    except BaseException:
        tokenizers.result()                 # a refusal of the tokenizers first, as when they were converted first
        raise
    toks = tokenizers.result()
    log(f"[0/5] load: {hf_config['model_type']} from {folder} ({model.num_parameters() / 1e6:.1f}M parameters), "
        f"tokenizers and generation_config converted ({time.perf_counter() - start:.1f}s)")

    langs: Optional[Languages] = toks.languages
    prefix, forced_bos = toks.default_language_ids()
    source_tok = toks.source_tokenizer()
    real = commands._parity_sources(opts.parity_data, source_tok, cfg, prefix)
    specials = {cfg.pad_id, cfg.bos_id, cfg.eos_id, cfg.unk_id, cfg.start_id, *toks.special_ids()}
    sources = _gate_sources(cfg, prefix, specials, real)
    t = time.perf_counter()
    diff = check_log_probs(hf_model, model, sources)
    log(f"      load: log-probs of the mapped model against transformers', max diff {diff:.2g} "
        f"({time.perf_counter() - t:.1f}s)")
    import transformers
    source = SourceModel(hf_config["model_type"], folder.name, tuple(hf_config.get("architectures") or ()),
                         transformers.__version__)
    contents = PackageContents(toks.files, Tokenizers.from_manifest(toks.field, folder / MANIFEST), toks.special_tokens,
                               SourceCheckpoint(folder.name, {}), langs, defaults, source,
                               transformers_gate(hf_model, sources, defaults, forced_bos, diff))
    return commands.write_package(model, contents, export_opts, real, log, start)
