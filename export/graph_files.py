"""Writing a graph file: its weights inside it, or in one data file beside it (ONNX external data).

A graph whose serialized size would pass protobuf's 2 GB limit (runtime/manifest.py MAX_FILE_BYTES: NLLB-200
1.3B and 3.3B, OPUS-MT's big models), or every graph with `--external-data`, is written as
    encoder.onnx          the graph, with each initializer of at least INLINE_BYTES as a reference
                          (external_data: location "encoder.onnx.data", offset, length)
    encoder.onnx.data     those initializers' bytes, one after the other, each at an offset aligned to ALIGNMENT
The manifest lists the data file in `files` (its SHA-256 covers every byte) and names it in the variant's
`external_data` (runtime/external_data.py reads it: the runtime hands onnxruntime the weights itself).

A weight that several graphs of a variant hold (the embedding table of the encoder and of the decoder steps, the
positions' table) is written once, in the variant's shared data file (`share_weights`):
    fp32.shared.data      those weights, each once, at offsets aligned to ALIGNMENT; every graph that holds one
                          references it there (external_data: location "fp32.shared.data", offset, length)
and the runtime reads that file once and gives onnxruntime its bytes in place for every session that uses them.
"""
from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, List, Tuple

import onnx
from onnx.external_data_helper import set_external_data

from seq2onnx.runtime.package.external_data import FIELD
from seq2onnx.runtime.package.manifest import MAX_FILE_BYTES

DATA_SUFFIX = ".data"       # encoder.onnx -> encoder.onnx.data
INLINE_BYTES = 1024         # smaller initializers stay in the graph (onnx.save_model's size_threshold)
ALIGNMENT = 64              # each weight's offset: its numpy view over the data file's bytes is aligned for any dtype
SHARED_SUFFIX = ".shared.data"   # a variant's shared data file: "int8" -> int8.shared.data
SHARED_MIN_BYTES = 1 << 16       # a weight repeated across a variant's graphs is stored once from this size up


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


def variant_graphs(entry: Dict[str, Any]) -> List[str]:
    """The graph files of a variant's manifest entry: encoder, decoder step, and its few-rows step if it has one."""
    return [entry["encoder"], entry["decoder_step"]] + ([entry["few_rows"]["decoder_step"]]
                                                        if entry.get("few_rows") else [])


def add_external_data_fields(folder: Path, variants: Dict[str, Dict[str, Any]]) -> None:
    """Each variant's manifest entry gets external_data: {graph file: its data file} for its graphs that have one
    in `folder` (the runtime reads no data file the variant does not name)."""
    for entry in variants.values():
        names = {g: data_file(folder / g).name for g in variant_graphs(entry) if data_file(folder / g).exists()}
        if names:
            entry[FIELD] = names


def _same_bytes(tensor: onnx.TensorProto) -> Tuple[int, Tuple[int, ...], bytes]:
    """What makes two initializers one weight: data type, dims and the SHA-256 of their bytes (not their names)."""
    return tensor.data_type, tuple(tensor.dims), hashlib.sha256(tensor.raw_data).digest()


def share_weights(folder: Path, variants: Dict[str, Dict[str, Any]]) -> None:
    """Each weight of SHARED_MIN_BYTES or more that two or more graphs of a variant hold, once in the variant's
    shared data file (module doc), and the variant's external_data naming that file for the graphs that reference
    it. At vocab 32000 and d_model 512 that is the float32 embedding table (62.5 MiB) of fp32's encoder and decoder
    step, or int8's 15.6 MiB table of its encoder, step and few-rows step: on disk once, and in memory once
    (runtime/external_data.py). A variant whose graphs have data files of their own, or one with a graph that
    another variant also names, is left as it is."""
    named = Counter(g for entry in variants.values() for g in variant_graphs(entry))
    for variant, entry in variants.items():
        graphs = variant_graphs(entry)
        if entry.get(FIELD) or any(named[g] > 1 for g in graphs):
            continue
        models = {g: onnx.load(str(folder / g)) for g in graphs}
        keys = {}                                        # (graph, initializer index) -> _same_bytes, hashed once
        holders = defaultdict(set)                       # _same_bytes -> the graphs holding that weight
        for graph, model in models.items():
            for i, tensor in enumerate(model.graph.initializer):
                if tensor.HasField("raw_data") and len(tensor.raw_data) >= SHARED_MIN_BYTES:
                    keys[graph, i] = _same_bytes(tensor)
                    holders[keys[graph, i]].add(graph)
        shared = {key for key, where in holders.items() if len(where) > 1}
        if not shared:
            continue
        data_name, offsets, users = variant + SHARED_SUFFIX, {}, {}
        with open(folder / data_name, "wb") as out:
            for graph, model in models.items():
                for i, tensor in enumerate(model.graph.initializer):
                    key = keys.get((graph, i))
                    if key not in shared:
                        continue
                    if key not in offsets:
                        out.write(b"\0" * (-out.tell() % ALIGNMENT))
                        offsets[key] = out.tell()
                        out.write(tensor.raw_data)
                    set_external_data(tensor, data_name, offsets[key], len(tensor.raw_data))
                    tensor.data_location = onnx.TensorProto.EXTERNAL
                    tensor.ClearField("raw_data")        # onnx.save_model then writes the reference only
                    users[graph] = data_name
                onnx.save_model(model, str(folder / graph))
        entry[FIELD] = users
