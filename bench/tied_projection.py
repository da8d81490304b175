"""The tied output projection with and without onnxruntime's prepacked copy of its weight.

    python bench/tied_projection.py [--vocab-sizes 8000 32000] [--rows 1 4 16 64] [--threads 2] [--rounds 5]

With tied embeddings a package holds the table [V, D] once (shared weights), but onnxruntime also keeps the output
projection's prepacked copy of it: MLAS packs a constant Gemm / QGemm weight when the session is built, and the
embedding Gathers cannot read that layout. The one way to a single copy is a projection whose weight is not
prepacked: the table listed as a graph input as well as an initializer (an overridable initializer, which
onnxruntime treats as non-constant). This measures what that costs, on the projection alone, as export writes it:
  - fp32: Gemm(x, W, transB=1), W float32 [V, D];
  - int8: DynamicQuantizeLinear(x) + com.microsoft.QGemm(transB=1), W the 7-bit int8 table [V, D] with a scale per
    row (export/quantize.py int8_embeddings).
Each case: both sessions in this process, called in alternation, the best of `rounds` rounds of ms per call.
Printed: a table; written: bench/results/tied_projection.json.
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

D_MODEL = 512
OUT = Path(__file__).resolve().parent / "results" / "tied_projection.json"


def graph(kind: str, vocab: int, prepacked: bool) -> bytes:
    """The projection [rows, D] -> [rows, V]; not `prepacked`: the weight is a graph input too (overridable)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", D_MODEL])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", vocab])
    if kind == "fp32":
        weight = (rng.standard_normal((vocab, D_MODEL), dtype=np.float32) * 0.05)
        nodes = [helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)]
        inits = [numpy_helper.from_array(weight, "W")]
    else:
        weight = rng.integers(-64, 65, (vocab, D_MODEL), dtype=np.int8)
        scales = rng.random(vocab, dtype=np.float32) * 0.01 + 0.001
        nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
                 helper.make_node("QGemm", ["xq", "xs", "xz", "W", "ws", "wz"], ["y"], domain="com.microsoft",
                                  transB=1)]
        inits = [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(scales, "ws"),
                 numpy_helper.from_array(np.zeros(vocab, np.int8), "wz")]
    inputs = [x] + ([] if prepacked else [helper.make_tensor_value_info("W", inits[0].data_type, [vocab, D_MODEL])])
    model = helper.make_model(helper.make_graph(nodes, "projection", inputs, [y], inits), ir_version=10,
                              opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def main() -> None:
    import onnxruntime as ort

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab-sizes", type=int, nargs="+", default=[8000, 32000])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.log_severity_level = 3          # the overridable initializer's warning
    rng = np.random.default_rng(1)
    rows_out = []
    print("| kind | vocab | rows | prepacked ms | not prepacked ms | ratio | outputs equal |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for kind in ("fp32", "int8"):
        for vocab in args.vocab_sizes:
            sessions = {p: ort.InferenceSession(graph(kind, vocab, p), options, providers=["CPUExecutionProvider"])
                        for p in (True, False)}
            for rows in args.rows:
                x = rng.standard_normal((rows, D_MODEL), dtype=np.float32)
                outs = {p: s.run(None, {"x": x})[0] for p, s in sessions.items()}
                calls = max(10, int(2e6 // (rows * vocab)))
                best = {True: float("inf"), False: float("inf")}
                for _ in range(args.rounds):
                    for p, s in sessions.items():
                        t0 = time.perf_counter()
                        for _ in range(calls):
                            s.run(None, {"x": x})
                        best[p] = min(best[p], (time.perf_counter() - t0) / calls * 1e3)
                equal = bool(np.array_equal(outs[True], outs[False]))
                rows_out.append(dict(kind=kind, vocab=vocab, rows=rows, prepacked_ms=best[True],
                                     not_prepacked_ms=best[False], ratio=best[False] / best[True], equal=equal))
                print(f"| {kind} | {vocab} | {rows} | {best[True]:.3f} | {best[False]:.3f} | "
                      f"{best[False] / best[True]:.2f}x | {equal} |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(dict(threads=args.threads, rounds=args.rounds, d_model=D_MODEL,
                                        onnxruntime=ort.__version__, machine=platform.processor() or platform.machine(),
                                        cases=rows_out), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
