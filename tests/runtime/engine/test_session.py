"""runtime/engine/session.py against hostile graphs (docs/SECURITY.md):
  * onnxruntime's own log never reaches the terminal: a graph whose names hold escape sequences (an unused
    initializer that onnxruntime warns about at load, a node that fails to load or to run) cannot write them to
    stderr; what matters comes back as our one line, its control characters shown as \\xNN;
  * a graph that fails at run time (a log_probs of the wrong width, a shape error inside the graph) is one
    ModelPackageError line naming its file (exit 2), from the API and from `seq2onnx translate` / `score`;
  * NaN log-probs are blamed on the graph that stepped those rows: the int8 variant's few-rows step, or its step.
What a manifest may hold: runtime/package/test_manifest_limits.py. Each case edits a copy of the session's real tiny
package (runtime/package/test_hostile_packages.py's helpers)."""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from seq2onnx.export import quantize
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.errors import printable
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.engine.session import onnxruntime_version
from seq2onnx.runtime.translator import Translator
from tests.runtime.package.test_hostile_packages import SOURCE
from tests.runtime.package.test_manifest import pkg  # noqa: F401 - pkg: a copy of the tiny package, per test
from tests.runtime.package.test_reliability_packages import relist

CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]
FEW = "decoder_step.int8.few_rows.onnx"
# the terminal's: ESC ] 0 ; title BEL (window title), ESC [ 2 J (clear the screen), a red fake error line
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31mERROR: fake\x1b[0m"
# C0 but the newline, DEL and C1: what a terminal acts on (cli.printable's set, less the line ends we print)
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
needs_few_rows = pytest.mark.skipif(onnxruntime_version() < quantize.FEW_ROWS_MIN_ONNXRUNTIME,
                                    reason="onnxruntime < 1.22: no 8-bit MatMulNBits, so no few-rows step is exported")


def i64(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def edit_graph(pkg, name, change):
    """Change the graph `name` (an onnx ModelProto, in place) and list its new checksum: a consistent, hostile
    package."""
    path = pkg / name
    model = onnx.load(str(path))
    change(model)
    onnx.save(model, str(path))
    relist(pkg, name)
    return path


def after(output, make_nodes, initializers=(), symbolic_axis=None):
    """An edit that routes the graph output `output` through the nodes make_nodes(raw, output) (raw: what the
    graph computed), with `initializers`; symbolic_axis: that axis of the declared output made symbolic."""
    def change(model):
        g = model.graph
        for node in g.node:
            node.output[:] = [output + "_raw" if o == output else o for o in node.output]
        g.initializer.extend(initializers)
        g.node.extend(make_nodes(output + "_raw", output))
        if symbolic_axis is not None:
            out = next(o for o in g.output if o.name == output)
            out.type.tensor_type.shape.dim[symbolic_axis].dim_param = "any"
    return change


def narrow_log_probs():
    """log_probs cut to src_len columns at run time (shape inference cannot see it): the wrong width."""
    return after("log_probs", lambda raw, out: [
        helper.make_node("Shape", ["encoder_attention_mask"], ["src_len"], start=1, end=2),
        helper.make_node("Slice", [raw, "zero", "src_len", "one"], [out])],
        [i64("zero", [0]), i64("one", [1])], symbolic_axis=1)


def reshape_fails(node_name="reshape"):
    """cross_key_0 reshaped to [7, -1, 5] (7 from the batch at run time, so that only a run finds it): a shape
    error inside the graph, in a node named `node_name`."""
    return after("cross_key_0", lambda raw, out: [
        helper.make_node("Shape", ["input_ids"], ["batch"], start=0, end=1),
        helper.make_node("Mul", ["batch", "zero"], ["none"]),
        helper.make_node("Add", ["none", "seven"], ["first"]),
        helper.make_node("Concat", ["first", "rest"], ["bad_shape"], axis=0),
        helper.make_node("Reshape", [raw, "bad_shape"], ["reshaped"], name=node_name),
        helper.make_node("Shape", [raw], ["shape"]),
        helper.make_node("Reshape", ["reshaped", "shape"], [out])],
        [i64("zero", [0]), i64("seven", [7]), i64("rest", [-1, 5])])


def times(value):
    """log_probs multiplied by `value`."""
    return after("log_probs", lambda raw, out: [helper.make_node("Mul", [raw, "factor"], [out])],
                 [numpy_helper.from_array(np.array(value, dtype=np.float32), "factor")])


def run_cli(args, stdin):
    proc = subprocess.run(CLI + args, input=stdin.encode(), capture_output=True, timeout=300)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode("utf-8", "backslashreplace")


# --- onnxruntime's log ---------------------------------------------------------------------------------------
def test_initializer_named_with_escape_sequences_never_reaches_the_terminal(pkg):
    """The hazard: onnxruntime's load warning ("Removing initializer '...'. It is not used by any node") writes the
    name raw to stderr: the terminal's title set, the screen cleared, a fake error line."""
    path = edit_graph(pkg, "decoder_step.onnx", lambda m: m.graph.initializer.append(
        numpy_helper.from_array(np.zeros(1, dtype=np.float32), ESCAPES)))
    # the hazard is real on this onnxruntime: a session with its default log writes the name to stderr as it is
    probe = subprocess.run([sys.executable, "-c", "import onnxruntime, sys; onnxruntime.InferenceSession(sys.argv[1])",
                            str(path)], capture_output=True, timeout=120)
    assert ESCAPES.encode() in probe.stderr
    rc, out, err = run_cli(["translate", str(pkg), "--device", "cpu"], SOURCE + "\n")
    assert (rc, CONTROL.findall(err)) == (0, []), err
    assert out.count("\n") == 1 and out.strip()


@pytest.mark.parametrize("case", ["load", "run"])
def test_node_named_with_escape_sequences_never_reaches_the_terminal(pkg, case):
    """A node that fails to load (an operator onnxruntime does not have) or to run, its name made of escape
    sequences: onnxruntime would log its error line with the name raw, then raise it; what comes out is one line of
    ours, the name's control characters shown as \\xNN."""
    if case == "load":
        path = edit_graph(pkg, "encoder.onnx", after("cross_key_0", lambda raw, out: [
            helper.make_node("NoSuchOperator", [raw], [out], name=ESCAPES, domain="com.example")]))
        message = f"{path}: onnxruntime cannot load it ("
    else:
        path = edit_graph(pkg, "encoder.onnx", reshape_fails(ESCAPES))
        message = f"{path}: onnxruntime failed running this graph (its Reshape node "
    rc, out, err = run_cli(["translate", str(pkg), "--device", "cpu"], SOURCE + "\n")
    assert (rc, out, CONTROL.findall(err)) == (2, "", []), err
    assert err.startswith(f"seq2onnx translate: error: {message}") and err.count("\n") == 1, err
    assert printable(ESCAPES) in err


# --- a graph that fails at run time ----------------------------------------------------------------------------
RUN_FAILURES = {  # case -> (graph, edit, compute_type, the failing node)
    "width": ("decoder_step.onnx", narrow_log_probs, "float32", "Slice"),
    "shape": ("encoder.onnx", reshape_fails, "float32", "Reshape"),
    "few-rows-width": (FEW, narrow_log_probs, "int8", "Slice"),
}


@pytest.mark.parametrize("case", list(RUN_FAILURES))
def test_graph_failing_at_run_time_is_one_line_naming_it(pkg, tmp_path, capfd, case):
    """Left to onnxruntime: exit 1, a RuntimeError / Fail of its internals (C++ source paths and signatures), after
    its own coloured error line. The graphs load (their declared shapes pass every load check) and
    fail at their first run: one ModelPackageError line naming the file, exit 2, nothing else on stderr."""
    name, edit, compute_type, node = RUN_FAILURES[case]
    if name == FEW and onnxruntime_version() < quantize.FEW_ROWS_MIN_ONNXRUNTIME:
        pytest.skip("onnxruntime < 1.22: no few-rows step is exported")
    path = edit_graph(pkg, name, edit())
    tr = Translator(pkg, device="cpu", compute_type=compute_type)
    with pytest.raises(ModelPackageError) as e:
        tr.translate_batch([SOURCE], beam_size=1)        # one row: the int8 variant steps it with the few-rows graph
    message = str(e.value)
    assert message.startswith(f"{path}: onnxruntime failed running this graph (its {node} node")
    assert message.endswith("): the graph does not do what the package's contract says; re-export the model with "
                            "`seq2onnx export`")
    assert "\n" not in message and "onnxruntime_src" not in message and "[ONNXRuntimeError]" not in message
    capfd.readouterr()
    source = tmp_path / "in.txt"
    source.write_text(SOURCE + "\n", encoding="utf-8")
    args = ["--device", "cpu", "--compute-type", compute_type, "--beam-size", "1", "-i", str(source)]
    assert main(["translate", str(pkg), *args]) == 2
    assert capfd.readouterr() == ("", f"seq2onnx translate: error: {message}\n")


def test_graph_failing_when_it_scores_is_one_line_naming_it(pkg, tmp_path, capfd):
    """`seq2onnx score` steps the same graphs (decoding.score): the same line, exit 2."""
    path = edit_graph(pkg, "decoder_step.onnx", narrow_log_probs())
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{SOURCE}\tvier eins drei\n", encoding="utf-8")
    capfd.readouterr()
    assert main(["score", str(pkg), "--device", "cpu", "-i", str(pairs)]) == 2
    out, err = capfd.readouterr()
    assert out == "" and err.startswith(f"seq2onnx score: error: {path}: onnxruntime failed running this graph "
                                        f"(its Slice node") and err.count("\n") == 1, err


# --- NaN: the graph that stepped the rows is named ------------------------------------------------------------
@needs_few_rows
@pytest.mark.parametrize("graph, sentences", [(FEW, 1), ("decoder_step.int8.onnx", 8)], ids=["few-rows", "step"])
@pytest.mark.parametrize("value", [np.nan, -np.inf], ids=["nan", "inf"])     # log-probs <= 0: x -inf is +inf
def test_non_finite_log_probs_name_the_graph_that_stepped_them(pkg, graph, sentences, value):
    """NaN from the few-rows step (1 row) is blamed on it, not on decoder_step.int8.onnx. 8 sentences are more rows
    than the few-rows step takes (quantize.FEW_ROWS_MAX): the step graph runs the first step, and is named."""
    assert quantize.FEW_ROWS_MAX < 8
    edit_graph(pkg, graph, times(value))
    tr = Translator(pkg, device="cpu", compute_type="int8")
    with pytest.raises(ModelPackageError, match=f"^{re.escape(str(pkg / graph))} returned NaN or infinite log-probs: "
                                                f"the model package is broken"):
        tr.translate_batch([SOURCE] * sentences, beam_size=1)
