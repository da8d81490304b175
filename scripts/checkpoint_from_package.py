"""Recover a package's PyTorch checkpoint from its fp32 graphs (for a user who lost the .pt, or to re-export).

    python scripts/checkpoint_from_package.py PACKAGE OUT.pt [--parity-data FILE]

The exporter (export/onnx_export.py) writes every weight into the fp32 graphs, but under names of its own
(the dynamo exporter's val_N, MatMul weights transposed, sibling projections concatenated by export/fuse.py).
To learn that mapping, a model of the package's config is given weights that name themselves: element i of
the parameters holds the float32 integer i + 1 (exact below 2**24), and is exported once with the same
exporter, opset and format. Each initializer of that fresh export then says, element by element, which
parameter element it holds; the package's initializer of the same name gives the value. Initializers that
are not parameter copies (constants) are left to the parity check below. Every parameter element must be
found, with one value wherever it appears (tied embeddings), and every float tensor of the package's graphs
must be placed, else the recovery stops with one line.

The recovered model is then held to the fp32 parity gate against the package's own fp32 graphs
(export/parity.py, on the parity set: `--parity-data` sentences besides the synthetic ones), and written
in the checkpoint format of training/checkpoint.py with the manifest's tokenizer and train_meta, the
latter with `recovered_from` (the package, its graphs' sha256). `seq2onnx export OUT.pt ...` re-exports it.
Needs torch (the train extra). About a minute for numbers-en-de (two exports) on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import re
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the checkout, when run from it
from seq2onnx.export import onnx_export, parity                  # noqa: E402
from seq2onnx.export.commands import _parity_sources             # noqa: E402
from seq2onnx.runtime.errors import Seq2OnnxError                # noqa: E402
from seq2onnx.runtime.package.manifest import decoder_format, read_package   # noqa: E402
from seq2onnx.training.checkpoint import make_checkpoint, save_checkpoint  # noqa: E402
from seq2onnx.training.tokenizer import tokenizer_from_json      # noqa: E402
from seq2onnx.training.model import Transformer                  # noqa: E402

GRAPHS = ("encoder", "decoder_step")
MAX_ELEMENTS = 1 << 24          # float32 holds every integer up to 2**24 exactly


def _initializers(path: Path) -> Dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}


def _label_parameters(model: Transformer) -> List[torch.nn.Parameter]:
    """Give every parameter element its own float32 integer (1-based, in named_parameters order)."""
    params = [p for _, p in model.named_parameters()]      # tied parameters appear once
    total = sum(p.numel() for p in params)
    if total >= MAX_ELEMENTS:
        raise Seq2OnnxError(f"the model has {total} parameters; this recovery labels at most {MAX_ELEMENTS - 1}")
    start = 1
    with torch.no_grad():
        for p in params:
            p.copy_(torch.arange(start, start + p.numel(), dtype=torch.float64).reshape(p.shape).float())
            start += p.numel()
    return params


def _is_label(array: np.ndarray, total: int) -> bool:
    if array.dtype != np.float32 or array.size < 2:
        return False
    return bool(np.all(array == np.round(array)) and array.min() >= 1 and array.max() <= total)


def _labelled_export(model: Transformer, opset: int, decoder_format: int, fused: bool,
                     stamped: bool) -> Dict[str, Dict[str, np.ndarray]]:
    """The initializers of the labelled model's fp32 graphs, as the exporter writes them (fused: with its
    sibling-projection fusion, export/fuse.py; else without, as seq2onnx wrote them before it; stamped: layers
    stamped from a trace of two, export/stamp.py, whose constants are named apart; else the whole model traced)."""
    keep = onnx_export._fuse_projections
    with tempfile.TemporaryDirectory(prefix="s2o-recover.") as tmp:
        try:
            if not fused:
                onnx_export._fuse_projections = lambda path, external=False: None
            enc, dec = onnx_export.export_graphs(model, Path(tmp), opset=opset, decoder_format=decoder_format,
                                                 stamped=stamped)
        finally:
            onnx_export._fuse_projections = keep
        return {"encoder": _initializers(enc), "decoder_step": _initializers(dec)}


def _named_as_shipped(fresh: Dict[str, np.ndarray], shipped: Dict[str, np.ndarray],
                      total: int) -> Dict[str, np.ndarray]:
    """`fresh` with the initializers that the exporter named by a counter (val_N: a constant, or a weight it folded,
    e.g. transposed; the counter's value depends on what the process traced before) renamed to the shipped graph's
    counter-named ones, pairing the float32 arrays of more than one element of both in the order both graphs hold
    them, where their shapes agree one by one. A wrong pairing puts weights in the wrong place or changes a constant,
    which the checks below and the parity check of the recovered model against the package's graphs refuse."""
    def counted(arrays: Dict[str, np.ndarray]) -> List[str]:
        return [n for n, v in arrays.items()
                if re.fullmatch(r"val_\d+(\.\w+)?", n) and v.dtype == np.float32 and v.size > 1]
    mine, theirs = counted(fresh), counted(shipped)
    if not mine or len(mine) != len(theirs) or any(fresh[a].shape != shipped[b].shape for a, b in zip(mine, theirs)):
        return fresh
    renamed = dict(zip(mine, theirs))
    kept = {n: v for n, v in fresh.items() if n not in renamed}
    return {**kept, **{renamed[n]: fresh[n] for n in mine}}


def recover_state(package_dir: Path, opset: int, decoder_format: int, cfg) -> Dict[str, torch.Tensor]:
    """-> the state_dict held by the package's fp32 graphs (module docstring)."""
    model = Transformer(cfg).float().eval()
    params = _label_parameters(model)
    total = sum(p.numel() for p in params)
    flat = np.full(total, np.nan, dtype=np.float32)
    shipped = {graph: _initializers(package_dir / f"{graph}.onnx") for graph in GRAPHS}
    # packages exported before export/fuse.py hold the projections one by one, and before export/stamp.py the whole
    # model's trace
    for stamped, fused in ((False, True), (False, False), (True, True), (True, False)):
        fresh = _labelled_export(model, opset, decoder_format, fused, stamped)
        fresh = {g: _named_as_shipped(fresh[g], shipped[g], total) for g in GRAPHS}
        if all(name in shipped[g] and shipped[g][name].shape == labels.shape
               for g in GRAPHS for name, labels in fresh[g].items() if _is_label(labels, total)):
            break
    else:
        raise Seq2OnnxError("the package's fp32 graphs hold other initializers than this exporter writes (with "
                            "or without fused projections): recover with the seq2onnx version that exported it")
    for graph in GRAPHS:
        shipped_path = package_dir / f"{graph}.onnx"
        unplaced = [n for n, v in shipped[graph].items() if v.dtype == np.float32 and v.size > 1
                    and not (n in fresh[graph] and (_is_label(fresh[graph][n], total)
                                                    or np.array_equal(fresh[graph][n], v, equal_nan=True)))]
        if unplaced:
            raise Seq2OnnxError(f"{shipped_path.name}: weights this exporter does not write "
                                f"({', '.join(unplaced[:3])}): recover with the seq2onnx version that exported it")
        for name, labels in fresh[graph].items():
            if not _is_label(labels, total):
                continue        # a constant (masks, shapes; exporters name them in their own order): the
                                # parity check of the recovered model against these graphs covers them
            value = shipped[graph][name]
            if value.dtype != labels.dtype:
                raise Seq2OnnxError(f"{shipped_path.name}: initializer {name} is {value.dtype}, "
                                    f"this exporter writes {labels.dtype}")
            index = labels.astype(np.int64).ravel() - 1
            seen = flat[index]
            known = ~np.isnan(seen)
            if not np.array_equal(seen[known], value.ravel()[known]):
                raise Seq2OnnxError(f"{shipped_path.name}: {name} disagrees with another copy of the same weights")
            flat[index] = value.ravel()
    if np.isnan(flat).any():
        raise Seq2OnnxError(f"{int(np.isnan(flat).sum())} parameter elements appear in no graph: "
                            "the graphs do not hold the whole model")
    start = 0
    with torch.no_grad():
        for p in params:
            p.copy_(torch.from_numpy(flat[start:start + p.numel()].reshape(p.shape)))
            start += p.numel()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def recover(package_dir: Path, out: Path, parity_data: Optional[Path] = None) -> parity.ParityReport:
    """package -> checkpoint at `out`, held to the fp32 parity gate against the package's fp32 graphs."""
    package_dir = Path(package_dir)
    pkg = read_package(package_dir)
    pkg.verify_variant("fp32")                      # the graphs' sha256
    manifest = pkg.manifest
    cfg = pkg.config
    state = recover_state(package_dir, int(manifest["opset"]), decoder_format(int(manifest.get("decoder_format", 1))),
                          cfg)
    tokenizer_json = (package_dir / manifest["tokenizer"]).read_text(encoding="utf-8")
    source = manifest.get("source_checkpoint") or {}
    meta = dict(source.get("train_meta") or {})
    ckpt = make_checkpoint(cfg, state, tokenizer_json, int(meta.get("step", 0)), int(meta.get("epoch", 0)),
                           meta.get("metrics", {}), meta.get("args", {}))
    model = onnx_export.model_from_checkpoint(ckpt)
    batches = parity.parity_batches(cfg, _parity_sources(parity_data, tokenizer_from_json(tokenizer_json), cfg))
    pair = parity.OnnxPair(package_dir / "encoder.onnx", package_dir / "decoder_step.onnx", cfg)
    report = parity.check_fp32(parity.measure(model, pair, batches), "recovered checkpoint vs the package's fp32")
    meta["recovered_from"] = {"package_created": manifest.get("created"),
                              "source_checkpoint": source.get("file"),
                              "graphs_sha256": {f: manifest["files"][f]["sha256"]
                                                for f in ("encoder.onnx", "decoder_step.onnx")},
                              "fp32_parity": report.to_dict()}
    ckpt["train_meta"] = {**ckpt["train_meta"], **meta}
    save_checkpoint(ckpt, out)
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("package", type=Path, help="a model package folder (manifest.json, encoder.onnx, ...)")
    p.add_argument("out", type=Path, help="the checkpoint to write (.pt)")
    p.add_argument("--parity-data", type=Path, metavar="FILE",
                   help="source sentences for the parity check (as seq2onnx export --parity-data)")
    a = p.parse_args(argv)
    try:
        report = recover(a.package, a.out, a.parity_data)
    except Seq2OnnxError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{a.out}: recovered from {a.package}; vs its fp32 graphs: log_probs max diff "
          f"{report.decoder_max_abs_diff:.2e}, greedy token match {report.greedy_token_match}, "
          f"beam-4 token match {report.beam4_token_match}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
