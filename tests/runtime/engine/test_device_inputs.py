"""Per-step inputs written on the device (issue 53): after the first step, a step of the IO-binding engine copies up
only the ids it feeds (input_ids), and where the search runs on the host, what the host search decided: beam
search's scores (`cum`, the search head's HEAD_STEP_INPUTS) and the rows that go on (the Gather graph's `indices`).
past_length advances on the device (gather_graph.add_one_model_bytes) and goes with its rows; the search head's and
TopK's bias, check id, shape and k, and Pad's pads, go up once per distinct value (cuda._DeviceConstants).

The engine runs on the CPU provider; a subclass records every input it binds from the host and every copy it makes
onto the device (the real io binding and upload, called through), step by step. Contract 3 is the tiny package's
decoder step; contract 2 (one past_length for all rows) its model's step exported at format 2. The decodes are
compared with the same step graph's log-probs searched in numpy: the same tokens and float32 scores, bit for bit."""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import onnxruntime as ort
import pytest

from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.decode.decoding import Decoding, RunningBatch, decode
from seq2onnx.runtime.engine.cuda import IoBindingEngine
from seq2onnx.runtime.engine.gather_graph import add_one_model_bytes, search_head_model_bytes
from seq2onnx.runtime.engine.session import SessionConfig, open_session
from seq2onnx.runtime.options import DecodingOptions
from seq2onnx.runtime.package.graph_io import PAST_LENGTH
from seq2onnx.runtime.package.manifest import read_package

Bound = Tuple[str, str]           # (the graph, the input) a value went up for; graph "upload": a copy the engine made


class RecordingBinding:
    """A session's real IOBinding; bind_cpu_input (a host-to-device copy of an input) is logged, then called."""

    def __init__(self, io: ort.IOBinding, engine: "RecordingEngine", graph: str):
        self._io, self._engine, self._graph = io, engine, graph

    def bind_cpu_input(self, name, value):
        self._engine.steps[-1].append((self._graph, name))
        return self._io.bind_cpu_input(name, value)

    def __getattr__(self, name):          # the rest, run_with_iobinding's _iobinding among them, is the real one's
        return getattr(self._io, name)


class RecordingEngine(IoBindingEngine):
    """IoBindingEngine that logs, per decoder step, what goes up from the host: steps[0] the encoding, steps[t] the
    t-th step and the row reorder after it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: List[List[Bound]] = [[]]

    def _binding(self, session):
        if session is self.decoder:
            self.steps.append([])
        graph = ("decoder_step" if session is self.decoder else "encoder" if session is self.encoder
                 else next(key[0] for key, small in self._graphs.items() if small is session))
        return RecordingBinding(super()._binding(session), self, graph)

    def _upload(self, name, value):
        self.steps[-1].append(("upload", name))
        return super()._upload(name, value)


@pytest.fixture(scope="module")
def package(tiny_package):
    return read_package(tiny_package)


@pytest.fixture(scope="module")
def step_graphs(package, tiny_model, tmp_path_factory):
    """{decoder contract: its step graph}: the package's (3), and its model's step exported at contract 2."""
    from seq2onnx.export import onnx_export
    path = tmp_path_factory.mktemp("format2") / "decoder_step.onnx"
    onnx_export._export_decoder(tiny_model.float().eval(), path, onnx_export.DEFAULT_OPSET, 2)
    return {3: package.variants["fp32"].decoder_step, 2: path}


def engine(package, step_graph, kind: str) -> RecordingEngine:
    """kind: "head" (the search head after the step), "top_k" (beam search's 2K best picked on the device), "numpy"
    (the log-probs read back, filtered and searched in numpy)."""
    sc = SessionConfig("cpu", intra_threads=1)
    built = RecordingEngine(open_session(package.variants["fp32"].encoder, "encoder", package.config, sc),
                            open_session(step_graph, "decoder_step", package.config, sc), package.config,
                            device="cpu", search_on_device=kind == "head")
    built.picks_top_k = kind == "top_k"
    return built


@pytest.fixture(scope="module")
def sources(package):
    eos = package.config.eos_id
    return [package.tokenizer.encode(s).ids + [eos] for s, _ in toy_pairs(16, seed=7, min_words=1, max_words=9)]


def outcome(results):
    return [[(h.tokens, h.score, h.normalized_score, h.finished) for h in hyps] for hyps in results]


# what a step after the first may copy up: the ids it feeds, and what the search on the host decided
PER_STEP = {("decoder_step", "input_ids"), ("search_head_model_bytes", "cum"), ("gather_model_bytes", "indices")}
GROWTH = ("upload", "pads")       # contract 2 and 3: a full cache padded to twice its capacity, once per capacity


@pytest.mark.parametrize("kind,beam", [("head", 1), ("head", 4), ("top_k", 4), ("numpy", 1), ("numpy", 4)])
@pytest.mark.parametrize("contract", [3, 2])
def test_a_step_copies_up_only_its_ids(package, step_graphs, sources, kind, beam, contract):
    options = DecodingOptions(beam_size=beam, num_hypotheses=min(beam, 2))
    for batch in (1, 5, 16):
        recorded = engine(package, step_graphs[contract], kind)
        got = decode(recorded, package.config, sources[:batch], options)
        expected = decode(engine(package, step_graphs[contract], "numpy"), package.config, sources[:batch], options)
        assert outcome(got) == outcome(expected)
        assert recorded.decoder_format == contract and len(recorded.steps) > 3
        first, later = recorded.steps[1], recorded.steps[2:]
        assert ("upload", PAST_LENGTH) in first           # the first step's positions, zeros, go up once
        for t, bound in enumerate(later, start=2):
            assert ("decoder_step", "input_ids") in bound and set(bound) - {GROWTH} <= PER_STEP, (batch, t, bound)
        grown = [t for t, bound in enumerate(recorded.steps) if GROWTH in bound]
        assert len(grown) <= 2 and all(t > 16 for t in grown)          # 16 -> 32 -> 64 positions
        if kind == "head":
            assert ("search_head_model_bytes", "cum") in set().union(*later) or beam == 1
        assert not any(name == PAST_LENGTH and graph != "upload" for step in recorded.steps for graph, name in step)
        # the search head advances the positions in its own run; the other paths in a graph of x + 1
        assert any(key[0] == "add_one_model_bytes" for key in recorded._graphs) == (kind != "head")


def test_a_bias_goes_up_once_per_value(package, step_graphs, sources):
    """The bias changes where the min length is reached (EOS allowed from then on): it goes up then, and at no
    other step after the first; check_id, shape and k once."""
    options = DecodingOptions(beam_size=3, min_decoding_length=4, suppress_ids=[5, 9])
    recorded = engine(package, step_graphs[3], "head")
    got = decode(recorded, package.config, sources[:5], options)
    assert outcome(got) == outcome(decode(engine(package, step_graphs[3], "numpy"), package.config, sources[:5],
                                          options))
    uploads = [(t, name) for t, step in enumerate(recorded.steps) for graph, name in step
               if graph == "upload" and name not in (PAST_LENGTH, "pads", *recorded.past_names)]
    encoded = {"encoder_attention_mask"}
    assert [(t, name) for t, name in uploads if name not in encoded] == [
        (1, "bias"), (1, "check_id"), (1, "shape"), (1, "k"), (5, "bias")]     # step 4 (the 5th) allows EOS


def test_forced_ids_go_up_only_on_the_steps_that_force(package, step_graphs, sources):
    """Forced BOS and EOS: the forced ids go up on the first step and on the step a row's limit forces EOS."""
    options = DecodingOptions(beam_size=1, forced_bos_id=7, forced_eos=True, max_decoding_length=3)
    recorded = engine(package, step_graphs[3], "head")
    got = decode(recorded, package.config, sources[:5], options)
    assert outcome(got) == outcome(decode(engine(package, step_graphs[3], "numpy"), package.config, sources[:5],
                                          options))
    forcing = [t for t, step in enumerate(recorded.steps) if ("search_head_model_bytes", "forced") in step]
    assert forcing == [1, 3]                       # steps 0 (BOS) and 2 (EOS: the limit of 3)
    assert set(recorded.steps[2]) <= PER_STEP


@pytest.mark.parametrize("beam", [1, 3])
def test_rows_that_join_a_stepped_batch_get_their_positions(package, step_graphs, sources, beam):
    """Contract 3, continuous batching: rows that join after two steps start at position 0 on the device (their
    positions go up once, at the join) while the others go on at theirs; each Decoding decodes as it does alone."""
    options = DecodingOptions(beam_size=beam)
    recorded = engine(package, step_graphs[3], "numpy")
    first, second = Decoding(package.config, sources[:3], options), Decoding(package.config, sources[3:5], options)
    batch = RunningBatch(recorded, package.config)
    batch.add([first])
    batch.step()
    batch.step()
    joined_at = len(recorded.steps) - 1          # what goes up at the join is logged with the step before it
    batch.add([second])
    while batch.decodings:
        batch.step()
    alone = [decode(engine(package, step_graphs[3], "numpy"), package.config, part, options)
             for part in (sources[:3], sources[3:5])]
    for got, expected in zip((first.hypotheses(), second.hypotheses()), alone):
        assert [[h.tokens for h in hs] for hs in got] == [[h.tokens for h in hs] for hs in expected]
        for g, e in zip(got, expected):            # other rows in the batch: the same kernels, other row counts
            assert [h.score for h in g] == pytest.approx([h.score for h in e], abs=1e-5)
    joins = [t for t, step in enumerate(recorded.steps) if ("upload", PAST_LENGTH) in step]
    assert joins == [1, joined_at]


@pytest.mark.parametrize("rank", [0, 1])
def test_positions_advance_by_one(rank):
    """add_one_model_bytes, and the search head's next_length (its last output), for both contracts' past_length."""
    x = np.array(5, np.int64) if rank == 0 else np.array([3, 0, 9], np.int64)
    sess = ort.InferenceSession(add_one_model_bytes(rank), providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    assert y.dtype == np.int64 and y.shape == x.shape and np.array_equal(y, x + 1)
    head = ort.InferenceSession(search_head_model_bytes(False, False, False, rank), providers=["CPUExecutionProvider"])
    lp = np.log(np.full((3, 4), 0.25, np.float32))
    out = head.run(None, {"log_probs": lp, "bias": np.zeros((1, 4), np.float32),
                          "check_id": np.array([1], np.int64), "past_length": x})
    assert [o.name for o in head.get_outputs()][-1] == "next_length" and np.array_equal(out[-1], x + 1)
    assert np.array_equal(out[0], [0, 0, 0])
