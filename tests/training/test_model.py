"""The Transformer itself (training/model.py) and the reference decoding (training/reference.py)."""
from __future__ import annotations

import math

import pytest
import torch

from tests.agreement import Float32Bounds, assert_same_decodes, torch_judge
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.training.model import Transformer, padding_bias, sinusoidal_positions
from seq2onnx.training.reference import beam_search, greedy_search, pad_batch


def small_model(norm_first: bool = False, seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    cfg = ModelConfig.preset("tiny", vocab_size=40, dropout=0.0, norm_first=norm_first, **overrides)
    return Transformer(cfg).eval()


def batch_with_padding(vocab: int = 40, seed: int = 1):
    """Sources of lengths 7 and 4 (padded), targets of length 6: ids >= 4 (no specials)."""
    g = torch.Generator().manual_seed(seed)
    sources = [torch.randint(4, vocab, (7,), generator=g).tolist() + [2],
               torch.randint(4, vocab, (4,), generator=g).tolist() + [2]]
    src_ids, src_mask = pad_batch(sources, pad_id=0)                        # [2, 8]
    tgt_in = torch.cat([torch.ones(2, 1, dtype=torch.long), torch.randint(4, vocab, (2, 5), generator=g)], 1)
    return src_ids, src_mask, tgt_in                                         # tgt_in [2, 6]


@pytest.mark.parametrize("norm_first", [False, True])
def test_future_target_token_cannot_change_earlier_outputs(norm_first):
    model = small_model(norm_first)
    src_ids, src_mask, tgt_in = batch_with_padding()
    with torch.no_grad():
        base = model(src_ids, src_mask, tgt_in)                               # [2, 6, V]
        for t in range(1, tgt_in.shape[1]):
            changed = tgt_in.clone()
            changed[:, t] = (changed[:, t] + 7) % 36 + 4                      # another real token at position t
            out = model(src_ids, src_mask, changed)
            assert torch.equal(out[:, :t], base[:, :t]), f"position < {t} saw the token at {t}"
            assert not torch.allclose(out[:, t:], base[:, t:]), "the perturbation had no effect at all"


def test_padding_in_the_source_changes_nothing():
    model = small_model()
    src_ids, src_mask, tgt_in = batch_with_padding()
    with torch.no_grad():
        alone = model(src_ids[1:, :5], src_mask[1:, :5], tgt_in[1:])          # the short source, unpadded
        padded = model(src_ids, src_mask, tgt_in)[1:]
        src_ids2 = src_ids.clone()
        src_ids2[1, 5:] = 9                                                   # garbage under the padding mask
        garbage = model(src_ids2, src_mask, tgt_in)[1:]
    # other shapes (a padded batch against one sentence) run other kernel paths: agreement.py's bound on a logit
    torch.testing.assert_close(padded, alone, rtol=0, atol=Float32Bounds.of_model(model).logit)
    torch.testing.assert_close(garbage, padded, rtol=0, atol=0)


def test_positional_encoding_matches_the_formula():
    d, n = 16, 50
    pe = sinusoidal_positions(n, d)
    for pos in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert pe[1, 0].item() == pytest.approx(0.841, abs=5e-4)                 # sin(1)
    assert torch.equal(pe[0, 0::2], torch.zeros(d // 2)) and torch.equal(pe[0, 1::2], torch.ones(d // 2))
    assert torch.equal(small_model().pe, sinusoidal_positions(512, 64))


@pytest.mark.parametrize("norm_first", [False, True])
def test_incremental_decode_step_equals_full_teacher_forced_forward(norm_first):
    model = small_model(norm_first)
    src_ids, src_mask, tgt_in = batch_with_padding()
    with torch.no_grad():
        full = torch.log_softmax(model(src_ids, src_mask, tgt_in), dim=-1)   # [2, T, V]
        cross = model.cross_kv(model.encode(src_ids, src_mask))
        past = model.empty_cache(2)
        for t in range(tgt_in.shape[1]):
            step_logp, past = model.decode_step(tgt_in[:, t:t + 1], src_mask, past, cross)   # [2, V]
            # one step against the whole sequence: other kernel paths, agreement.py's bound on a log-prob
            torch.testing.assert_close(step_logp, full[:, t], rtol=0, atol=Float32Bounds.of_model(model).log_prob)
            assert past[0][0].shape == (2, model.cfg.n_heads, t + 1, model.cfg.head_dim)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decode_step_shares_cross_per_sentence(norm_first):
    """decode_step with G rows per sentence and one cross K/V + mask per sentence computes what it
    computes with the cross K/V and mask copied to every row (and G = 1 is the very same computation)."""
    model = small_model(norm_first, seed=2)
    src_ids, src_mask, _ = batch_with_padding()                               # 2 sentences, one padded
    g, steps = 3, 5
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        cross = model.cross_kv(model.encode(src_ids, src_mask))               # [2, H, S, Dh] per layer
        copied = [(k.repeat_interleave(g, 0), v.repeat_interleave(g, 0)) for k, v in cross]
        mask_rows = src_mask.repeat_interleave(g, 0)                           # row = sentence * g + beam
        past_shared, past_copied = model.empty_cache(2 * g), model.empty_cache(2 * g)
        for _ in range(steps):
            ids = torch.randint(4, 40, (2 * g, 1), generator=gen)             # the rows differ
            shared_logp, past_shared = model.decode_step(ids, src_mask, past_shared, cross)
            copied_logp, past_copied = model.decode_step(ids, mask_rows, past_copied, copied)
            assert shared_logp.shape == (2 * g, 40)
            # the attention on other shapes (per sentence or per row): agreement.py's bound on a log-prob
            torch.testing.assert_close(shared_logp, copied_logp, rtol=0, atol=Float32Bounds.of_model(model).log_prob)
            for (ks, vs), (kc, vc) in zip(past_shared, past_copied):
                torch.testing.assert_close(ks, kc, rtol=0, atol=1e-5)
                torch.testing.assert_close(vs, vc, rtol=0, atol=1e-5)
        # a row attends to its own sentence: swapping the sentences' cross K/V changes every row
        swapped = [(k.flip(0), v.flip(0)) for k, v in cross]
        other, _ = model.decode_step(ids, src_mask.flip(0), model.empty_cache(2 * g), swapped)
        first, _ = model.decode_step(ids, src_mask, model.empty_cache(2 * g), cross)
        assert (other - first).abs().amax(dim=1).min() > 1e-3
        # G = 1 (a row per sentence): the per-sentence attention is the training path's, bit for bit
        attn = model.decoder_layers[0].cross_attn
        x = torch.randn(2, 1, model.cfg.d_model, generator=gen)
        bias = padding_bias(src_mask, x.dtype)
        assert torch.equal(attn.forward_per_sentence(x, cross[0], bias), attn(x, cross[0], bias))


def test_reference_beam_size_one_equals_greedy():
    model = small_model(seed=3)
    g = torch.Generator().manual_seed(5)
    sources = [torch.randint(4, 40, (n,), generator=g).tolist() + [2] for n in (3, 9, 5, 1)]
    greedy = greedy_search(model, sources, max_length=12)
    beam = beam_search(model, sources, beam_size=1, max_length=12)
    # the beam runs its rows on other shapes: the same decodes up to agreement.py's bound, ties judged teacher-forced
    assert_same_decodes(Float32Bounds.of_model(model), torch_judge(model), sources, beam, [[h] for h in greedy],
                        greedy=True, eos_id=model.cfg.eos_id)


def test_shared_and_tied_embeddings_are_one_storage():
    model = small_model()
    assert model.src_embed.weight is model.tgt_embed.weight is model.output_projection.weight
    assert model.src_embed.weight.data_ptr() == model.output_projection.weight.data_ptr()
    with torch.no_grad():
        model.output_projection.weight[5, 0] = 123.0
    assert model.src_embed.weight[5, 0].item() == 123.0
    unique = {p.data_ptr() for p in model.parameters()}
    assert len(unique) == len(list(model.parameters()))                     # the shared table counted once

    untied = small_model(share_embeddings=False, tie_output_embedding=False)
    ptrs = {untied.src_embed.weight.data_ptr(), untied.tgt_embed.weight.data_ptr(),
            untied.output_projection.weight.data_ptr()}
    assert len(ptrs) == 3
    assert untied.num_parameters() == model.num_parameters() + 2 * 40 * 64
