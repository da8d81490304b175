"""Export: the tiny model trained in this session, exported, checked against PyTorch.

Uses the session fixtures `tiny_checkpoint` (fixtures_training.py) and `tiny_package`
(fixtures_export.py, exported with --int8). Everything runs for real at small size; the tests whose subject
comes after the trace (a failed parity check, the write stage killed, other variants) take the package's traced
fp32 graphs instead of tracing the same checkpoint again (fixtures_export.package_graphs).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from tests import REPO
from tests.agreement import Float32Bounds, assert_same_decodes, torch_judge
from tests.fixtures_export import package_graphs
from tests.fixtures_training import toy_pairs
from seq2onnx.export import onnx_export, package, parity
from seq2onnx.export.commands import ExportOptions, run_export
from seq2onnx.runtime.engine import session
from seq2onnx.runtime.cli.main import main as cli_main
from seq2onnx.runtime.package.config import ModelConfig
from seq2onnx.runtime.errors import ModelPackageError, Seq2OnnxError
from seq2onnx.runtime.decode.decoding import decode
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.engine.cuda import IoBindingEngine
from seq2onnx.runtime.engine.session import SessionConfig, open_session
from seq2onnx.runtime.translator import Translator
from seq2onnx.training.checkpoint import load_checkpoint
from seq2onnx.training.reference import beam_search, greedy_search, pad_batch
from seq2onnx.training.tokenizer import encode_source, tokenizer_from_json


@pytest.fixture(scope="module")
def tiny_ckpt(tiny_checkpoint):
    return load_checkpoint(tiny_checkpoint)


@pytest.fixture(scope="module")
def fp32_pair(tiny_package, tiny_model):
    return parity.OnnxPair(tiny_package / "encoder.onnx", tiny_package / "decoder_step.onnx", tiny_model.cfg)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_complete_package(folder: Path) -> dict:
    """What makes a folder loadable: a manifest listing exactly the other files, every checksum right."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    others = sorted(p.name for p in folder.iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == others
    for name, info in manifest["files"].items():
        assert sha256(folder / name) == info["sha256"], name
        assert (folder / name).stat().st_size == info["bytes"], name
    return manifest


def leftovers(parent: Path, name: str):
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


# --- the package -----------------------------------------------------------------------------------
def test_manifest_describes_the_package(tiny_package, tiny_ckpt):
    m = assert_complete_package(tiny_package)
    assert (m["format"], m["format_version"]) == ("seq2onnx-model", 4)
    cfg = ModelConfig.from_dict(m["config"])
    assert cfg.to_dict() == tiny_ckpt["config"]
    assert m["vocab_size"] == cfg.vocab_size
    assert m["special_tokens"] == {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}
    tok = tokenizer_from_json((tiny_package / m["tokenizer"]).read_text(encoding="utf-8"))
    assert tok.token_to_id("</s>") == cfg.eos_id and tok.get_vocab_size() == cfg.vocab_size
    assert m["opset"] == onnx_export.DEFAULT_OPSET and m["ir_version"] >= 8
    assert set(m["exporter"]) == {"torch", "onnx", "onnxruntime", "onnxscript"}
    assert m["source_checkpoint"]["file"] == "best.pt"
    assert m["source_checkpoint"]["train_meta"]["step"] == tiny_ckpt["train_meta"]["step"]
    # weights inside the .onnx, but those several graphs hold: once in the variant's shared data file
    assert sorted(p.name for p in tiny_package.iterdir() if p.suffix == ".data") == [
        "fp32.shared.data", "int8.shared.data"]
    assert leftovers(tiny_package.parent, tiny_package.name) == []

    # graph I/O as docs/CONTRACTS.md lays it out
    h, dh, n = cfg.n_heads, cfg.head_dim, cfg.decoder_layers
    enc, dec = m["graphs"]["encoder"], m["graphs"]["decoder_step"]
    assert enc["inputs"] == [{"name": "input_ids", "dtype": "int64", "shape": ["batch", "src_len"]},
                             {"name": "attention_mask", "dtype": "int64", "shape": ["batch", "src_len"]}]
    assert [o["name"] for o in enc["outputs"]] == onnx_export.cache_names("cross", n)
    assert {tuple(o["shape"]) for o in enc["outputs"]} == {("batch", h, "src_len", dh)}
    assert [i["name"] for i in dec["inputs"]] == (["input_ids", "encoder_attention_mask", "past_length"]
                                                  + onnx_export.cache_names("past", n)
                                                  + onnx_export.cache_names("cross", n))
    # rows (hypotheses) and sentences are separate axes: cross K/V and encoder mask come once per sentence
    assert dec["inputs"][0]["shape"] == ["rows", 1]
    assert dec["inputs"][1]["shape"] == ["sentences", "src_len"]
    assert dec["inputs"][2] == {"name": "past_length", "dtype": "int64", "shape": ["rows"]}     # contract 3: per row
    # a fixed-capacity cache, the same shape in and out (written in place)
    assert dec["inputs"][3]["shape"] == ["rows", h, "capacity", dh]
    assert {tuple(i["shape"]) for i in dec["inputs"][3 + 2 * n:]} == {("sentences", h, "src_len", dh)}
    assert dec["outputs"][0] == {"name": "log_probs", "dtype": "float32", "shape": ["rows", cfg.vocab_size]}
    assert [o["shape"] for o in dec["outputs"][1:-1]] == [["rows", h, "capacity", dh]] * (2 * n)
    assert dec["outputs"][-1] == {"name": "cross_attention", "dtype": "float32", "shape": ["rows", "src_len"]}
    assert dec["cross_per_sentence"] is True and "cross_per_sentence" not in enc

    # parity figures of both variants; the int8 ones pass their documented thresholds
    fp32, int8 = m["variants"]["fp32"], m["variants"]["int8"]
    assert (fp32["encoder"], fp32["decoder_step"]) == ("encoder.onnx", "decoder_step.onnx")
    assert fp32["parity"]["encoder_max_abs_diff"] <= 1e-4 and fp32["parity"]["decoder_max_abs_diff"] <= 1e-4
    assert fp32["parity"]["greedy_token_match"] == 1.0 and fp32["parity"]["beam4_token_match"] == 1.0
    assert fp32["parity"]["past_lengths"][0] == 0 and fp32["parity"]["batch_sizes"] == [1, 3, 4, 8, 1, 3, 4, 3]
    assert fp32["parity"]["real_sentences"] == 16                  # the fixture's --parity-data valid.tsv
    assert (int8["encoder"], int8["decoder_step"], int8["precision"]) == \
        ("encoder.int8.onnx", "decoder_step.int8.onnx", "int8")
    assert int8["parity"]["top1_agreement"] >= int8["thresholds"]["top1_agreement"] == parity.MIN_TOP1_AGREEMENT
    assert int8["parity"]["greedy_token_match"] >= int8["thresholds"]["greedy_token_match"]
    assert int8["status"] == "checked"
    # the int8 decoder step is quantised from a trace with onnxruntime's fused attention, which passed the fp32 gate
    assert int8["attention"]["ops"] == ["com.microsoft.GroupQueryAttention", "com.microsoft.MultiHeadAttention"]
    assert int8["attention"]["min_onnxruntime"] == "1.21"
    fused = int8["attention"]["fp32_parity"]
    assert fused["decoder_max_abs_diff"] <= parity.FP32_TOLERANCE and fused["cache_max_abs_diff"] <= 1e-3
    assert fused["greedy_token_match"] == 1.0 and fused["beam4_token_match"] == 1.0
    assert not any(p.name.startswith(".") for p in tiny_package.iterdir())      # the fp32 fused trace is not kept
    assert (tiny_package / "README.md").read_text(encoding="utf-8").startswith("# seq2onnx model package")


def test_graphs_use_plain_attention_and_finite_masks(tiny_package):
    for name in ("encoder.onnx", "decoder_step.onnx", "encoder.int8.onnx"):
        model = onnx.load(str(tiny_package / name))
        ops = {node.op_type for node in model.graph.node}
        assert "Softmax" in ops and not ops & onnx_export.FORBIDDEN_OPS
        for t in model.graph.initializer:
            if t.data_type == onnx.TensorProto.FLOAT:
                assert np.isfinite(onnx.numpy_helper.to_array(t)).all(), t.name
    int8 = onnx.load(str(tiny_package / "decoder_step.int8.onnx"))
    assert any(n.op_type == "MatMulIntegerToFloat" for n in int8.graph.node)     # export/int8_rows.py
    assert any(n.op_type == "Gather" for n in int8.graph.node)          # the embedding stays a float table
    # its attention: GroupQueryAttention over the cache in every layer, MultiHeadAttention for the cross-attention
    # of every layer but the last, whose weights are the cross_attention output (plain Softmax)
    layers = read_package(tiny_package).config.decoder_layers
    fused = [(n.domain, n.op_type) for n in int8.graph.node if n.op_type in onnx_export.FORBIDDEN_OPS]
    assert sorted(fused) == sorted([("com.microsoft", "GroupQueryAttention")] * layers
                                   + [("com.microsoft", "MultiHeadAttention")] * (layers - 1))
    assert [n.op_type for n in int8.graph.node].count("Softmax") == 1
    assert "com.microsoft" in {o.domain for o in int8.opset_import}
    # each GroupQueryAttention takes its layer's fused Q | K | V projection packed, without a Split (export/fuse.py)
    producers = {o: n for n in int8.graph.node for o in n.output}
    for gqa in (n for n in int8.graph.node if n.op_type == "GroupQueryAttention"):
        assert list(gqa.input[1:3]) == ["", ""] and producers[gqa.input[0]].op_type == "Add"   # the fused bias
    assert "Split" not in {n.op_type for n in int8.graph.node}


def test_a_fused_variant_needs_onnxruntime_1_21(tiny_package, tmp_path):
    """onnxruntime 1.19 and 1.20 load the fused int8 graphs and compute wrong log-probs: the runtime refuses the
    variant in one line there, from the manifest's attention.min_onnxruntime; other variants are not concerned."""
    assert read_package(tiny_package).variants["int8"].min_onnxruntime == (1, 21)
    assert read_package(tiny_package).variants["fp32"].min_onnxruntime == ()
    assert session.onnxruntime_version("1.22.0.dev20250101") == (1, 22, 0)
    session.check_onnxruntime((1, 21), "the int8 variant", "1.21.0")
    session.check_onnxruntime((), "the fp32 variant", "1.19.0")
    with pytest.raises(Seq2OnnxError, match=r"needs onnxruntime >= 1\.21 .*this is 1\.20\.1: pip install -U"):
        session.check_onnxruntime((1, 21), "the int8 variant", "1.20.1")
    broken = tmp_path / "pkg"
    shutil.copytree(tiny_package, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    manifest["variants"]["int8"]["attention"]["min_onnxruntime"] = "one point twenty-one"
    (broken / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelPackageError, match=r"\['min_onnxruntime'\] should be a version such as 1\.21"):
        read_package(broken)


# --- parity at shapes the graphs were not traced with (B=2, S=7, P=3) -------------------------------------
@pytest.mark.parametrize("batch,src_len,past_len", [(1, 1, 0), (5, 200, 0), (1, 200, 150), (5, 1, 150), (5, 37, 1)])
def test_parity_at_unseen_shapes(fp32_pair, tiny_model, batch, src_len, past_len):
    cfg = tiny_model.cfg
    g = torch.Generator().manual_seed(batch * 1000 + src_len + past_len)
    lengths = [max(1, src_len - 7 * i) for i in range(batch)]                # padded rows of several lengths
    ids, mask = pad_batch([torch.randint(4, cfg.vocab_size, (n,), generator=g).tolist() for n in lengths],
                          cfg.pad_id)
    assert ids.shape == (batch, src_len)
    h, dh = cfg.n_heads, cfg.head_dim
    past = [(torch.randn(batch, h, past_len, dh, generator=g), torch.randn(batch, h, past_len, dh, generator=g))
            for _ in range(cfg.decoder_layers)]
    tokens = torch.randint(4, cfg.vocab_size, (batch, 1), generator=g)
    with torch.no_grad():
        cross = tiny_model.cross_kv(tiny_model.encode(ids, mask))
        logp, present = tiny_model.decode_step(tokens, mask, past, cross)
    onnx_cross = fp32_pair.encode(ids.numpy(), mask.numpy())
    onnx_logp, onnx_present = fp32_pair.step(tokens.numpy(), mask.numpy(),
                                             [t.numpy() for kv in past for t in kv], onnx_cross)
    torch_cross = [t.numpy() for kv in cross for t in kv]
    torch_present = [t.numpy() for kv in present for t in kv]
    assert max(np.abs(a - b).max() for a, b in zip(onnx_cross, torch_cross)) <= 1e-4
    assert onnx_logp.shape == (batch, cfg.vocab_size) and np.abs(onnx_logp - logp.numpy()).max() <= 1e-4
    assert all(p.shape == (batch, h, past_len + 1, dh) for p in onnx_present)
    assert max(np.abs(a - b).max() for a, b in zip(onnx_present, torch_present)) <= 1e-4


# --- decoding: the ONNX graphs driven by the minimal loops vs the PyTorch reference --------------------------
SENTENCES = ["three one four", "one five", "nine two six five three", "zero", "eight eight seven",
             "four four four four four four four four four four four four"]


@pytest.mark.parametrize("group", [[0], [0, 1, 2], [1, 2, 3, 4, 5]])
def test_greedy_and_beam4_tokens_match_reference(fp32_pair, tiny_model, tiny_ckpt, group):
    tok = tokenizer_from_json(tiny_ckpt["tokenizer"])
    sources = [encode_source(tok, SENTENCES[i], tiny_model.cfg.eos_id) for i in group]
    ref = greedy_search(tiny_model, sources, max_length=40)
    got = parity.onnx_greedy(fp32_pair, sources, max_length=40)
    # the reference's decodes up to float32 rounding: a different hypothesis only as a tie (agreement.py)
    bounds, judge, eos = Float32Bounds.of_model(tiny_model), torch_judge(tiny_model), tiny_model.cfg.eos_id
    assert_same_decodes(bounds, judge, sources, [[h] for h in got], [[h] for h in ref], greedy=True, eos_id=eos)
    assert any(h.finished and h.tokens for h in ref)        # real translations that end with EOS

    ref_beam = beam_search(tiny_model, sources, beam_size=4, num_hypotheses=4, max_length=40)
    got_beam = parity.onnx_beam(fp32_pair, sources, beam_size=4, num_hypotheses=4, max_length=40)
    assert_same_decodes(bounds, judge, sources, got_beam, ref_beam, greedy=False, eos_id=eos)


def test_beam_options_follow_the_reference(fp32_pair, tiny_model, tiny_ckpt):
    tok = tokenizer_from_json(tiny_ckpt["tokenizer"])
    sources = [encode_source(tok, s, tiny_model.cfg.eos_id) for s in SENTENCES[:3]]
    opts = dict(beam_size=3, num_hypotheses=2, length_penalty=0.6, max_length=6, min_length=4)
    ref = beam_search(tiny_model, sources, **opts)
    got = parity.onnx_beam(fp32_pair, sources, **opts)
    assert [[(h.tokens, h.finished) for h in hs] for hs in got] == [[(h.tokens, h.finished) for h in hs] for hs in ref]
    assert all(len(h.tokens) >= 4 for hs in got for h in hs)        # EOS forbidden before 4 tokens


# --- nothing is written unless every check passed -------------------------------------------------------------
def test_parity_computes_the_pytorch_side_once_per_batch_and_model(fp32_pair, tiny_model):
    """The fp32, fused and int8 graphs of an export are measured against the same batches: the PyTorch side of each
    is computed once (parity.Reference), with the figures of a fresh computation, and anew for a changed model."""
    import copy

    batches = parity.parity_batches(tiny_model.cfg)[:2]
    first = parity.measure(tiny_model, fp32_pair, batches)
    refs = [b.reference for b in batches]
    assert all(r is not None for r in refs)
    assert parity.measure(tiny_model, fp32_pair, batches) == first
    assert all(b.reference is r for b, r in zip(batches, refs))                  # reused, not recomputed
    assert parity.measure(tiny_model, fp32_pair, parity.parity_batches(tiny_model.cfg)[:2]) == first
    changed = copy.deepcopy(tiny_model)
    assert parity.measure(changed, fp32_pair, batches) == first                  # another model: its own reference
    assert all(b.reference is not r for b, r in zip(batches, refs))
    with torch.no_grad():
        changed.output_projection.weight[:, 0] += 0.5                            # changed in place
    assert parity.measure(changed, fp32_pair, batches).decoder_max_abs_diff > 10 * first.decoder_max_abs_diff + 1e-3


def test_parity_batches_measured_on_threads_give_the_figures_of_one_thread(fp32_pair, tiny_model):
    """The converter spreads the batches of several graphs' checks over two threads (parity.measure_on), the reference
    computed first (compute_references) and read by each: the same report as measure's, batch by batch, and the
    torch thread count restored after."""
    from concurrent.futures import ThreadPoolExecutor

    batches = parity.parity_batches(tiny_model.cfg)
    threads = torch.get_num_threads()
    parity.compute_references(tiny_model, batches, fp32_pair.decoder_format)
    with ThreadPoolExecutor(2) as pool:
        first, second = (parity.measure_on(pool, tiny_model, fp32_pair, batches) for _ in range(2))
        assert first() == second() == parity.measure(tiny_model, fp32_pair, batches)
    assert torch.get_num_threads() == threads


def _report(encoder: float, decoder: float) -> parity.ParityReport:
    return parity.ParityReport("CPUExecutionProvider", encoder, decoder, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 8, 0)


def test_fp32_tolerance_rises_to_the_models_own_float32_noise_only_where_the_fixed_one_is_passed():
    """check_fp32: within FP32_TOLERANCE the model's noise is not computed and the tolerances stay; above it, each
    of the encoder's and the log-probs' tolerances is NOISE_FACTOR times that figure's own noise (at least
    FP32_TOLERANCE), recorded in the report, and a diff above it is still refused, naming the tolerance."""
    def never() -> tuple:
        raise AssertionError("the noise was computed for a report within FP32_TOLERANCE")
    within = parity.check_fp32(_report(9e-5, 9e-5), noise=never)
    assert (within.encoder_tolerance, within.decoder_tolerance) == (parity.FP32_TOLERANCE,) * 2
    raised = parity.check_fp32(_report(3e-4, 5e-5), noise=lambda: (2e-4, 1e-5))
    assert (raised.encoder_tolerance, raised.decoder_tolerance) == (4e-4, parity.FP32_TOLERANCE)
    assert raised.to_dict()["encoder_tolerance"] == 4e-4
    with pytest.raises(parity.ParityError, match=r"'decoder log-probs' failed: max diff 0.0003 > 0.0001 vs PyTorch"):
        parity.check_fp32(_report(5e-5, 3e-4), noise=lambda: (2e-4, 1e-5))
    with pytest.raises(parity.ParityError, match=r"'encoder outputs' failed: max diff 0.0003 > 0.0001"):
        parity.check_fp32(_report(3e-4, 5e-5))                                  # no noise given: the fixed one


def test_float32_noise_is_small_for_a_well_conditioned_model_and_does_not_pass_a_wrong_graph(fp32_pair, tiny_model):
    """parity.float32_noise jitters every Linear's and LayerNorm's output by sqrt(d_model) float32 roundings: on the
    tiny model it moves the outputs (a real recomputation), the same each time (seeded), far less than FP32_TOLERANCE,
    and leaves no hook behind; a graph of another model (a weight changed by 0.5) is refused however the tolerance
    is derived."""
    import copy

    batches = parity.parity_batches(tiny_model.cfg)[:2]
    enc, dec = parity.float32_noise(tiny_model, batches)
    assert 0 < enc < parity.FP32_TOLERANCE / 10 and 0 < dec < parity.FP32_TOLERANCE / 10
    assert parity.float32_noise(tiny_model, batches) == (enc, dec)
    assert not any(m._forward_hooks for m in tiny_model.modules())
    changed = copy.deepcopy(tiny_model)
    with torch.no_grad():
        changed.output_projection.weight[:, 0] += 0.5
    with pytest.raises(parity.ParityError, match=r"fp32 parity check '.*' failed: max diff"):
        parity.check_fp32(parity.measure(changed, fp32_pair, batches),
                          noise=lambda: parity.float32_noise(changed, batches))


def test_spilled_reference_reads_back_what_was_written():
    """The reference's log-probs and caches live in a temporary file (parity.Spilled): each item reads back as written,
    an array as an array, a list of arrays as a list, in any order and as often as asked."""
    rng = np.random.default_rng(0)
    items = [rng.standard_normal((3, 7)).astype(np.float32),
             [rng.standard_normal((2, 4, 0, 8)).astype(np.float32), np.arange(6, dtype=np.int64).reshape(2, 3)],
             np.asfortranarray(rng.standard_normal((5, 2))).astype(np.float32)]
    store = parity.Spilled()
    for item in items:
        store.append(item)
    assert len(store) == 3
    for got, want in zip([store[2], store[0]] + list(store), [items[2], items[0]] + items):
        if isinstance(want, list):
            assert isinstance(got, list) and all(g.dtype == w.dtype and np.array_equal(g, w) for g, w in zip(got, want))
        else:
            assert isinstance(got, np.ndarray) and got.dtype == want.dtype and np.array_equal(got, want)


def test_failed_parity_writes_nothing(tiny_checkpoint, tiny_package, tmp_path, monkeypatch, capsys):
    export = package_graphs(tiny_package)                     # the trace's graphs (fixtures_export.py)

    def export_then_corrupt(model, out_dir, opset=onnx_export.DEFAULT_OPSET, decoder_format=onnx_export.DECODER_FORMAT,
                            external=False, meanwhile=lambda: None):
        enc, dec = export(model, out_dir, opset, decoder_format, external, meanwhile)
        graph = onnx.load(str(dec))
        weight = next(t for t in graph.graph.initializer if "output_projection" in t.name)
        values = onnx.numpy_helper.to_array(weight).copy()
        values[:, 0] += 0.5                                   # one feature of every output logit
        weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
        onnx.save(graph, str(dec))
        return enc, dec

    monkeypatch.setattr(onnx_export, "export_graphs", export_then_corrupt)
    out = tmp_path / "model"
    assert cli_main(["export", str(tiny_checkpoint), str(out), "--int8"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]                       # after the progress lines of stages 1-2
    assert last.startswith("seq2onnx export: error: fp32 parity check 'decoder log-probs' failed: max diff"), err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_skip_int8_validation_keeps_the_variant_and_says_so(tiny_checkpoint, tiny_package, tmp_path, monkeypatch,
                                                           capsys):
    """--skip-int8-validation (the benchmark's random weights fail the int8 gate): the variant is written
    with its measured figures, status "validation-skipped"; fp32 keeps every check."""
    monkeypatch.setattr(parity, "MIN_TOP1_AGREEMENT", 1.01)          # a gate no int8 variant passes
    monkeypatch.setattr(onnx_export, "export_graphs", package_graphs(tiny_package))   # the fp32 trace's graphs
    # the option is about the int8 variant: one error line
    assert cli_main(["export", str(tiny_checkpoint), str(tmp_path / "a"), "--skip-int8-validation"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "add --int8" in err[0]
    assert cli_main(["export", str(tiny_checkpoint), str(tmp_path / "b"), "--few-rows"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--few-rows applies to the int8 variant: add --int8" in err[0]
    out = tmp_path / "model"
    assert cli_main(["export", str(tiny_checkpoint), str(out), "--int8", "--skip-int8-validation"]) == 0
    captured = capsys.readouterr()
    assert "validation skipped" in captured.out and "validation skipped" in captured.err
    m = assert_complete_package(out)
    int8 = m["variants"]["int8"]
    assert int8["status"] == "validation-skipped" and int8["thresholds"]["top1_agreement"] == 1.01
    assert 0 < int8["parity"]["top1_agreement"] < 1.01 and 0 < int8["parity"]["greedy_token_match"] <= 1
    assert m["variants"]["fp32"]["parity"]["greedy_token_match"] == 1.0
    # without --few-rows the int8 variant is its two graphs: no second copy of the step's weights
    assert "few_rows" not in int8 and not list(out.glob("*few_rows*"))
    with pytest.warns(UserWarning, match="int8 variant was exported with --skip-int8-validation"):
        tr = Translator(out, device="cpu", compute_type="int8")           # loads, and says what it is
    assert tr.variant == "int8" and len(tr.translate_ids([[5, tr.config.eos_id]])) == 1
    assert cli_main(["info", str(out)]) == 0
    assert re.search(r"^  int8 .*; validation-skipped$", capsys.readouterr().out, re.M)
    src = tmp_path / "in.txt"
    src.write_text("one two\n", encoding="utf-8")
    assert cli_main(["translate", str(out), "-i", str(src), "--compute-type", "int8", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1
    assert captured.err.strip().splitlines() == [
        f"seq2onnx translate: warning: {out}: the int8 variant was exported with --skip-int8-validation; its "
        "tokens may differ from float32 more than the export's thresholds allow"]

KILL_DRIVER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from seq2onnx.export import onnx_export, package
    mode, ckpt, out, repo, traced = sys.argv[1:6]
    sys.path.insert(0, repo)
    from tests.fixtures_export import package_graphs
    onnx_export.export_graphs = package_graphs(Path(traced))    # the trace's graphs: the write stage is the subject
    if mode == "before-manifest":            # staging folder holds the graphs, tokenizer.json, README.md
        write_text = package.write_text
        def paused(path, text):
            if path.name == package.MANIFEST:
                print("PAUSED", flush=True)
                time.sleep(300)
            write_text(path, text)
        package.write_text = paused
    else:                                    # "between-renames": the old package renamed aside, the new not in
        rename = os.rename
        def paused(src, dst):
            rename(src, dst)
            if ".old-" in os.path.basename(str(dst)):
                print("PAUSED", flush=True)
                time.sleep(300)
        os.rename = paused
    from seq2onnx.runtime.cli.main import main
    sys.exit(main(["export", ckpt, out, "--overwrite"]))
""")


@pytest.mark.parametrize("mode, previous", [("before-manifest", False), ("before-manifest", True),
                                            ("between-renames", True), ("random", True)])
def test_killed_export_leaves_no_half_package(tiny_checkpoint, tiny_package, tmp_path, mode, previous):
    """SIGKILL in the write stage (a pause there), or at a random moment: OUT is then the previous complete
    package (or the new complete one, when the kill came after the rename), or nothing, which the runtime
    explains; the next export tidies up and restores the previous package."""
    out = tmp_path / "model"
    before = None
    if previous:
        shutil.copytree(tiny_package, out)
        before = assert_complete_package(out)
    driver = tmp_path / "driver.py"
    driver.write_text(KILL_DRIVER, encoding="utf-8")
    if mode == "random":
        seed = int(os.environ.get("SEQ2ONNX_KILL_SEED", time.time_ns() % 10**6))
        proc = subprocess.Popen([sys.executable, "-m", "seq2onnx.runtime.cli", "export", str(tiny_checkpoint),
                                 str(out), "--overwrite"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(random.Random(seed).uniform(0, 8))          # an export of the tiny model takes ~6-10 s
        proc.kill()
        proc.wait(timeout=60)
    else:
        proc = subprocess.Popen([sys.executable, str(driver), mode, str(tiny_checkpoint), str(out),
                                 str(REPO), str(tiny_package)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen = []
        try:
            for line in proc.stdout:
                seen.append(line)
                if line.strip() == "PAUSED":
                    break
            else:
                pytest.fail("the export ended before the write stage paused:\n" + "".join(seen))
            os.kill(proc.pid, signal.SIGKILL)                         # killed in the middle of the write stage
        finally:
            proc.kill()
            proc.wait(timeout=60)
            proc.stdout.close()

    left = [tmp_path / n for n in leftovers(tmp_path, "model")]
    if mode == "before-manifest":
        (partial,) = left
        assert ".partial-" in partial.name and not (partial / "manifest.json").exists()   # not loadable
        with pytest.raises(ModelPackageError, match=f"^{re.escape(str(partial))} is the unfinished staging folder"):
            Translator(partial, device="cpu")
        if previous:                                              # untouched: still the previous package
            assert assert_complete_package(out)["files"] == before["files"]
            Translator(out, device="cpu").translate("one two")
        else:
            assert not out.exists()
            with pytest.raises(ModelPackageError, match=f"^{re.escape(str(out))} does not exist: an export to it "
                                                        "was interrupted .*: run the export again$"):
                Translator(out, device="cpu")
    elif mode == "between-renames":
        assert not out.exists()                                   # old aside, new not yet in: nothing at OUT
        with pytest.raises(ModelPackageError, match="the previous package is left aside at .*run the export "
                                                    "again with --overwrite"):
            Translator(out, device="cpu")
        restored = package.recover_interrupted(out)
        assert any("restored" in m for m in restored), restored
        assert assert_complete_package(out)["files"] == before["files"]
    else:                                                         # random: previous, new, or (between renames) none
        if not out.exists():
            package.recover_interrupted(out)
        files = assert_complete_package(out)["files"]                 # the previous one, or the new (fp32 only)
        assert files == before["files"] or sorted(files) == ["README.md", "decoder_step.onnx", "encoder.onnx",
                                                             "tokenizer.json"], f"SEQ2ONNX_KILL_SEED={seed}"
        Translator(out, device="cpu").translate("one two")
    package.recover_interrupted(out)                              # the next export tidies the rest
    assert leftovers(tmp_path, "model") == []


def test_overwrite_replaces_a_package_and_fp16_variant(tiny_checkpoint, tiny_package, tiny_model, tmp_path,
                                                       monkeypatch):
    monkeypatch.setattr(onnx_export, "export_graphs", package_graphs(tiny_package))   # the fp32 trace's graphs
    out = tmp_path / "model"
    shutil.copytree(tiny_package, out)
    with pytest.raises(Seq2OnnxError, match="output path exists"):
        run_export(ExportOptions(tiny_checkpoint, out, fp16=True))
    run_export(ExportOptions(tiny_checkpoint, out, fp16=True, overwrite=True))
    m = assert_complete_package(out)
    assert set(m["variants"]) == {"fp32", "fp16"} and not (out / "encoder.int8.onnx").exists()
    fp16 = m["variants"]["fp16"]
    assert (fp16["encoder"], fp16["decoder_step"], fp16["precision"]) == \
        ("encoder.fp16.onnx", "decoder_step.fp16.onnx", "float16")
    if fp16["status"] == "unchecked-on-CUDA":                     # no GPU here: checked to load only
        assert fp16["parity"] is None and fp16["checked_on"] is None
    else:
        assert fp16["status"] == "checked" and fp16["checked_on"] == "CUDAExecutionProvider"
    graph = onnx.load(str(out / "decoder_step.fp16.onnx"))
    types = {v.name: v.type.tensor_type.elem_type for v in [*graph.graph.input, *graph.graph.output]}
    fp16, fp32 = onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT
    assert [types[n] for n in ("past_key_0", "cross_value_0", "present_value_0")] == [fp16] * 3   # caches stay fp16
    assert (types["log_probs"], types["input_ids"]) == (fp32, onnx.TensorProto.INT64)
    assert onnx.load(str(out / "encoder.fp16.onnx")).graph.output[0].type.tensor_type.elem_type == fp16
    assert any(t.data_type == fp16 for t in graph.graph.initializer)
    # the same function at fp16 precision (onnxruntime's CPU provider runs the fp16 graph too)
    report = parity.measure(tiny_model, parity.OnnxPair(out / "encoder.fp16.onnx", out / "decoder_step.fp16.onnx",
                                                        tiny_model.cfg))
    assert report.top1_agreement >= parity.MIN_TOP1_AGREEMENT and report.decoder_max_abs_diff < 0.5
    assert leftovers(tmp_path, "model") == []
    # the runtime's CUDA engine (IO binding; here on the CPU provider) keeps float16 caches between steps
    pkg, sc = read_package(out), SessionConfig("cpu")
    engines = {}
    for name in ("fp32", "fp16"):
        v = pkg.variants[name]
        engines[name] = IoBindingEngine(open_session(v.encoder, "encoder", pkg.config, sc),
                                        open_session(v.decoder_step, "decoder_step", pkg.config, sc), pkg.config,
                                        device="cpu")
    assert (engines["fp16"].cache_dtype, engines["fp32"].cache_dtype) == (np.float16, np.float32)
    sources = [pkg.tokenizer.encode(s).ids + [pkg.config.eos_id] for s, _ in toy_pairs(8, seed=3, max_words=6)]
    opts = DecodingOptions(beam_size=2)
    got, expected = (decode(engines[n], pkg.config, sources, opts) for n in ("fp16", "fp32"))
    same = sum(g[0].tokens == e[0].tokens for g, e in zip(got, expected))
    assert same >= 6, f"fp16 equals fp32 on {same}/8 sentences"


# --- one-line errors --------------------------------------------------------------------------------------
def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_cli_errors_are_one_line(tiny_checkpoint, tiny_package, tmp_path, capsys):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    assert cli_main(["export", str(garbage), str(tmp_path / "a")]) == 2
    assert "is not a seq2onnx checkpoint" in one_error_line(capsys)

    ckpt = dict(load_checkpoint(tiny_checkpoint), format_version=99)
    future = tmp_path / "future.pt"
    torch.save(ckpt, future)
    assert cli_main(["export", str(future), str(tmp_path / "b")]) == 2
    assert "format_version 99" in one_error_line(capsys)

    assert cli_main(["export", str(tmp_path / "missing.pt"), str(tmp_path / "c")]) == 2
    assert "checkpoint not found" in one_error_line(capsys)

    assert cli_main(["export", str(tiny_checkpoint), str(tiny_package)]) == 2
    assert "output path exists" in one_error_line(capsys)

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    assert cli_main(["export", str(tiny_checkpoint), str(tmp_path / "notes"), "--overwrite"]) == 2
    assert "not a seq2onnx model package" in one_error_line(capsys)
    assert (tmp_path / "notes" / "keep.txt").exists()

    assert cli_main(["export", str(tiny_checkpoint), str(tmp_path / "d"), "--opset", "11"]) == 2
    assert "--opset 11 is not supported" in one_error_line(capsys)

    assert cli_main(["export", str(tiny_checkpoint), str(tmp_path / "e"), "--parity-data",
                     str(tmp_path / "none.txt")]) == 2
    assert "cannot read --parity-data" in one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["future.pt", "garbage.pt", "notes"]


def test_missing_onnxscript_names_the_extra(tiny_checkpoint, tmp_path):
    code = ("import sys; sys.modules['onnxscript'] = None\n"
            "from seq2onnx.runtime.cli.main import main\n"
            f"sys.exit(main(['export', {str(tiny_checkpoint)!r}, {str(tmp_path / 'out')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "onnxscript" in lines[0] and "seq2onnx[train]" in lines[0], proc.stderr


# --- sibling projections fused (export/fuse.py) ----------------------------------------------------------
def _sibling_graph(rng) -> onnx.ModelProto:
    """x [B, 8] -> three projections of x (8 -> 8, 8 -> 8, 8 -> 4), each MatMul + bias Add; a fourth MatMul of
    another tensor and one without a bias stay as they are."""
    from onnx import TensorProto, helper, numpy_helper

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    inits = [w("wq", 8, 8), w("bq", 8), w("wk", 8, 8), w("bk", 8), w("wv", 8, 4), w("bv", 4), w("wo", 8, 8),
             w("wn", 8, 3)]
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q0"], name="mq"), helper.make_node("Add", ["q0", "bq"], ["q"], name="aq"),
             helper.make_node("MatMul", ["x", "wk"], ["k0"], name="mk"), helper.make_node("Add", ["bk", "k0"], ["k"], name="ak"),
             helper.make_node("MatMul", ["x", "wv"], ["v0"], name="mv"), helper.make_node("Add", ["v0", "bv"], ["v"], name="av"),
             helper.make_node("MatMul", ["q", "wo"], ["o"], name="mo"),
             helper.make_node("MatMul", ["x", "wn"], ["n"], name="mn")]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", d]) for n, d in (("o", 8), ("k", 8), ("v", 4), ("n", 3))]
    graph = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])],
                              outs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_sibling_projections_are_fused_into_one_matmul_with_the_same_outputs(tmp_path):
    import onnxruntime as ort

    from seq2onnx.export import fuse

    rng = np.random.default_rng(0)
    model = _sibling_graph(rng)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    before = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert fuse.fuse_sibling_projections(model) == 1
    onnx.checker.check_model(model, full_check=True)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMul") == 3 and ops.count("Split") == 1       # q|k|v as one; wo and the bias-less wn kept
    assert {t.name for t in model.graph.initializer} >= {"wo", "wn"} and "wq" not in {t.name for t in model.graph.initializer}
    after = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
    assert fuse.fuse_sibling_projections(model) == 0                  # nothing left to fuse


def test_exported_graphs_read_each_tensor_with_one_projection(tiny_package):
    """The exporter fuses every layer's self-attention Q, K, V (encoder and decoder) and the encoder's cross K/V
    of every decoder layer: no two weight MatMuls of a graph read the same tensor; int8 quantises the fused ones."""
    cfg = json.loads((tiny_package / "manifest.json").read_text(encoding="utf-8"))["config"]
    for name, groups in (("encoder.onnx", cfg["encoder_layers"] + 1), ("decoder_step.onnx", cfg["decoder_layers"])):
        model = onnx.load(str(tiny_package / name))
        weights = {t.name for t in model.graph.initializer}
        readers = [n.input[0] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
        assert len(readers) == len(set(readers)), name
        assert sum(n.op_type == "Split" for n in model.graph.node) == groups, name
        int8 = onnx.load(str(tiny_package / name.replace(".onnx", ".int8.onnx")))
        ops = [n.op_type for n in int8.graph.node]
        # (MatMulIntegerToFloat after each row's quantisation: export/int8_rows.py) and the output projection a QGemm
        # over the int8 table (export/quantize.py int8_embeddings)
        assert (ops.count("MatMulIntegerToFloat"), ops.count("QGemm")) == (len(readers),
                                                                           name == "decoder_step.onnx"), name


def test_fused_decoder_rewritten_from_the_plain_one_is_the_traced_one(tiny_package, tiny_model, tmp_path):
    """The int8 variant's fp32 source (export/fuse.py fused_attention_from_plain: the plain step's attention rewritten
    as onnxruntime's fused ops) computes bit for bit what tracing FusedAttentionStep writes, at rows of unequal
    past lengths over a cache of noise, a padded sentence and beams; the rewrite refuses a graph it does not know."""
    import onnxruntime as ort

    from seq2onnx.export import fuse

    derived, traced = tmp_path / "derived.onnx", tmp_path / "traced.onnx"
    assert onnx_export.fused_decoder_from_plain(tiny_package / "decoder_step.onnx", derived, tiny_model.cfg)
    onnx_export.export_fused_decoder(tiny_model, traced)
    graphs = [onnx.load(str(p)) for p in (derived, traced)]
    ops = [sorted(n.op_type for n in g.graph.node if n.domain == "com.microsoft") for g in graphs]
    assert ops[0] == ops[1] and "ScatterND" not in {n.op_type for n in graphs[0].graph.node}
    cfg = tiny_model.cfg
    rng = np.random.default_rng(5)
    sentences, beams, src_len, capacity = 3, 4, 9, 12
    rows = sentences * beams
    mask = np.ones((sentences, src_len), dtype=np.int64)
    mask[1, 6:] = 0
    feed = {"input_ids": rng.integers(4, cfg.vocab_size, (rows, 1)), "encoder_attention_mask": mask,
            "past_length": rng.integers(0, capacity, rows)}
    for prefix, size in (("past", rows), ("cross", sentences)):
        for name in onnx_export.cache_names(prefix, cfg.decoder_layers):
            feed[name] = rng.standard_normal((size, cfg.n_heads, capacity if prefix == "past" else src_len,
                                              cfg.head_dim)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    got, want = (ort.InferenceSession(str(p), opts, providers=["CPUExecutionProvider"]).run(None, feed)
                 for p in (derived, traced))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    encoder = onnx.load(str(tiny_package / "encoder.onnx"))
    with pytest.raises(ValueError, match="past_length"):
        fuse.fused_attention_from_plain(encoder, cfg.n_heads, cfg.decoder_layers)
