"""bench/floor.py and bench/memory.py: the bytes a decoder step reads, the bandwidth probe, a process's own peak
memory. Figures of a run are the benchmark's; these check that each helper measures what its name says."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests import REPO

sys.path.insert(0, str(REPO))      # the repository root: `bench` package

from bench.floor import bandwidth, step_bytes  # noqa: E402
from bench.memory import own_peak_rss_mib  # noqa: E402


def _graph(path: Path, table_also_projects: bool) -> Path:
    """ids -> Gather(table) -> MatMul(weight) [-> MatMul(table^T)]: a table [10, 4] and a weight [4, 4], float32."""
    table = numpy_helper.from_array(np.zeros((10, 4), np.float32), "table")
    weight = numpy_helper.from_array(np.zeros((4, 4), np.float32), "weight")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["x"]), helper.make_node("MatMul", ["x", "weight"], ["h"])]
    out = "h"
    if table_also_projects:
        nodes += [helper.make_node("Transpose", ["table"], ["table_t"]),
                  helper.make_node("MatMul", ["h", "table_t"], ["logits"])]
        out = "logits"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], [table, weight])
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_a_looked_up_table_counts_one_row_and_a_projected_one_whole(tmp_path):
    looked_up = step_bytes(_graph(tmp_path / "a.onnx", table_also_projects=False))
    assert looked_up == {"initializer_bytes": 10 * 4 * 4 + 4 * 4 * 4, "bytes_per_step": 1 * 4 * 4 + 4 * 4 * 4}
    tied = step_bytes(_graph(tmp_path / "b.onnx", table_also_projects=True))
    assert tied == {"initializer_bytes": 10 * 4 * 4 + 4 * 4 * 4, "bytes_per_step": 10 * 4 * 4 + 4 * 4 * 4}


def test_bandwidth_reports_each_way_and_the_best():
    got = bandwidth(array_mib=8, tries=2, threads=2)
    assert set(got["read_gb_s"]) == set(got["copy_gb_s"]) == {"1", "2"}
    rates = [r for way in ("read_gb_s", "copy_gb_s") for tries in got[way].values() for r in tries]   # every try
    assert all(r > 0 for r in rates) and got["bandwidth_gb_s"] == round(max(rates), 2)
    assert isinstance(got["threads_beat_one"], bool)


def test_own_peak_rss_is_the_childs_not_its_parents():
    """A child that touches 64 MiB reports at least that; a child of a big parent that touches little reports
    little (ru_maxrss would report the parent's peak: bench/memory.py)."""
    code = ("import sys; sys.path.insert(0, {root!r}); import numpy as np; from bench.memory import own_peak_rss_mib;"
            "before = own_peak_rss_mib(); a = np.ones({n}, np.uint8); print(before, own_peak_rss_mib())")
    root = str(REPO)
    before, after = map(float, subprocess.run([sys.executable, "-c", code.format(root=root, n=64 << 20)],
                                              capture_output=True, text=True, check=True).stdout.split())
    assert after - before >= 60
    ballast = np.ones(256 << 20, np.uint8)                                 # this process: +256 MiB
    assert own_peak_rss_mib() >= 256
    _, small = map(float, subprocess.run([sys.executable, "-c", code.format(root=root, n=1)], capture_output=True,
                                         text=True, check=True).stdout.split())
    assert small < 200
    del ballast


def test_weight_products_keep_each_weight_product_and_nothing_else(tmp_path):
    """The ceiling graph: every MatMul / Gemm of an initializer weight, with that weight's bytes (a Gemm's transposed
    weight stored transposed), each fed one row; a product of a computed tensor (the tied projection through a
    Transpose) is not a weight product. The int8 graph quantises them; both run."""
    from bench.floor import weight_products, weight_products_tok_s

    src = _graph(tmp_path / "step.onnx", table_also_projects=True)
    model = onnx.load(str(src))
    gemm_weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "gemm_weight")   # [N, K]
    model.graph.initializer.append(gemm_weight)
    model.graph.node.append(helper.make_node("Gemm", ["h", "gemm_weight"], ["g"], transB=1))
    onnx.save(model, str(src))
    out = weight_products(src, tmp_path)
    graph = onnx.load(str(out["fp32"])).graph
    assert [n.op_type for n in graph.node] == ["MatMul", "MatMul"]
    weights = [numpy_helper.to_array(t) for t in graph.initializer]
    assert [w.shape for w in weights] == [(4, 4), (4, 3)] and np.array_equal(weights[1], np.arange(12).reshape(3, 4).T)
    assert [i.name for i in graph.input] == ["x4"]
    assert any(n.op_type == "MatMulIntegerToFloat" for n in onnx.load(str(out["int8"])).graph.node)
    assert all(weight_products_tok_s(path, threads=1, runs=5) > 0 for path in out.values())


def test_the_floor_beside_the_case_is_the_best_probe_of_its_rounds_and_both_floors_are_reported():
    """run.py's floor section: the floor at the start and the one beside the batch-1 case (the best of the probes
    run_case made before each counted round), each with our tokens/s as a percentage; the report shows both."""
    from bench.measure import CASES, Case, CaseResult, Timing, run_case
    from bench.report import floor_text
    from bench.run import Settings, floor_summary

    class Engine:
        name, precision = "seq2onnx fp32", "fp32"

        def run(self, sources, beam, length):
            return [[5] * length for _ in sources], 0.5

    probes = []
    res = run_case([Engine()], Case("batch 1 greedy", 1, 1), [[5, 2]], 4, 3, None, 8000,
                   before_round=lambda: probes.append(40.0 + len(probes)))
    assert probes == [40.0, 41.0, 42.0]                                 # before each counted round, not the warm-up
    st = Settings(vocab_sizes=[8000])
    step_bytes = {8000: {"fp32": {"bytes_per_step": 100e6, "initializer_bytes": 110e6, "floor_tok_s": 800.0,
                                  "weight_products_tok_s": 600.0}}}
    start = {"bandwidth_gb_s": 80.0, "read_gb_s": {"1": [30.0], str(st.threads): [50.0, 60.0]}}
    out = floor_summary(start, step_bytes, {CASES[0].name: res}, st, {8000: probes})
    f = out["by_vocab"]["8000"]["fp32"]
    assert res.timings[0].tokens_per_s == 8.0                          # 4 tokens in 0.5 s
    assert f["bandwidth_during_case_gb_s"] == 42.0 and f["floor_tok_s_during_case"] == 420.0
    assert f["percent_of_floor"] == 1.0 and f["percent_of_floor_during_case"] == round(800 / 420, 1)
    assert (out["bandwidth_gb_s"], out["fp32_tok_s"]) == (80.0, 800.0)
    # the read-only floor: the start probe's best read on the run's threads
    assert (f["read_gb_s"], f["read_floor_tok_s"], f["percent_of_read_floor"]) == (60.0, 600.0, round(800 / 600, 1))
    out["bandwidth"] = {"tries": 5, "best": "copy, 2 threads", "array_mib": 512, "threads_beat_one": True,
                        "read_gb_s": {"1": [30.0], "2": [60.0]}, "copy_gb_s": {"1": [40.0], "2": [80.0]}}
    row = [line for line in floor_text(out).splitlines() if line.startswith("| fp32, vocab 8000")]
    assert row == ["| fp32, vocab 8000 | 100.0 | 800 | 420 (42.0) | 600 (60.0) | 600 | 8 | 1% | 2% | 1% | 1% |"]
