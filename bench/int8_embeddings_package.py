"""A copy of a package whose int8 graphs get int8 embeddings (export/quantize.py int8_embeddings), for A/B runs.

    python bench/int8_embeddings_package.py A_PACKAGE B_PACKAGE
    python bench/ab_packages.py A_PACKAGE B_PACKAGE --variants int8          # time: A's fp32 tables against B's
    python bench/memory_profile.py ... (or bench/memory.py) on each           # memory

A package exported before int8 embeddings (its int8 graphs Gather from a float32 table) gets them here without an
export: each int8 graph is rewritten by the exporter's own int8_embeddings (the graph is the one a new export writes,
up to its nodes' order: the exporter rewrites the Gather before quantising the MatMuls) and the manifest's size and
SHA-256 of each rewritten file updated. The fp32 graphs and every other file are copied as they are. Packages with
external data files are refused (their bytes would move): export those again instead.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

if __package__ in (None, ""):          # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx  # noqa: E402

from seq2onnx.export.quantize import int8_embeddings  # noqa: E402
from seq2onnx.runtime.package.external_data import FIELD  # noqa: E402


def derive(a: Path, b: Path) -> int:
    """-> how many tables became int8."""
    manifest = json.loads((a / "manifest.json").read_text(encoding="utf-8"))
    int8 = manifest["variants"]["int8"]
    if int8.get(FIELD):
        raise SystemExit(f"{a}: its int8 graphs keep their weights in data files; export it again instead")
    shutil.copytree(a, b)
    graphs = [int8["encoder"], int8["decoder_step"]] + ([int8["few_rows"]["decoder_step"]]
                                                        if int8.get("few_rows") else [])
    count = 0
    for graph in graphs:
        model = onnx.load(str(b / graph))
        count += int8_embeddings(model)
        onnx.save_model(model, str(b / graph))
        data = (b / graph).read_bytes()
        manifest["files"][graph] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (b / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return count


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path, help="a package exported with --int8")
    ap.add_argument("b", type=Path, help="the copy to write (must not exist)")
    args = ap.parse_args(argv)
    if args.b.exists():
        raise SystemExit(f"{args.b} exists: name a new folder")
    print(f"{derive(args.a, args.b)} embedding tables made int8 in {args.b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
