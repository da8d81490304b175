"""onnxruntime's two int8 weight kernels at the decoder step's shapes, by rows: why the int8 variant has a few-rows step.

    python bench/int8_kernels.py [--rows 1 2 4 8 16 64] [--threads 2]

For each weight shape of a Transformer-base decoder step (K x N: the fused QKV projection 512 x 1536, FFN in
512 x 2048 and out 2048 x 512, the vocab-8000 output projection 512 x 8000) and each row count M, the time of one
[M, K] x [K, N] product with random int8 weights:
  - DynamicQuantizeMatMul: what `quantize_dynamic` writes (the int8 step, decoder_step.int8.onnx; onnxruntime fuses
    its DynamicQuantizeLinear + MatMulInteger into this op), per-column scales;
  - MatMulNBits, 8 bits, accuracy_level 4, blocks of 128 and 256: what the few-rows step runs
    (export/quantize.py quantize_int8_few_rows).
Each graph holds as many copies of the weight as fill ~48 MB (more than the L3 cache), all fed the same input, so
the weights come from memory as in a real step; the time per product is the best of 5 runs / copies. Printed: a
table of microseconds per product and the weight bytes read per second; written: bench/results/int8_kernels.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

SHAPES = [(512, 1536), (512, 2048), (2048, 512), (512, 8000)]     # K x N
KINDS = ["DynamicQuantizeMatMul", "MatMulNBits bs128", "MatMulNBits bs256"]
FILL_BYTES = 48e6
OUT = Path(__file__).resolve().parent / "results" / "int8_kernels.json"


def graph(k: int, n: int, copies: int, kind: str) -> bytes:
    """copies of one int8 weight product [M, K] x [K, N], each its own graph output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for i in range(copies):
        if kind == "DynamicQuantizeMatMul":
            inits += [numpy_helper.from_array(rng.integers(-127, 128, (k, n), dtype=np.int8), f"w{i}"),
                      numpy_helper.from_array(np.full((n,), 0.01, np.float32), f"s{i}")]
            nodes.append(helper.make_node(kind, ["x", f"w{i}", f"s{i}"], [f"y{i}"], domain="com.microsoft"))
        else:
            block = int(kind.split("bs")[1])
            inits += [numpy_helper.from_array(rng.integers(0, 256, (n, k // block, block), dtype=np.uint8), f"w{i}"),
                      numpy_helper.from_array(np.full((n * (k // block),), 0.01, np.float32), f"s{i}")]
            nodes.append(helper.make_node("MatMulNBits", ["x", f"w{i}", f"s{i}"], [f"y{i}"], domain="com.microsoft",
                                          K=k, N=n, bits=8, block_size=block, accuracy_level=4))
        outs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, None))
    model = helper.make_model(
        helper.make_graph(nodes, "int8_kernels", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
                          outs, inits),
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9
    return model.SerializeToString()


def time_product(k: int, n: int, rows: int, kind: str, threads: int) -> float:
    """Seconds per [rows, K] x [K, N] product: the best of 5 runs over all copies, divided by the copies."""
    import onnxruntime as ort

    copies = max(2, int(FILL_BYTES // (k * n)))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(graph(k, n, copies, kind), opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((rows, k)).astype(np.float32)
    for _ in range(3):
        sess.run(None, {"x": x})
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        sess.run(None, {"x": x})
        best = min(best, time.perf_counter() - start)
    return best / copies


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 2, 4, 8, 16, 64])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    import onnxruntime as ort

    results = []
    print("| K x N | rows | " + " | ".join(f"{kind} us (GB/s)" for kind in KINDS) + " | NBits bs256 / DQMatMul time |")
    print("|---|---:|" + "---:|" * (len(KINDS) + 1))
    for k, n in SHAPES:
        for rows in args.rows:
            us = {kind: 1e6 * time_product(k, n, rows, kind, args.threads) for kind in KINDS}
            results.append({"k": k, "n": n, "rows": rows, "us": us})
            cells = " | ".join(f"{us[kind]:.1f} ({k * n / us[kind] / 1e3:.1f})" for kind in KINDS)
            print(f"| {k} x {n} | {rows} | {cells} | {us[KINDS[2]] / us[KINDS[0]]:.2f} |", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"onnxruntime": ort.__version__, "threads": args.threads, "results": results,
                                    "load_average_after": os.getloadavg()}, indent=1) + "\n")
    print(f"\nwrote {args.out}; load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
