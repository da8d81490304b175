"""The IO-binding engine (runtime/engine/session.py) and its on-device cache reorder (gather_graph.py).

Without a GPU the same engine runs on the CPU provider, so its code path is checked here too;
the CUDA tests skip with the reason the CUDA provider is not usable."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

from tests.agreement import Float32Bounds, assert_same_decodes, torch_judge
from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.engine.gather_graph import gather_model_bytes, pad_model_bytes
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.decode.decoding import decode
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.engine.cuda import IoBindingEngine
from seq2onnx.runtime.engine.session import SessionConfig, cuda_status, open_session
from seq2onnx.runtime.translator import Translator

CUDA_OK, CUDA_REASON = cuda_status()
needs_gpu = pytest.mark.skipif(not CUDA_OK, reason=f"no usable CUDA device: {CUDA_REASON}")


@pytest.fixture(scope="module")
def sources(tiny_package):
    pkg = read_package(tiny_package)
    eos = pkg.config.eos_id
    return [pkg.tokenizer.encode(s).ids + [eos] for s, _ in toy_pairs(12, seed=2, max_words=7)]


def tokens(results):
    return [[h.tokens for h in hyps] for hyps in results]


def test_gather_graph_equals_numpy_take():
    rng = np.random.default_rng(0)
    values = [rng.integers(0, 9, size=(5, 7)), rng.random((5, 4, 3, 8), dtype=np.float32),
              np.zeros((5, 4, 0, 8), dtype=np.float32)]
    sess = ort.InferenceSession(gather_model_bytes([(v.dtype, v.ndim) for v in values]),
                                providers=["CPUExecutionProvider"])
    index = np.array([4, 4, 0, 2], dtype=np.int64)
    out = sess.run(None, {"indices": index, **{f"x{i}": v for i, v in enumerate(values)}})
    for o, v in zip(out, values):
        assert o.dtype == v.dtype and np.array_equal(o, np.take(v, index, axis=0))


def test_pad_graph_equals_numpy_pad():
    rng = np.random.default_rng(1)
    values = [rng.random((3, 2, 5, 4), dtype=np.float32), rng.random((3, 2, 5, 4)).astype(np.float16),
              np.zeros((3, 2, 0, 4), dtype=np.float32)]
    sess = ort.InferenceSession(pad_model_bytes([(v.dtype, v.ndim) for v in values]),
                                providers=["CPUExecutionProvider"])
    pads = np.array([0, 0, 0, 0, 0, 0, 11, 0], dtype=np.int64)          # 11 zeros after axis 2
    out = sess.run(None, {"pads": pads, **{f"x{i}": v for i, v in enumerate(values)}})
    for o, v in zip(out, values):
        assert o.dtype == v.dtype and np.array_equal(o, np.pad(v, [(0, 0), (0, 0), (0, 11), (0, 0)]))


def test_io_binding_engine_on_cpu_matches_array_engine(tiny_package, tiny_model, sources):
    """The CUDA code path (IO binding, OrtValues, Gather-graph reorder) on the CPU provider. The two engines run the
    same graph through different kernels (the IO-binding one, the Gather graph's copies): the same decodes up to
    float32 rounding, a score within the bound agreement.py derives, a different hypothesis only as a tie."""
    tr = Translator(tiny_package, device="cpu")
    sc = SessionConfig("cpu")
    v = tr.package.variants["fp32"]
    engine = IoBindingEngine(open_session(v.encoder, "encoder", tr.config, sc),
                             open_session(v.decoder_step, "decoder_step", tr.config, sc), tr.config, device="cpu")
    long = dict(min_decoding_length=40, max_decoding_length=40, max_length_b=None, max_length_a=0)  # the cache grows
    for options in (DecodingOptions(beam_size=1), DecodingOptions(beam_size=4, num_hypotheses=2),
                    DecodingOptions(beam_size=4, **long), DecodingOptions(beam_size=1, **long)):
        got = decode(engine, tr.config, sources, options)
        expected = decode(tr.engine, tr.config, sources, options)
        assert_same_decodes(Float32Bounds.of_model(tiny_model), torch_judge(tiny_model), sources, got, expected,
                            greedy=options.beam_size == 1, eos_id=tr.config.eos_id)


@needs_gpu
@pytest.mark.gpu
def test_cuda_translator_matches_cpu(tiny_package, sources):
    cpu = Translator(tiny_package, device="cpu")
    gpu = Translator(tiny_package, device="cuda", compute_type="float32")
    assert gpu.device == "cuda" and isinstance(gpu.engine, IoBindingEngine)
    for opts in (dict(beam_size=1), dict(beam_size=4, num_hypotheses=2)):
        got, expected = gpu.translate_ids(sources, **opts), cpu.translate_ids(sources, **opts)
        assert tokens(got) == tokens(expected)
        for g, e in zip(got, expected):      # float32 is IEEE float32 on the GPU too (TF32 off)
            assert [h.score for h in g] == pytest.approx([h.score for h in e], abs=1e-4)


@needs_gpu
@pytest.mark.gpu
def test_cuda_cache_stays_on_device(tiny_package, sources):
    gpu = Translator(tiny_package, device="cuda", compute_type="float32")
    mask, cross = gpu.engine.encode(*_padded(sources[:2], gpu.config.pad_id))
    assert all(c.device_name().lower() == "cuda" for c in cross)
    log_probs, present = gpu.engine.step(np.full((2, 1), gpu.config.bos_id, dtype=np.int64), mask, None, cross)
    assert isinstance(log_probs, np.ndarray) and log_probs.shape == (2, gpu.config.vocab_size)
    assert all(p.device_name().lower() == "cuda" for p in present)
    reordered = gpu.engine.take(present, np.array([1, 0, 1]))
    assert all(r.device_name().lower() == "cuda" and r.shape()[0] == 3 for r in reordered)


@needs_gpu
@pytest.mark.gpu
def test_cuda_default_compute_type(tiny_package, sources):
    gpu = Translator(tiny_package, device="cuda")
    assert gpu.variant == ("fp16" if "fp16" in gpu.package.variants else "fp32")
    assert len(gpu.translate_ids(sources[:3])) == 3


def _padded(sources, pad_id):
    from seq2onnx.runtime.decode.decoding import pad_sources
    return pad_sources(sources, pad_id)


@needs_gpu
@pytest.mark.gpu
def test_cuda_float16_variant_keeps_float16_caches(tiny_checkpoint, tmp_path, sources):
    """--fp16 at export is checked on the GPU; on CUDA it is the default compute type and its caches stay
    float16 on the device (no float32 cast of the whole cache per step)."""
    import json

    from seq2onnx.export.commands import ExportOptions, run_export

    out = tmp_path / "model"
    run_export(ExportOptions(tiny_checkpoint, out, fp16=True))
    fp16 = json.loads((out / "manifest.json").read_text())["variants"]["fp16"]
    assert (fp16["status"], fp16["checked_on"]) == ("checked", "CUDAExecutionProvider")
    gpu, cpu = Translator(out, device="cuda"), Translator(out, device="cpu")
    assert gpu.variant == "fp16" and gpu.engine.cache_dtype == np.float16
    mask, cross = gpu.engine.encode(*_padded(sources[:2], gpu.config.pad_id))
    assert all(c.data_type() == "tensor(float16)" and c.device_name().lower() == "cuda" for c in cross)
    got, expected = gpu.translate_ids(sources, beam_size=4), cpu.translate_ids(sources, beam_size=4)
    same = sum(g[0].tokens == e[0].tokens for g, e in zip(got, expected))
    assert same >= 0.75 * len(sources), f"fp16 on CUDA equals fp32 on the CPU on {same}/{len(sources)} sentences"
