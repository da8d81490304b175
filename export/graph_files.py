"""Writing a graph file: its weights inside it, or in one data file beside it (ONNX external data).

A graph whose serialized size would pass protobuf's 2 GB limit (runtime/manifest.py MAX_FILE_BYTES: NLLB-200
1.3B and 3.3B, OPUS-MT's big models), or every graph with `--external-data`, is written as
    encoder.onnx          the graph, with each initializer of at least INLINE_BYTES as a reference
                          (external_data: location "encoder.onnx.data", offset, length)
    encoder.onnx.data     those initializers' bytes, one after the other, each at an offset aligned to ALIGNMENT
The manifest lists the data file in `files` (its SHA-256 covers every byte) and names it in the variant's
`external_data` (runtime/external_data.py reads it: the runtime hands onnxruntime the weights itself).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict

import onnx
from onnx.external_data_helper import set_external_data

from seq2onnx.runtime.external_data import FIELD
from seq2onnx.runtime.manifest import MAX_FILE_BYTES

DATA_SUFFIX = ".data"       # encoder.onnx -> encoder.onnx.data
INLINE_BYTES = 1024         # smaller initializers stay in the graph (onnx.save_model's size_threshold)
ALIGNMENT = 64              # each weight's offset: its numpy view over the data file's bytes is aligned for any dtype


def data_file(graph: Path) -> Path:
    """The data file of the graph file `graph`: the same folder, its name + DATA_SUFFIX."""
    return graph.with_name(graph.name + DATA_SUFFIX)


def too_big(model: onnx.ModelProto) -> bool:
    """Would `model`, serialized with its weights inside, pass protobuf's limit?"""
    try:
        return model.ByteSize() > MAX_FILE_BYTES
    except Exception:  # noqa: BLE001 - a protobuf build that cannot even size it: it is too big
        return True


def save_graph(model: onnx.ModelProto, path: Path, external: bool = False) -> Path:
    """Write `model` (its weights in memory: onnx.load loads a data file's) to `path`; with `external`, or when it is
    too_big, its initializers of INLINE_BYTES or more go into data_file(path) instead (written anew). The model's
    tensors hold references instead of their bytes afterwards."""
    path = Path(path)
    data = data_file(path)
    data.unlink(missing_ok=True)            # onnx appends to an existing data file
    if external or too_big(model):
        offset = 0
        for tensor in model.graph.initializer:
            if tensor.HasField("raw_data") and len(tensor.raw_data) >= INLINE_BYTES:
                offset = -(-offset // ALIGNMENT) * ALIGNMENT
                set_external_data(tensor, data.name, offset, len(tensor.raw_data))
                tensor.data_location = onnx.TensorProto.EXTERNAL
                offset += len(tensor.raw_data)
    onnx.save_model(model, str(path))       # writes the marked tensors' bytes at their offsets, then the graph
    if data.exists():                       # onnx creates it 0600: readable as the graph is
        os.chmod(data, path.stat().st_mode & 0o777)
    return path


def remove_graph(path: Path) -> None:
    """Delete a graph file and its data file (an intermediate graph of the export)."""
    Path(path).unlink(missing_ok=True)
    data_file(Path(path)).unlink(missing_ok=True)


def add_external_data_fields(folder: Path, variants: Dict[str, Dict[str, Any]]) -> None:
    """Each variant's manifest entry gets external_data: {graph file: its data file} for its graphs that have one
    in `folder` (the runtime reads no data file the variant does not name)."""
    for entry in variants.values():
        graphs = [entry["encoder"], entry["decoder_step"]] + ([entry["few_rows"]["decoder_step"]]
                                                              if entry.get("few_rows") else [])
        names = {g: data_file(folder / g).name for g in graphs if data_file(folder / g).exists()}
        if names:
            entry[FIELD] = names
