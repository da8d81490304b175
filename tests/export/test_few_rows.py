"""The int8 variant's few-rows decoder step (export/quantize.py quantize_int8_few_rows, runtime/engine/session.py
ArrayEngine.use_few_rows): written and checked by the export with --few-rows (tiny_package asks for it; without it
the package has none: test_export.py), picked by the runtime for steps of at most max_rows
rows, skipped where onnxruntime is older than its ops, refused when its manifest entry is broken."""
from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import pytest

from tests.fixtures_training import toy_pairs
from seq2onnx.export import parity, quantize
from seq2onnx.runtime.decode.decoding import decode
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.package.manifest import read_package
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.engine.loader import open_engine
from seq2onnx.runtime.engine.session import SessionConfig, onnxruntime_version
from seq2onnx.runtime.translator import Translator

FEW = "decoder_step.int8.few_rows.onnx"
# the export writes the step only where onnxruntime has 8-bit MatMulNBits (make test-oldest runs 1.21)
pytestmark = pytest.mark.skipif(onnxruntime_version() < quantize.FEW_ROWS_MIN_ONNXRUNTIME,
                                reason="onnxruntime < 1.22: no 8-bit MatMulNBits, so no few-rows step is exported")


def test_export_writes_a_checked_few_rows_step(tiny_package):
    manifest = json.loads((tiny_package / "manifest.json").read_text(encoding="utf-8"))
    int8 = manifest["variants"]["int8"]
    few = int8["few_rows"]
    assert few["decoder_step"] == FEW and FEW in manifest["files"]
    assert (few["max_rows"], few["min_onnxruntime"]) == (quantize.FEW_ROWS_MAX, "1.22")
    # the tiny model is 64 wide: blocks of 64, not MatMulNBits' 256, which would pad every weight 4x
    assert few["quantization"]["block_size"] == quantize.few_rows_block(64) == 64
    assert quantize.few_rows_block(512) == 256 and quantize.few_rows_block(1024) == 256
    assert (few["quantization"]["bits"], few["quantization"]["accuracy_level"]) == (8, 4)
    # held to the variant's thresholds, as the int8 step is
    assert few["parity"]["top1_agreement"] >= parity.MIN_TOP1_AGREEMENT
    assert few["parity"]["greedy_token_match"] >= parity.MIN_GREEDY_TOKEN_MATCH
    # every weight MatMul of the int8 step (MatMulIntegerToFloat there; the output projection a QGemm over the int8
    # table) is MatMulNBits, the output projection included
    ops = [n.op_type for n in onnx.load(str(tiny_package / FEW)).graph.node]
    step = [n.op_type for n in onnx.load(str(tiny_package / "decoder_step.int8.onnx")).graph.node]
    assert step.count("QGemm") == 1
    assert ops.count("MatMulNBits") == step.count("MatMulIntegerToFloat") + 1 > 1 and "MatMulIntegerToFloat" not in ops
    assert "Gemm" not in ops and "QGemm" not in ops and "Gather" in ops     # the embedding reads the int8 table
    assert FEW in (tiny_package / "README.md").read_text(encoding="utf-8")


def _engine(pkg, decoder, few_rows=None):
    v = pkg.variants["int8"]
    return open_engine(v.encoder, decoder, pkg.config, SessionConfig("cpu", intra_threads=1),
                       cross_per_sentence=pkg.cross_per_sentence, decoder_format=pkg.decoder_format,
                       few_rows=few_rows)


def _config(session, key):
    """A session's config entry, None where it has none (onnxruntime's default)."""
    try:
        return session.get_session_options().get_session_config_entry(key)
    except RuntimeError:
        return None


def _sources(pkg, n):
    return [pkg.tokenizer.encode(s).ids + [pkg.config.eos_id] for s, _ in toy_pairs(n, seed=5, max_words=6)]


def test_runtime_steps_with_the_few_rows_step_up_to_max_rows(tiny_package):
    tr = Translator(str(tiny_package), compute_type="int8", intra_threads=1)
    pkg, engine = tr.package, tr.engine
    few_session, max_rows = engine.few_rows
    assert max_rows == quantize.FEW_ROWS_MAX and engine.decoders == [engine.decoder, few_session]
    assert all(engine.decoder_for(r) is few_session for r in range(1, max_rows + 1))
    assert engine.decoder_for(max_rows + 1) is engine.decoder
    # its intra-op workers spin between steps too; the step's only within a run, the encoder's not at all (SPINNING)
    spinning = ("session.force_spinning_stop", "session.intra_op.allow_spinning")
    assert [_config(few_session, key) for key in spinning] == [None, None]
    assert [_config(engine.decoder, key) for key in spinning] == ["1", None]
    assert [_config(engine.encoder, key) for key in spinning] == [None, "0"]
    v = pkg.variants["int8"]
    alone = {"few": _engine(pkg, v.few_rows.decoder_step), "step": _engine(pkg, v.decoder_step)}
    # min = max length: no row ends early, so each call steps with one graph throughout
    for batch, beam, graph in ((1, 1, "few"), (2, 2, "few"), (1, 4, "few"), (8, 1, "step"), (3, 2, "step")):
        assert (batch * beam <= max_rows) == (graph == "few")
        opts = DecodingOptions(beam_size=beam, num_hypotheses=beam, min_decoding_length=12, max_decoding_length=12)
        sources = _sources(pkg, batch)
        got = decode(engine, pkg.config, sources, opts)
        want = decode(alone[graph], pkg.config, sources, opts)
        other = decode(alone["step" if graph == "few" else "few"], pkg.config, sources, opts)
        assert [[(h.tokens, h.score) for h in hyps] for hyps in got] == \
            [[(h.tokens, h.score) for h in hyps] for hyps in want], (batch, beam)
        # the two graphs' int8 kernels round differently: the scores tell which graph ran
        assert [h.score for hyps in got for h in hyps] != [h.score for hyps in other for h in hyps], (batch, beam)


def test_switching_graphs_mid_call_keeps_the_cache(tiny_package):
    """Rows that end leave the batch; the next steps switch to the few-rows step over the same cache memory.
    With the fp32 step as both graphs the answer must be the fp32 step's alone, to the bit."""
    pkg = read_package(tiny_package)
    fp32 = pkg.variants["fp32"].decoder_step
    sc = SessionConfig("cpu", intra_threads=1)

    def engine(few_rows=None):
        return open_engine(pkg.variants["fp32"].encoder, fp32, pkg.config, sc, cross_per_sentence=True,
                           decoder_format=pkg.decoder_format, few_rows=few_rows)
    plain = engine()
    sources = _sources(pkg, 6)
    for opts in (DecodingOptions(beam_size=1), DecodingOptions(beam_size=2, num_hypotheses=2),
                 DecodingOptions(beam_size=1, return_attention=True)):
        # the rows of each step: all of them at the first, then those of the sentences still decoding
        stepped = [len(sources) * opts.beam_size] + [len(s.tokens) for s in _steps(plain, pkg, sources, opts)][:-1]
        mixed = engine((fp32, min(stepped)))       # the last steps run the few-rows session
        assert mixed.few_rows[0] is not mixed.decoder and stepped[0] > min(stepped) > 0, stepped
        got = decode(mixed, pkg.config, sources, opts)
        want = decode(plain, pkg.config, sources, opts)
        assert [[(h.tokens, h.score) for h in hyps] for hyps in got] == \
            [[(h.tokens, h.score) for h in hyps] for hyps in want]
        if opts.return_attention:
            assert all(np.array_equal(g[0].attention, w[0].attention) for g, w in zip(got, want))


def _steps(engine, pkg, sources, opts):
    from seq2onnx.runtime.decode.decoding import decode_steps
    steps = decode_steps(engine, pkg.config, sources, opts)
    while True:
        try:
            yield next(steps)
        except StopIteration:
            return


def _broken(tiny_package, tmp_path, edit):
    broken = tmp_path / "pkg"
    shutil.copytree(tiny_package, broken)
    manifest = json.loads((broken / "manifest.json").read_text())
    edit(manifest["variants"]["int8"], manifest)
    (broken / "manifest.json").write_text(json.dumps(manifest))
    return broken


@pytest.mark.parametrize("edit,message", [
    (lambda v, m: v["few_rows"].update(decoder_step="../decoder_step.onnx"), r"\['decoder_step'\] = .* is not a file"),
    (lambda v, m: v["few_rows"].update(decoder_step="missing.onnx"), r"is not a file listed in 'files'"),
    (lambda v, m: v["few_rows"].update(max_rows=0), r"\['max_rows'\] should be in \[1, 65536\], got 0"),
    (lambda v, m: v["few_rows"].update(max_rows=True), r"\['max_rows'\] should be an integer"),
    (lambda v, m: v["few_rows"].update(min_onnxruntime="soon"), r"\['min_onnxruntime'\] should be a version"),
    (lambda v, m: v.update(few_rows=[FEW]), r"\['few_rows'\] should be"),
])
def test_a_broken_few_rows_entry_is_refused(tiny_package, tmp_path, edit, message):
    with pytest.raises(ModelPackageError, match=message):
        read_package(_broken(tiny_package, tmp_path, edit))


def test_few_rows_graph_is_checked_like_the_others(tiny_package, tmp_path):
    # its bytes are checksummed: a changed file is refused when the Translator loads the variant
    broken = _broken(tiny_package, tmp_path, lambda v, m: None)
    data = bytearray((broken / FEW).read_bytes())
    data[-1] ^= 1
    (broken / FEW).write_bytes(bytes(data))
    with pytest.raises(ModelPackageError, match=r"few_rows\.onnx: its SHA-256 does not match"):
        Translator(str(broken), compute_type="int8")
    Translator(str(broken), compute_type="float32")                # another variant does not read it
    # a graph of other caches (the fp16 step's) is refused in one line, not at the first step
    pkg = read_package(tiny_package)
    fp32 = pkg.variants["fp32"]
    with pytest.raises(ModelPackageError, match=r"a few-rows decoder step needs .* the caches of its decoder step"):
        _engine(pkg, fp32.decoder_step, few_rows=(_fp16_step(fp32, tmp_path), 4))


def _fp16_step(fp32, tmp_path):
    path = tmp_path / "fp16.onnx"
    quantize.convert_fp16(fp32.decoder_step, path, keep_float32=["log_probs", "cross_attention"])
    return path


def test_an_older_onnxruntime_keeps_the_int8_step(tiny_package, tmp_path):
    """8-bit MatMulNBits needs onnxruntime 1.22; with an older one the variant runs its int8 step alone."""
    newer = _broken(tiny_package, tmp_path, lambda v, m: v["few_rows"].update(min_onnxruntime="99.0"))
    tr = Translator(str(newer), compute_type="int8", intra_threads=1)
    assert tr.engine.few_rows is None and tr.engine.decoders == [tr.engine.decoder]
    pkg, opts = tr.package, DecodingOptions(beam_size=1)
    sources = _sources(pkg, 1)
    got = decode(tr.engine, pkg.config, sources, opts)
    want = decode(_engine(pkg, pkg.variants["int8"].decoder_step), pkg.config, sources, opts)
    assert [(h.tokens, h.score) for h in got[0]] == [(h.tokens, h.score) for h in want[0]]


def test_info_shows_the_few_rows_step(tiny_package, capsys):
    from seq2onnx.runtime.cli.main import main as cli_main
    from seq2onnx.runtime.cli.info import package_info
    few = package_info(str(tiny_package))["variants"]["int8"]["few_rows"]
    assert few == {"decoder_step": FEW, "bytes": (tiny_package / FEW).stat().st_size,
                   "max_rows": quantize.FEW_ROWS_MAX, "min_onnxruntime": "1.22"}
    assert cli_main(["info", str(tiny_package)]) == 0
    assert f"steps of at most {quantize.FEW_ROWS_MAX} rows: {FEW}" in capsys.readouterr().out


def test_sessions_keep_no_graph_bytes(tiny_package):
    """open_engine reads each graph right before its session is built and onnxruntime's session lets go of the
    bytes (session.release_model_bytes): a loaded int8 variant holds no copy of its three graph files."""
    import sys
    pkg, read = read_package(tiny_package), []

    def reader(path):
        read.append(pkg.read_graph(path))
        return read[-1]
    v = pkg.variants["int8"]
    engine = open_engine(v.encoder, v.decoder_step, pkg.config, SessionConfig("cpu", intra_threads=1),
                         cross_per_sentence=True, read=reader, decoder_format=pkg.decoder_format,
                         few_rows=(v.few_rows.decoder_step, v.few_rows.max_rows))
    assert len(read) == 3 and len(engine.decoders) == 2
    control = [bytes(bytearray(16))]                             # held by a list only, as `read` holds the three
    assert [sys.getrefcount(data) for data in read] == [sys.getrefcount(data) for data in control] * 3
