"""The benchmark's converters (bench/ct2_convert.py, bench/hf_marian.py) compute our model exactly.

Checked at tiny size on random weights (biases and LayerNorms randomised too): teacher-forced
log-probs of every target position against our PyTorch model, and greedy / beam tokens against
training/reference.py. Skipped when the bench extra (ctranslate2, transformers) is not installed.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import REPO

sys.path.insert(0, str(REPO))      # the repository root: `bench` package

from bench.base_model import load_model, make_tokenizer, random_model, reference_log_probs, save_checkpoint  # noqa: E402
from seq2onnx.runtime.package.config import ModelConfig  # noqa: E402
from seq2onnx.training.reference import beam_search, greedy_search  # noqa: E402

VOCAB = 300
LENGTH = 12
# log-probs here are around -12; float32 summation order moves them by ~1e-4, a wrong weight by > 0.1
LOGP_TOLERANCE = 1e-3


def _checkpoint(folder: Path, **overrides) -> Path:
    cfg = ModelConfig.preset("tiny", vocab_size=VOCAB, **overrides)
    path = folder / "model.pt"
    save_checkpoint(random_model(cfg, seed=3), make_tokenizer(VOCAB), path, seed=3)
    return path


@pytest.fixture(scope="module")
def post_norm(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("post_norm"))


@pytest.fixture(scope="module")
def pre_norm(tmp_path_factory) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("pre_norm"), norm_first=True)


def _data(seed: int, n: int = 6, src_len: int = 10, tgt_len: int = 9):
    rng = random.Random(seed)
    sources = [[rng.randrange(4, VOCAB) for _ in range(src_len - 1)] + [2] for _ in range(n)]
    targets = [[rng.randrange(4, VOCAB) for _ in range(tgt_len)] for _ in range(n)]
    return sources, targets


def _reference_tokens(model, sources, beam):
    if beam == 1:
        return [h.tokens for h in greedy_search(model, sources, max_length=LENGTH, min_length=LENGTH)]
    return [h[0].tokens for h in beam_search(model, sources, beam_size=beam, max_length=LENGTH, min_length=LENGTH)]


@pytest.mark.parametrize("which", ["post_norm", "pre_norm"])
def test_ctranslate2_model_matches_ours(which, request, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from bench.ct2_convert import checkpoint_tokens, convert, score
    from bench.engines import CTranslate2

    ckpt = request.getfixturevalue(which)
    tokens = checkpoint_tokens(ckpt)
    out = convert(ckpt, tmp_path / "ct2", tokens)
    model = load_model(ckpt)
    sources, targets = _data(seed=1)

    translator = ctranslate2.Translator(str(out), compute_type="float32", intra_threads=1)
    diff = np.abs(score(translator, tokens, sources, targets) - reference_log_probs(model, sources, targets)).max()
    assert diff < LOGP_TOLERANCE, f"CTranslate2 log-probs differ from ours by {diff}"

    engine = CTranslate2(out, "float32", tokens, never=(model.cfg.pad_id, model.cfg.bos_id), threads=1)
    for beam in (1, 4):
        got, _ = engine.run(sources, beam, LENGTH)
        assert got == _reference_tokens(model, sources, beam), f"beam {beam}"


def test_marian_model_matches_ours(post_norm):
    pytest.importorskip("transformers")
    from bench.engines import HFTorch
    from bench.hf_marian import marian_from_transformer, marian_log_probs

    model = load_model(post_norm)
    sources, targets = _data(seed=2)
    hf = marian_from_transformer(model)
    diff = np.abs(marian_log_probs(hf, model.cfg, sources, targets) - reference_log_probs(model, sources, targets)).max()
    assert diff < LOGP_TOLERANCE, f"MarianMT log-probs differ from ours by {diff}"

    engine = HFTorch(post_norm, threads=1)
    for beam in (1, 4):
        got, _ = engine.run(sources, beam, LENGTH)
        assert got == _reference_tokens(model, sources, beam), f"beam {beam}"


def test_marian_mapping_refuses_pre_norm(pre_norm):
    pytest.importorskip("transformers")
    from bench.hf_marian import marian_from_transformer

    with pytest.raises(ValueError, match="norm_first=True"):
        marian_from_transformer(load_model(pre_norm))


def test_width_permutation_turns_our_sinusoids_into_marians():
    import torch

    from bench.hf_marian import width_permutation
    from seq2onnx.training.model import sinusoidal_positions

    pe = sinusoidal_positions(50, 16)
    perm = width_permutation(16)
    assert sorted(perm.tolist()) == list(range(16))
    # Marian: sines of all frequencies in the first half, cosines in the second
    assert torch.equal(pe[:, perm][:, :8], pe[:, 0::2]) and torch.equal(pe[:, perm][:, 8:], pe[:, 1::2])
