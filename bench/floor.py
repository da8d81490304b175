"""The memory floor of batch-1 decoding: bytes of weights read per decoder step over memory bandwidth.

    python bench/floor.py                 # this machine's memory bandwidth alone
    python bench/floor.py PACKAGE         # + bytes per step and floor tokens/s of a seq2onnx package, and the
                                          #   ceiling of its weight products alone on onnxruntime

At batch 1 a decoder step multiplies one vector by every weight matrix, so each step reads every
weight once from memory (the weights, 20-100 MB here, do not fit the CPU cache): no engine can step
faster than bandwidth / bytes per step. run.py measures both in the same run and reports our
batch-1 greedy tokens/s as a percentage of that floor. Machines differ: never carry a floor over.

Bandwidth: the best of several tries of a read (np.maximum.reduce: SIMD, ~100 GB/s per core on
cached data, so memory is what limits it) and a copy (np.copyto: bytes read plus bytes written) of
arrays far larger than the CPU cache, split across 1 and 2 threads (numpy releases the GIL in both).
The largest figure is the bandwidth; the detail says whether 2 threads beat 1.

Beside the floor, the ceiling of onnxruntime's own kernels: a graph of nothing but the step's weight products
(weight_products), timed at batch 1. What a decoder step adds to it (attention, layer norms, small ops, the
decoding loop) is the part an engine built on these kernels can still win back; the rest of the gap to the floor
is how fast the kernels read weights.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict

import numpy as np

MIB = 2 ** 20
GB = 1e9
VARIANTS = {"fp32": "decoder_step.onnx", "int8": "decoder_step.int8.onnx"}   # our package's decoder step graphs


def _few_rows(package: Path):
    """The package manifest's variants.int8.few_rows entry, or None."""
    manifest = json.loads((package / "manifest.json").read_text(encoding="utf-8"))
    return manifest["variants"].get("int8", {}).get("few_rows")


def batch1_graphs(package: Path) -> Dict[str, str]:
    """The decoder step graph each variant runs at batch 1: the int8 variant's few-rows step where the package has
    one (1 row is few), else VARIANTS."""
    few_rows = _few_rows(package)
    graphs = dict(VARIANTS)
    if few_rows and few_rows["max_rows"] >= 1:
        graphs["int8"] = few_rows["decoder_step"]
    return graphs


def few_rows_block(package: Path):
    """The MatMulNBits block size of the package's int8 few-rows step, or None without one."""
    few_rows = _few_rows(package)
    return few_rows["quantization"]["block_size"] if few_rows else None


def _best_rate(threads: int, nbytes: int, work: Callable[[int], None], tries: int):
    """-> (best GB/s, every try's GB/s): work(i) does the i-th of `threads` chunks, all at once."""
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, range(threads)))                   # warm-up: threads started, pages hot in the TLB
        for _ in range(tries):
            start = time.perf_counter()
            list(pool.map(work, range(threads)))
            rates.append(nbytes / (time.perf_counter() - start) / GB)
    return max(rates), [round(r, 2) for r in rates]


def bandwidth(array_mib: int = 512, tries: int = 5, threads: int = 2) -> Dict:
    """Memory bandwidth in GB/s (1e9 bytes): the best of `tries` reads and copies of two float32 arrays
    of array_mib each, on 1 and on `threads` threads. np.ones touches every page before timing
    (np.zeros would map the shared zero page, which reads from cache)."""
    src = np.ones(array_mib * MIB // 4, dtype=np.float32)
    dst = np.ones_like(src)
    detail: Dict = {"array_mib": array_mib, "tries": tries, "read_gb_s": {}, "copy_gb_s": {}}
    best = {}
    for n in sorted({1, threads}):
        s, d = np.array_split(src, n), np.array_split(dst, n)
        for op, nbytes, work in (("read", src.nbytes, lambda i: np.maximum.reduce(s[i])),
                                 ("copy", 2 * src.nbytes, lambda i: np.copyto(d[i], s[i]))):
            best[op, n], detail[f"{op}_gb_s"][str(n)] = _best_rate(n, nbytes, work, tries)
    op, n = max(best, key=best.get)
    detail.update(bandwidth_gb_s=round(best[op, n], 2), best=f"{op}, {n} thread{'s' * (n > 1)}",
                  threads_beat_one=all(best[o, threads] > best[o, 1] for o in ("read", "copy")))
    return detail


def _dtype_bytes(data_type: int) -> int:
    from onnx.helper import tensor_dtype_to_np_dtype
    return np.dtype(tensor_dtype_to_np_dtype(data_type)).itemsize


def step_bytes(graph_path: Path) -> Dict[str, int]:
    """Bytes of weights one batch-1 step of this graph reads, from its initializers (sizes only: the
    data is not loaded). -> {"initializer_bytes": all of them, "bytes_per_step": what a step reads}.

    Every initializer is read whole, except one that only Gather nodes read (an embedding or position
    table looked up by one id per step): one row of it is read. The fp32 graph's tied embedding table
    is both looked up and the output projection, so it counts once, whole; the int8 graph keeps the
    float32 table for the lookup beside an int8 copy for the projection, so there the float32 table
    counts one row, the int8 copy whole.
    """
    import onnx

    graph = onnx.load(str(graph_path), load_external_data=False).graph
    readers: Dict[str, list] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            readers.setdefault(name, []).append((node, k))
    total = read = 0
    for init in graph.initializer:
        dims = list(init.dims)
        size = int(np.prod(dims, dtype=np.int64)) * _dtype_bytes(init.data_type)
        total += size
        lookups = readers.get(init.name, [])
        only_looked_up = lookups and all(node.op_type == "Gather" and k == 0 and
                                         all(a.name != "axis" or a.i == 0 for a in node.attribute)
                                         for node, k in lookups)
        read += size // dims[0] if only_looked_up and dims and dims[0] else size
    return {"initializer_bytes": total, "bytes_per_step": read}


def package_floor(package: Path, bandwidth_gb_s: float) -> Dict[str, Dict]:
    """Per variant of our package: bytes per step and the floor tokens/s at batch 1, of the graph a batch-1 step
    runs (batch1_graphs)."""
    out = {}
    for variant, name in batch1_graphs(package).items():
        if (package / name).exists():
            sizes = step_bytes(package / name)
            out[variant] = dict(sizes, graph=name, floor_tok_s=round(bandwidth_gb_s * GB / sizes["bytes_per_step"], 1))
    return out


def weight_products(graph_path: Path, out_dir: Path, block_size=None) -> Dict[str, Path]:
    """Graphs of nothing but a decoder step's weight products: {"fp32": path, "int8": path}.

    Every MatMul (and Gemm) of the fp32 decoder step whose second input is a 2-D initializer, with that same weight
    (a Gemm's transposed weight stored as [K, N]: the same bytes), each fed a graph input of one row [1, K] and
    each a graph output; the int8 graph quantises them as `seq2onnx export --int8` does (export/quantize.py): as
    its few-rows step, MatMulNBits in blocks of block_size, when given (what a batch-1 step runs), else as its
    step. What onnxruntime's kernels alone take to read a batch-1 step's weights: the attention, layer norms, the
    other small ops of a step and our decoding loop come on top. (The embedding lookup, one row, is left out.)"""
    import onnx
    from onnx import helper, numpy_helper

    from seq2onnx.export.quantize import quantize_int8, quantize_int8_few_rows

    graph = onnx.load(str(graph_path)).graph
    weights = {t.name: t for t in graph.initializer if len(t.dims) == 2}
    nodes, inits, inputs, outputs = [], [], {}, []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Gemm") or node.input[1] not in weights:
            continue
        w = numpy_helper.to_array(weights[node.input[1]])
        if node.op_type == "Gemm" and any(a.name == "transB" and a.i for a in node.attribute):
            w = np.ascontiguousarray(w.T)
        k, i = w.shape[0], len(nodes)
        inputs.setdefault(k, helper.make_tensor_value_info(f"x{k}", onnx.TensorProto.FLOAT, [1, k]))
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [f"x{k}", f"w{i}"], [f"y{i}"]))
        outputs.append(helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, [1, w.shape[1]]))
    model = helper.make_model(helper.make_graph(nodes, "weight_products", list(inputs.values()), outputs, inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    out = {"fp32": Path(out_dir) / "weight_products.onnx", "int8": Path(out_dir) / "weight_products.int8.onnx"}
    onnx.save(model, str(out["fp32"]))
    if block_size:
        quantize_int8_few_rows(out["fp32"], out["int8"], block_size)
    else:
        quantize_int8(out["fp32"], out["int8"])
    return out


def weight_products_tok_s(path: Path, threads: int = 2, runs: int = 200) -> float:
    """Steps per second of a weight_products graph at batch 1 on `threads` intra-op threads: 1 / the median of
    `runs` timed runs after a warm-up."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    feed = {i.name: np.ones([1, i.shape[1]], dtype=np.float32) for i in sess.get_inputs()}
    for _ in range(20):
        sess.run(None, feed)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        sess.run(None, feed)
        times.append(time.perf_counter() - start)
    return 1.0 / float(np.median(times))


def weight_products_ceiling(package: Path, threads: int = 2) -> Dict[str, float]:
    """{"fp32": tok/s, "int8": tok/s}: batch-1 steps per second of the package's decoder step weight products
    alone (weight_products), as onnxruntime runs them on `threads` threads: the ceiling of any decoding that runs
    these weights on onnxruntime's kernels, to set beside the memory floor."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        graphs = weight_products(package / VARIANTS["fp32"], Path(tmp), few_rows_block(package))
        return {variant: round(weight_products_tok_s(path, threads), 1) for variant, path in graphs.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("package", nargs="?", type=Path, help="a seq2onnx package: also its bytes per step and floor")
    ap.add_argument("--array-mib", type=int, default=512, help="size of each of the two arrays (default 512)")
    ap.add_argument("--tries", type=int, default=5, help="timed tries of each measurement (default 5)")
    args = ap.parse_args(argv)
    bw = bandwidth(args.array_mib, args.tries)
    print(json.dumps(bw, indent=1))
    print(f"bandwidth: {bw['bandwidth_gb_s']:.1f} GB/s ({bw['best']})")
    if args.package:
        ceiling = weight_products_ceiling(args.package)
        for variant, f in package_floor(args.package, bw["bandwidth_gb_s"]).items():
            print(f"{variant} ({f['graph']}): {f['bytes_per_step'] / 1e6:.1f} MB read per step "
                  f"({f['initializer_bytes'] / 1e6:.1f} MB of initializers), floor {f['floor_tok_s']:.0f} tokens/s; "
                  f"its weight products alone on onnxruntime: {ceiling[variant]:.0f} steps/s "
                  f"({100 * ceiling[variant] / f['floor_tok_s']:.0f}% of the floor)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
