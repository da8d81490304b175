"""Writing a graph file: its weights inside it, or in one data file beside it (ONNX external data).

A graph whose weights pass EXTERNAL_FROM_BYTES (NLLB-200 600M and up, M2M100 1.2B, OPUS-MT's big models; protobuf's
limit, runtime/package/manifest.py MAX_FILE_BYTES, is 2 GB), or every graph with `--external-data`, is written as
    encoder.onnx          the graph, with each initializer of at least INLINE_BYTES as a reference
                          (external_data: location "encoder.onnx.data", offset, length)
    encoder.onnx.data     those initializers' bytes, one after the other, each at an offset aligned to ALIGNMENT
The manifest lists the data file in `files` (its SHA-256 covers every byte) and names it in the variant's
`external_data` (runtime/package/external_data.py reads it: the runtime hands onnxruntime the weights itself).

A weight that several graphs of a variant hold (the embedding table of the encoder and of the decoder steps, the
positions' table) is written once, in the variant's shared data file (`share_weights`):
    fp32.shared.data      those weights, each once, at offsets aligned to ALIGNMENT; every graph that holds one
                          references it there (external_data: location "fp32.shared.data", offset, length)
and the runtime reads that file once and gives onnxruntime its bytes in place for every session that uses them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import onnx

from seq2onnx.runtime.package.manifest import MAX_FILE_BYTES
from seq2onnx.runtime.package.manifest_records import VariantRecord

DATA_SUFFIX = ".data"       # encoder.onnx -> encoder.onnx.data
INLINE_BYTES = 1024         # smaller initializers stay in the graph (onnx.save_model's size_threshold)
ALIGNMENT = 64              # each weight's offset: its numpy view over the data file's bytes is aligned for any dtype
SHARED_SUFFIX = ".shared.data"   # a variant's shared data file: "int8" -> int8.shared.data
SHARED_MIN_BYTES = 1 << 16       # a weight repeated across a variant's graphs is stored once from this size up
# a graph with more weights than this keeps them in its data file: onnxruntime maps a data file and holds each weight
# once, where an embedded graph's weights are in memory as the file's bytes, the parsed ModelProto and the session's
# tensors (runtime/package/external_data.py); NLLB-200 600M's fp32 encoder is 1.6 GB
EXTERNAL_FROM_BYTES = 1 << 30
COPY_CHUNK = 1 << 24             # save_graph copies a weight that stays in the data file in pieces of this size


def data_file(graph: Path) -> Path:
    """The data file of the graph file `graph`: the same folder, its name + DATA_SUFFIX."""
    return graph.with_name(graph.name + DATA_SUFFIX)


def external_bytes(model: onnx.ModelProto) -> int:
    """The bytes of `model`'s initializers that lie in a data file (onnx.load(..., load_external_data=False))."""
    return sum(int(_where(t)[2]) for t in model.graph.initializer if _is_external(t))


def too_big(model: onnx.ModelProto) -> bool:
    """Should `model` keep its weights outside: more than EXTERNAL_FROM_BYTES of them (in memory or in a data file),
    or past protobuf's limit?"""
    try:
        return model.ByteSize() + external_bytes(model) > min(MAX_FILE_BYTES, EXTERNAL_FROM_BYTES)
    except Exception:  # noqa: BLE001 - a protobuf build that cannot even size it: it is too big
        return True


def _is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == onnx.TensorProto.EXTERNAL


def _where(tensor: onnx.TensorProto) -> Tuple[str, int, int]:
    """An external tensor's (location, offset, length)."""
    info = {e.key: e.value for e in tensor.external_data}
    return info["location"], int(info.get("offset", 0)), int(info["length"])


def tensor_chunks(tensor: onnx.TensorProto, folder: Path, chunk: int = 0) -> Iterator[bytes]:
    """An initializer's bytes in pieces of `chunk` bytes (0: whole): its raw_data, or (external) read from its data
    file in `folder` piece by piece, so that a pass over the weights holds one piece at a time (a mapped file's pages
    would count as the process's memory for as long as it is mapped)."""
    if not _is_external(tensor):
        raw = tensor.raw_data
        for start in range(0, len(raw), chunk or max(1, len(raw))):
            yield raw[start:start + chunk] if chunk else raw
        return
    location, offset, length = _where(tensor)
    with open(Path(folder) / location, "rb") as f:
        f.seek(offset)
        for done in range(0, length, chunk or max(1, length)):
            yield f.read(min(chunk or length, length - done))


def save_graph(model: onnx.ModelProto, path: Path, external: bool = False,
               source_dir: Optional[Path] = None) -> Path:
    """Write `model` to `path`; with `external`, or when it is too_big, its initializers of INLINE_BYTES or more go
    into data_file(path) instead (written anew, tensor by tensor). Initializers may hold their bytes in memory
    (onnx.load) or still in a data file of the folder, data_file(path) itself or another graph's
    (onnx.load(..., load_external_data=False): a rewrite of the graph that did not need them), whose bytes are
    copied over in chunks, never all in memory. source_dir: the folder those data files lie in, where the graph was
    loaded from another folder than `path`'s. The model's tensors hold references instead of their bytes afterwards."""
    path = Path(path)
    data = data_file(path)
    old = data.with_name(data.name + ".old")
    source_dir = data.parent if source_dir is None or Path(source_dir).resolve() == data.parent.resolve() \
        else Path(source_dir)
    if source_dir == data.parent and any(_is_external(t) and _where(t)[0] == data.name
                                         for t in model.graph.initializer):
        os.replace(data, old)               # the bytes still to copy: read from there while the new file is written
    else:
        data.unlink(missing_ok=True)
    try:
        if external or too_big(model):
            _write_data(model, data, old, source_dir)
        else:
            for tensor in model.graph.initializer:
                if _is_external(tensor):    # a small graph: its bytes inside
                    tensor.raw_data = _read(_source(tensor, data, old, source_dir), *_where(tensor)[1:])
                    del tensor.external_data[:]
                    tensor.data_location = onnx.TensorProto.DEFAULT
        onnx.save_model(model, str(path))   # the graph alone: every marked tensor's bytes are written already
    finally:
        old.unlink(missing_ok=True)
    if data.exists():                       # readable as the graph is
        os.chmod(data, path.stat().st_mode & 0o777)
    return path


def _source(tensor: onnx.TensorProto, data: Path, old: Path, source_dir: Path) -> Path:
    """The file an external tensor's bytes are read from while data_file `data` is written anew: `old` (the former
    data file of that name), or the data file it names in source_dir (another graph's, e.g. the graph it was
    made from)."""
    location = _where(tensor)[0]
    if location == data.name and source_dir == data.parent:
        return old
    if Path(location).name != location or location in ("", ".", ".."):
        raise ValueError(f"{tensor.name}: external data location {location!r} is not a file beside the graph")
    return source_dir / location


def _read(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _write_data(model: onnx.ModelProto, data: Path, old: Path, source_dir: Path) -> None:
    """Each initializer of INLINE_BYTES or more into `data` at an ALIGNMENT offset, in the order of the graph: from
    memory, or copied in COPY_CHUNK pieces from the data file it lies in (_source)."""
    with open(data, "wb") as out:
        for tensor in model.graph.initializer:
            external = _is_external(tensor)
            size = _where(tensor)[2] if external else len(tensor.raw_data) if tensor.HasField("raw_data") else 0
            if size < INLINE_BYTES and not external:
                continue
            out.write(b"\0" * (-out.tell() % ALIGNMENT))
            offset = out.tell()
            if external:
                _, start, _ = _where(tensor)
                with open(_source(tensor, data, old, source_dir), "rb") as source:
                    source.seek(start)
                    for done in range(0, size, COPY_CHUNK):
                        out.write(source.read(min(COPY_CHUNK, size - done)))
            else:
                out.write(tensor.raw_data)
                tensor.ClearField("raw_data")
            del tensor.external_data[:]
            for key, value in (("location", data.name), ("offset", offset), ("length", size)):
                tensor.external_data.add(key=key, value=str(value))
            tensor.data_location = onnx.TensorProto.EXTERNAL


def remove_graph(path: Path) -> None:
    """Delete a graph file and its data file (an intermediate graph of the export)."""
    Path(path).unlink(missing_ok=True)
    data_file(Path(path)).unlink(missing_ok=True)


def variant_graphs(entry: Dict[str, Any]) -> List[str]:
    """The graph files of a variant's entry in a parsed manifest.json (VariantRecord.graphs: of a record)."""
    return [entry["encoder"], entry["decoder_step"]] + ([entry["few_rows"]["decoder_step"]]
                                                        if entry.get("few_rows") else [])


def add_external_data_fields(folder: Path, variants: Dict[str, VariantRecord]) -> Dict[str, VariantRecord]:
    """The variants, each with external_data: {graph file: its data file} for its graphs that have one in `folder`
    (the runtime reads no data file the variant does not name)."""
    out = {}
    for name, entry in variants.items():
        names = {g: data_file(folder / g).name for g in entry.graphs() if data_file(folder / g).exists()}
        out[name] = dataclasses.replace(entry, external_data=names) if names else entry
    return out


def _same_bytes(tensor: onnx.TensorProto, folder: Path) -> Tuple[int, Tuple[int, ...], bytes]:
    """What makes two initializers one weight: data type, dims and the SHA-256 of their bytes (not their names)."""
    digest = hashlib.sha256()
    for piece in tensor_chunks(tensor, folder, COPY_CHUNK):
        digest.update(piece)
    return tensor.data_type, tuple(tensor.dims), digest.digest()


def _nbytes(tensor: onnx.TensorProto) -> int:
    return _where(tensor)[2] if _is_external(tensor) else len(tensor.raw_data) if tensor.HasField("raw_data") else 0


def share_weights(folder: Path, variants: Dict[str, VariantRecord], merge: bool = True) -> Dict[str, VariantRecord]:
    """Each weight of SHARED_MIN_BYTES or more that two or more graphs of a variant hold, once in the variant's
    shared data file (module doc), and the variant's external_data naming that file for the graphs that reference
    it. At vocab 32000 and d_model 512 that is the float32 embedding table (62.5 MiB) of fp32's encoder and decoder
    step, or int8's 15.6 MiB table of its encoder, step and few-rows step: on disk once, and in memory once
    (runtime/package/external_data.py). A graph names one data file (docs/CONTRACTS.md), so where the variant's graphs
    have data files of their own (too_big) and `merge`, all their weights move into the shared file and theirs go:
    NLLB-200 600M's 1 GiB table is then on disk once, as in a package of embedded graphs; without `merge`
    (--external-data: a data file per graph, as asked) the variant is left as it is. The weights are copied piece
    by piece (tensor_chunks), never all in memory. A variant with a graph that another variant also names is left
    as it is. -> the variants, with the external_data of those that got a shared data file."""
    named = Counter(g for entry in variants.values() for g in entry.graphs())
    variants = dict(variants)
    for variant, entry in variants.items():
        graphs = entry.graphs()
        if any(named[g] > 1 for g in graphs) or (entry.external_data and not merge):
            continue
        own = dict(entry.external_data or {})            # graph -> its own data file (add_external_data_fields)
        if variant + SHARED_SUFFIX in own.values():      # shared already: its file is read, not written anew
            continue
        models = {g: onnx.load(str(folder / g), load_external_data=False) for g in graphs}
        keys = {}                                        # (graph, initializer index) -> _same_bytes, hashed once
        holders = defaultdict(set)                       # _same_bytes -> the graphs holding that weight
        for graph, model in models.items():
            for i, tensor in enumerate(model.graph.initializer):
                if _nbytes(tensor) >= SHARED_MIN_BYTES:
                    keys[graph, i] = _same_bytes(tensor, folder)
                    holders[keys[graph, i]].add(graph)
        shared = {key for key, where in holders.items() if len(where) > 1}
        if not shared:
            continue
        data_name, offsets, users = variant + SHARED_SUFFIX, {}, {}
        with open(folder / data_name, "wb") as out:
            for graph, model in models.items():
                for i, tensor in enumerate(model.graph.initializer):
                    key = keys.get((graph, i))
                    if key not in shared and not (graph in own and _is_external(tensor)):
                        continue
                    key = key if key in shared else (graph, i)
                    if key not in offsets:
                        out.write(b"\0" * (-out.tell() % ALIGNMENT))
                        offsets[key] = out.tell()
                        for piece in tensor_chunks(tensor, folder, COPY_CHUNK):
                            out.write(piece)
                    size = _nbytes(tensor)
                    tensor.ClearField("raw_data")        # onnx.save_model then writes the reference only
                    del tensor.external_data[:]
                    for name, value in (("location", data_name), ("offset", offsets[key]), ("length", size)):
                        tensor.external_data.add(key=name, value=str(value))
                    tensor.data_location = onnx.TensorProto.EXTERNAL
                    users[graph] = data_name
        for graph, model in models.items():
            onnx.save_model(model, str(folder / graph))
        for data in set(own.values()):
            (folder / data).unlink(missing_ok=True)
        os.chmod(folder / data_name, (folder / graphs[0]).stat().st_mode & 0o777)
        variants[variant] = dataclasses.replace(entry, external_data=users)
    return variants
