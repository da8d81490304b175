"""Cross K/V once per sentence (docs/CONTRACTS.md, decoder_step): the decoder step graph takes the cross
K/V and encoder mask with one row per sentence and shares them between the sentence's beams.

  * packages of this contract (the session's tiny package): greedy, beam 4 with n-best, and batches
    whose sentences finish at different steps decode to the PyTorch reference's tokens and scores,
    while the engine is given one cross K/V row per live sentence;
  * packages of the earlier contract (no `cross_per_sentence` in the manifest: the shipped
    numbers-en-de, and the tiny package with the field removed) decode as before, a copy per row;
  * a manifest that claims per-sentence cross for a graph that takes a copy per row is refused;
  * the export's parity check catches a decoder that is right with one row per sentence only (its decoder step
    traced, the encoder the package's: fixtures_export.package_graphs).
Everything runs for real at small size (fixtures_training.py, fixtures_export.py)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests import DATA
from tests.agreement import Float32Bounds, assert_same_decodes, engine_judge, torch_judge
from tests.fixtures_export import package_graphs
from tests.fixtures_training import toy_pairs
from tests.limits import reference_max_length
from seq2onnx.export import onnx_export, parity
from seq2onnx.export.commands import ExportOptions, run_export
from seq2onnx.runtime.decode.decoding import decode
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.decode.search import Hypothesis, normalize
from seq2onnx.runtime.engine.cuda import IoBindingEngine
from seq2onnx.runtime.engine.session import SessionConfig, open_session
from seq2onnx.runtime.translator import Translator
from seq2onnx.training import model as model_module
from seq2onnx.training import reference
from seq2onnx.training.model import attention_weights, padding_bias

# numbers-en-de as shipped before cross_per_sentence existed (its checkpoint is gone): the only real graph of the
# earlier contract, kept as test data (the same files as models/numbers-en-de at 3a60566, whose blobs git holds)
EARLIER = DATA / "numbers-en-de-earlier-contract"


def rows(value) -> int:
    """Rows of a numpy array or an OrtValue (IoBindingEngine)."""
    return value.shape[0] if isinstance(value, np.ndarray) else value.shape()[0]


class RecordingEngine:
    """Delegates to a real engine; records per step the rows of input_ids and of the encoder mask / cross K/V."""
    picks_top_k = False                 # it records step(): beam search steps through it, not step_top_k

    def __init__(self, engine):
        self.engine = engine
        self.cross_per_sentence = engine.cross_per_sentence
        self.rows, self.cross_rows = [], []

    def __getattr__(self, name):                          # the rest of the engine's interface
        return getattr(self.engine, name)

    def encode(self, *args):
        return self.engine.encode(*args)

    def step(self, input_ids, encoder_mask, past, cross):
        self.rows.append(len(input_ids))
        self.cross_rows.append(rows(encoder_mask))
        assert {rows(c) for c in cross} == {rows(encoder_mask)}
        return self.engine.step(input_ids, encoder_mask, past, cross)

    def take(self, values, index):
        return self.engine.take(values, index)


@pytest.fixture(scope="module")
def translator(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def old_contract_package(tiny_package, tmp_path_factory):
    """The tiny package as a package of the earlier contract: its manifest without cross_per_sentence."""
    out = tmp_path_factory.mktemp("old_contract") / "model"
    shutil.copytree(tiny_package, out)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    del manifest["graphs"]["decoder_step"]["cross_per_sentence"]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def sources(translator):
    """1 to 9 words: in one batch the sentences finish at many different steps."""
    texts = [s for s, _ in toy_pairs(14, seed=11, min_words=1, max_words=9)] + ["one", "two three"]
    eos = translator.config.eos_id
    return [translator.tokenizer.encode(t).ids + [eos] for t in texts]


def io_binding_engine(tr: Translator, cross_per_sentence: bool) -> IoBindingEngine:
    """The CUDA engine's code path (IO binding, OrtValues, Gather-graph reorder) on the CPU provider."""
    sc = SessionConfig("cpu", intra_threads=1)
    v = tr.package.variants["fp32"]
    return IoBindingEngine(open_session(v.encoder, "encoder", tr.config, sc),
                           open_session(v.decoder_step, "decoder_step", tr.config, sc), tr.config, device="cpu",
                           cross_per_sentence=cross_per_sentence)


def assert_same(model, sources, got, ref, options: DecodingOptions):
    """The same decodes up to float32 rounding: scores within the derived bound, a different hypothesis only where
    PyTorch, teacher-forced, scores it as tied with the expected one (agreement.py)."""
    assert_same_decodes(Float32Bounds.of_model(model), torch_judge(model), sources, got, ref,
                        greedy=options.beam_size == 1, eos_id=model.cfg.eos_id, length_penalty=options.length_penalty)


def shrink_steps(rows):
    return [i for i in range(1, len(rows)) if rows[i] < rows[i - 1]]


# --- packages of this contract ---------------------------------------------------------------------------
def test_the_export_writes_per_sentence_packages(tiny_package, translator):
    assert read_package(tiny_package).cross_per_sentence is True
    assert translator.engine.cross_per_sentence is True


# Sentences that end at different steps, whatever the model learned: the relative limit gives each source
# max_length_a * src_len + max_length_b steps, and with min_decoding_length at least that limit EOS stays forbidden
# until the limit ends it, so the sources of 1 and 2 words ("one", "two three": 2 and 3 ids with EOS) end after
# exactly 3 and 4 steps, while every other source (a limit of 5 or more) is still live at step 4.
STAGGERED = dict(min_decoding_length=4, max_length_a=1.0, max_length_b=1)


@pytest.mark.parametrize("engine_kind", ["array", "io_binding"])
@pytest.mark.parametrize("opts", [
    dict(beam_size=1),
    dict(beam_size=4, num_hypotheses=4),
    dict(beam_size=4, num_hypotheses=2, length_penalty=0.6, max_decoding_length=7),   # the limit ends live beams
    dict(beam_size=3, num_hypotheses=1, **STAGGERED),                                 # sentences end at 3, 4, 5+
])
def test_per_sentence_decoding_matches_reference(translator, tiny_model, sources, engine_kind, opts):
    options = DecodingOptions(**opts)
    k = options.beam_size
    kw = dict(max_length=reference_max_length(translator.config, sources, **opts),
              min_length=options.min_decoding_length, length_penalty=options.length_penalty)
    if k == 1:
        ref = [[h] for h in reference.greedy_search(tiny_model, sources, **kw)]
    else:   # the reference copies the cross K/V to every row: an independent computation
        ref = reference.beam_search(tiny_model, sources, beam_size=k, num_hypotheses=options.num_hypotheses, **kw)
    base = translator.engine if engine_kind == "array" else io_binding_engine(translator, True)
    engine = RecordingEngine(base)
    got = decode(engine, translator.config, sources, options)
    assert_same(tiny_model, sources, got, ref, options)
    # one cross K/V row per live sentence at every step, shrinking as sentences finish, never growing
    assert engine.cross_rows == [r // k for r in engine.rows]
    assert engine.cross_rows[0] == len(sources)
    assert engine.rows == sorted(engine.rows, reverse=True)
    if opts.get("min_decoding_length") == STAGGERED["min_decoding_length"]:
        limits, m = kw["max_length"], options.min_decoding_length
        # no sentence can end by EOS within m steps: up to step m the live rows are those whose limit lies ahead
        assert engine.rows[:m + 1] == [k * sum(limit > t for limit in limits) for t in range(m + 1)]
        assert len(shrink_steps(engine.rows[:m + 1])) >= 2                 # at least two steps shrank the batch
        for limit, hyps in zip(limits, got):
            if limit <= m:                                                 # ended by the limit, EOS never allowed
                assert all(len(h.tokens) == limit and not h.finished for h in hyps)


def test_per_sentence_translate_ids_matches_reference(translator, tiny_model, sources):
    """Through the public API, with max_batch_size splitting the batch."""
    ref = reference.beam_search(tiny_model, sources, beam_size=4, num_hypotheses=3,
                                max_length=reference_max_length(translator.config, sources))
    for max_batch_size in (0, 5):
        assert_same(tiny_model, sources, translator.translate_ids(sources, beam_size=4, num_hypotheses=3,
                                                                  max_batch_size=max_batch_size),
                    ref, DecodingOptions(beam_size=4, num_hypotheses=3))


def test_int8_per_sentence_matches_int8_with_a_copy_per_row(tiny_package, sources):
    """The int8 graph with per-sentence cross against the same graph given a copy per row (G = 1). The two feed the
    attention other shapes (other kernel paths): the same decodes up to agreement.py's int8 bound (float32 rounding
    and one quantization step of the logits' input), where they part a tie judged by the int8 engine teacher-forced,
    one sentence at a time (where per-sentence and per-row cross are the same thing)."""
    tr = Translator(tiny_package, device="cpu", compute_type="int8", intra_threads=1)
    assert tr.variant == "int8" and tr.engine.cross_per_sentence
    options = DecodingOptions(beam_size=4, num_hypotheses=2)
    shared = decode(tr.engine, tr.config, sources, options)
    tr.engine.cross_per_sentence = False
    try:
        copied = decode(tr.engine, tr.config, sources, options)
    finally:
        tr.engine.cross_per_sentence = True
    assert_same_decodes(Float32Bounds.of_graph(Path(tiny_package) / "decoder_step.onnx", int8=True),
                        engine_judge(tr.engine, tr.config), sources, shared, copied, greedy=False,
                        eos_id=tr.config.eos_id, what="int8, cross per sentence against a copy per row")


# --- packages of the earlier contract -------------------------------------------------------------------------
def test_old_contract_manifest_decodes_with_a_copy_per_row(old_contract_package, tiny_model, sources):
    tr = Translator(old_contract_package, device="cpu", intra_threads=1)
    assert tr.package.cross_per_sentence is False and tr.engine.cross_per_sentence is False
    for engine in (RecordingEngine(tr.engine), RecordingEngine(io_binding_engine(tr, False))):
        options = DecodingOptions(beam_size=4, num_hypotheses=2)
        got = decode(engine, tr.config, sources, options)
        assert_same(tiny_model, sources, got, reference.beam_search(tiny_model, sources, beam_size=4, num_hypotheses=2,
                                               max_length=reference_max_length(tr.config, sources)), options)
        assert engine.cross_rows == engine.rows                      # the cross K/V copied to every row


@pytest.fixture(scope="module")
def shipped():
    return Translator(EARLIER, device="cpu", intra_threads=1)


SHIPPED_TEXTS = ["seven", "forty-two", "three hundred and one", "one thousand and three", "ninety",
                 "four hundred and ninety-five thousand, five hundred and seventeen", "twelve thousand and sixty"]
SHIPPED_GERMAN = ["sieben", "zweiundvierzig", "dreihunderteins", "eintausenddrei", "neunzig",
                  "vierhundertfünfundneunzigtausendfünfhundertsiebzehn", "zwölftausendsechzig"]


@pytest.fixture(scope="module")
def shipped_sources(shipped):
    return [shipped.tokenizer.encode(t).ids + [shipped.config.eos_id] for t in SHIPPED_TEXTS]


def test_earlier_model_is_of_the_earlier_contract(shipped):
    """The earlier numbers-en-de was exported before cross_per_sentence existed: its graph names one batch
    axis for every input, and the runtime gives it a copy per row."""
    dims = {i.name: i.shape for i in shipped.engine.decoder.get_inputs()}
    assert dims["input_ids"][0] == dims["encoder_attention_mask"][0] == dims["cross_key_0"][0] == "batch"
    assert shipped.package.cross_per_sentence is False and shipped.engine.cross_per_sentence is False


@pytest.mark.parametrize("compute_type", ["float32", "int8"])
def test_earlier_model_decodes_with_a_copy_per_row(shipped, shipped_sources, compute_type):
    """The runtime gives the old graph a copy of the cross K/V per row, the way every runtime before this
    contract did, and it translates right: beam 4 and greedy, each engine (fp32: also the IO-binding one,
    token for token the same). The decoding rules on a graph of this contract are checked against the
    PyTorch reference with the tiny package (test_old_contract_manifest_decodes_with_a_copy_per_row).
    int8 quantises activations with one scale per tensor, so it is run one sentence at a time."""
    tr = shipped if compute_type == "float32" else Translator(EARLIER, device="cpu", compute_type="int8",
                                                              intra_threads=1)
    engines = [tr.engine, io_binding_engine(tr, False)] if compute_type == "float32" else [tr.engine]
    batches = [shipped_sources] if compute_type == "float32" else [[s] for s in shipped_sources]
    results = []
    for engine in engines:
        got = {"beam": [], "greedy": []}
        for batch in batches:
            recorded = RecordingEngine(engine)
            got["beam"] += decode(recorded, tr.config, batch, DecodingOptions(beam_size=4, num_hypotheses=4,
                                                                              max_decoding_length=60))
            assert recorded.cross_rows == recorded.rows
            got["greedy"] += decode(engine, tr.config, batch, DecodingOptions(beam_size=1, max_decoding_length=60))
        if compute_type == "float32":
            for hyps in got.values():
                assert [tr.tokenizer.decode(hs[0].tokens) for hs in hyps] == SHIPPED_GERMAN
        else:
            # int8 quantizes activations at run time; what it decodes may part from the float32 answer where the int8
            # engine itself sees a tie: it must give SHIPPED_GERMAN's tokens (float32's, checked above), or a decode
            # that the int8 engine, teacher-forced one sentence at a time, scores as tied with them (agreement.py's
            # int8 bound: float32 rounding and one quantization step of the logits' input)
            judge = engine_judge(tr.engine, tr.config)
            for kind, hyps in got.items():
                want = decode(shipped.engine, shipped.config, shipped_sources,
                              DecodingOptions(beam_size=4 if kind == "beam" else 1, max_decoding_length=60))
                assert [tr.tokenizer.decode(hs[0].tokens) for hs in want] == SHIPPED_GERMAN
                expected = []
                for src, hs in zip(shipped_sources, want):
                    forced = sum(judge(src, hs[0].tokens, True))
                    expected.append([Hypothesis(hs[0].tokens, forced, normalize(forced, len(hs[0].tokens) + 1, 1.0))])
                assert_same_decodes(Float32Bounds.of_graph(EARLIER / "decoder_step.onnx", int8=True), judge,
                                    shipped_sources, [hs[:1] for hs in hyps], expected, greedy=kind == "greedy",
                                    eos_id=tr.config.eos_id, what=f"int8 {kind} against float32's tokens")
        results.append(got)
    # the engines against each other up to float32 rounding (its checkpoint is gone: the bound comes from the graph's
    # weights and the fp32 engine, teacher-forced, judges a tie; agreement.py)
    bounds, judge = Float32Bounds.of_graph(EARLIER / "decoder_step.onnx"), engine_judge(shipped.engine, shipped.config)
    for other in results[1:]:                                          # float32: the IO-binding engine
        for kind in ("beam", "greedy"):
            assert_same_decodes(bounds, judge, shipped_sources, other[kind], results[0][kind], greedy=kind == "greedy",
                                eos_id=shipped.config.eos_id)


def test_manifest_claiming_per_sentence_for_an_old_graph_is_refused(tmp_path):
    pkg = tmp_path / "model"
    shutil.copytree(EARLIER, pkg)
    manifest = json.loads((pkg / "manifest.json").read_text(encoding="utf-8"))
    manifest["graphs"]["decoder_step"]["cross_per_sentence"] = True
    (pkg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ModelPackageError, match=r"decoder_step.onnx: the manifest says the decoder step takes "
                                                r"cross K/V once per sentence, but .* re-export"):
        Translator(pkg, device="cpu")
    manifest["graphs"]["decoder_step"]["cross_per_sentence"] = "yes"
    (pkg / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(ModelPackageError, match=r"cross_per_sentence should be true or false, got 'yes'"):
        read_package(pkg)


# --- the export's parity check covers beam-shaped steps ------------------------------------------------------
def fold_heads_and_beams(self, x, kv, bias, need_weights=False):
    """A plausible wrong fold: [R, 1, D] -> [B, H, G, Dh] by reshape alone mixes heads and beams up.
    With G = 1 it is the right computation, so only checks with several rows per sentence can see it."""
    r, _, d = x.shape
    q = self.q_proj(x).reshape(kv[0].shape[0], self.n_heads, -1, self.head_dim)
    weights = attention_weights(q, kv[0], bias)                                   # [B, H, G, S]
    out = self.out_proj(torch.matmul(weights, kv[1]).transpose(1, 2).reshape(r, 1, d))
    return (out, weights.mean(dim=1).reshape(r, kv[0].shape[2])) if need_weights else out


def test_export_parity_catches_a_decoder_wrong_only_for_beams(tiny_checkpoint, tiny_package, tiny_model, tmp_path,
                                                             monkeypatch):
    attn = tiny_model.decoder_layers[0].cross_attn
    g = torch.Generator().manual_seed(0)
    kv = (torch.randn(2, attn.n_heads, 5, attn.head_dim, generator=g),) * 2
    bias = padding_bias(torch.ones(2, 5, dtype=torch.long), torch.float32)
    with torch.no_grad():
        one_row = torch.randn(2, 1, tiny_model.cfg.d_model, generator=g)          # G = 1: the same
        assert torch.allclose(fold_heads_and_beams(attn, one_row, kv, bias), attn.forward_per_sentence(one_row, kv, bias),
                              atol=1e-6)
        four_rows = torch.randn(8, 1, tiny_model.cfg.d_model, generator=g)        # G = 4: not
        assert not torch.allclose(fold_heads_and_beams(attn, four_rows, kv, bias),
                                  attn.forward_per_sentence(four_rows, kv, bias), atol=1e-3)

    monkeypatch.setattr(model_module.MultiHeadAttention, "forward_per_sentence", fold_heads_and_beams)
    # the decoder step traced from the patched model; the encoder, which the patch leaves alone, is the package's
    monkeypatch.setattr(onnx_export, "export_graphs", package_graphs(tiny_package, trace_decoder=True))
    out = tmp_path / "model"
    with pytest.raises(parity.ParityError, match=r"fp32 parity check 'decoder log-probs' failed"):
        run_export(ExportOptions(checkpoint=tiny_checkpoint, out_dir=out))
    assert not out.exists()
