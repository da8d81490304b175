"""Graphs whose weights lie in an external data file of the package (docs/CONTRACTS.md "Model package",
docs/SECURITY.md), for models past protobuf's 2 GB limit (NLLB-200 1.3B / 3.3B, OPUS-MT big).

The manifest lists each data file in `files` (so its SHA-256 covers every byte) and, per variant,
`external_data`: {graph file: its data file}. The runtime reads the data file once into memory and checks its
SHA-256 on exactly those bytes (ModelPackage.read_file), as it does for every file. Then onnxruntime gets the
graph's bytes and, for each initializer with external data, an OrtValue over its slice of those bytes
(SessionOptions.add_external_initializers), which onnxruntime copies into the session: the runtime makes no copy
of its own, lets go of the bytes once the session is built, and onnxruntime opens no file (for a graph given as
bytes it would look for the location relative to the working directory).

A data file that several graphs name (a variant's shared data file: export/graph_files.py share_weights, the
embedding table of its encoder and decoder steps) is read once per package, and on CPU its tensors go to every
session that uses them in place (SessionOptions.add_initializer: onnxruntime neither copies nor frees a buffer given
so; each session keeps the OrtValues it reads). onnxruntime then checks that each reference's location names a file
in the package folder (session.model_external_initializers_file_folder_path) and reads none of it: every external
tensor is given. On CUDA the weights go to the GPU: they are copied as above.

Every external tensor of the graph must be one of its main graph's initializers whose location is exactly the
data file the manifest names for that graph, with an offset and length inside that file that hold exactly its
dims x data_type bytes; anything else is one ModelPackageError line, before onnxruntime sees the graph.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import onnxruntime as ort

from ..errors import REEXPORT, ModelPackageError
from .onnx_bytes import ExternalTensor

FOLDER_KEY = "session.model_external_initializers_file_folder_path"   # onnxruntime's key (module doc)
MAX_DATA_BYTES = 1 << 40                # a data file: NLLB-200 3.3B's fp32 decoder is ~8 GB; 1 TiB bounds the field
FIELD = "external_data"                 # a variant's {graph file: data file} (manifest.json)
KEYS = ("location", "offset", "length", "checksum")     # onnx's external_data keys the runtime accepts
_NUMBER = re.compile(r"\d{1,20}", re.ASCII)
# onnx.proto TensorProto.DataType -> numpy dtype (the types onnxruntime's OrtValue takes from numpy)
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32, 7: np.int64,
          9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64}


@dataclass
class ExternalGraph:
    """A graph's bytes with its external initializers as OrtValues over `weights` (the data file's checked bytes).
    onnxruntime copies them into the session when it is built ("the data will be copied into the graph [...] the
    user provided buffers can then be deallocated": OrtApi::AddExternalInitializers), so open_session releases them
    then: the weights are in memory twice only while the session is built (an embedded graph's are three times:
    its bytes, the parsed ModelProto, the session's tensors)."""
    model: bytes
    weights: bytes
    names: List[str] = field(default_factory=list)
    values: List[Any] = field(default_factory=list)          # ort.OrtValue, one per name
    folder: Optional[Path] = None       # a data file several graphs name: the package folder (in place, module doc)
    in_place: bool = False              # session_options gave the weights in place

    def session_options(self, options: ort.SessionOptions, device: str = "cpu") -> ort.SessionOptions:
        """`options` with the weights added (they override the graph's external references): in place for a shared
        data file on CPU, else copied into the session."""
        self.in_place = bool(self.names) and self.folder is not None and device == "cpu"
        if self.in_place:
            options.add_session_config_entry(FOLDER_KEY, str(self.folder))
            for name, value in zip(self.names, self.values):
                options.add_initializer(name, value)
        elif self.names:
            options.add_external_initializers(self.names, self.values)
        return options

    def release(self, session: Any = None) -> None:
        """Let go of the weights once `session` is built: it copied them, or, in place, it keeps their OrtValues
        (and through them the data file's bytes) for as long as it lives."""
        if self.in_place and session is not None:
            session._seq2onnx_weights = self.values
        self.names, self.values, self.weights = [], [], b""


def read_variant_field(entry: Dict[str, Any], files: Dict[str, Any], graphs: List[str], where: Path,
                       field_name: str, known: Dict[str, str]) -> Dict[str, str]:
    """A variant's external_data: {graph file: data file}, each graph one of the variant's (`graphs`), each data
    file listed in `files` (a plain name of a checked size: manifest._check_files) and not a graph itself, and the
    one that `known` (the variants read before; updated) names for that graph; {} when absent."""
    value = entry.get(FIELD)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ModelPackageError(f"{where}: {field_name}[{FIELD!r}] should be an object {{graph file: data file}}, "
                                f"got {type(value).__name__}; {REEXPORT}")
    for graph, data in value.items():
        if graph not in graphs:
            raise ModelPackageError(f"{where}: {field_name}[{FIELD!r}] names {graph[:60]!r}, not a graph of this "
                                    f"variant ({', '.join(graphs)}); {REEXPORT}")
        if not isinstance(data, str) or data not in files or data in graphs:
            raise ModelPackageError(f"{where}: {field_name}[{FIELD!r}][{graph!r}] = {str(data)[:60]!r} is not a data "
                                    f"file listed in 'files'; {REEXPORT}")
        if known.setdefault(graph, data) != data:
            raise ModelPackageError(f"{where}: {field_name}[{FIELD!r}] gives {graph!r} the data file {data!r}, another "
                                    f"variant {known[graph]!r}: a graph has one data file; {REEXPORT}")
    return dict(value)


def external_graph(model: bytes, tensors: List[ExternalTensor], graph: Path, data_name: str,
                   weights: bytes, shared: bool = False) -> ExternalGraph:
    """The graph `model` (the bytes of the file `graph`) with its external tensors `tensors`
    (onnx_bytes.external_tensors) as OrtValues over `weights`, the checked bytes of its data file `data_name`;
    `shared`: other graphs name that file too (module doc: given in place on CPU)."""
    out = ExternalGraph(model, weights, folder=graph.parent if shared else None)
    view = memoryview(weights)
    seen = set()
    for t in tensors:
        what = f"{graph}: its tensor {t.name[:60]!r}"
        if not t.initializer:
            raise ModelPackageError(f"{what} keeps its data in an external file but is not an initializer of the "
                                    f"main graph: only those may; {REEXPORT}")
        entries = dict(t.entries)
        unknown = sorted(set(entries) - set(KEYS))
        if len(entries) != len(t.entries) or unknown:
            raise ModelPackageError(f"{what} has repeated or unknown external_data keys "
                                    f"({', '.join(k[:20] for k in unknown) or 'repeated'}); {REEXPORT}")
        location = entries.get("location")
        if location != data_name:
            raise ModelPackageError(f"{what} names the external data file {str(location)[:80]!r}, but the "
                                    f"manifest's data file for this graph is {data_name!r}: a graph reads only its "
                                    f"own data file in the package folder; {REEXPORT}")
        offset, length = entries.get("offset", "0"), entries.get("length")
        if not (_NUMBER.fullmatch(offset) and length is not None and _NUMBER.fullmatch(length)):
            raise ModelPackageError(f"{what} has external_data offset {offset[:30]!r} and length "
                                    f"{str(length)[:30]!r}: both must be decimal numbers; {REEXPORT}")
        offset_n, length_n = int(offset), int(length)
        if offset_n + length_n > len(weights):
            raise ModelPackageError(f"{what} lies at bytes {offset_n}..{offset_n + length_n} of {data_name}, which "
                                    f"has {len(weights)}: past its end; {REEXPORT}")
        dtype = DTYPES.get(t.data_type)
        if dtype is None or any(d < 0 for d in t.dims):
            raise ModelPackageError(f"{what} has data type {t.data_type} and dims {t.dims[:8]}, which external "
                                    f"data cannot hold here; {REEXPORT}")
        count = math.prod(t.dims)
        if count * np.dtype(dtype).itemsize != length_n:
            raise ModelPackageError(f"{what} has dims {t.dims[:8]} of {np.dtype(dtype).name} "
                                    f"({count * np.dtype(dtype).itemsize} bytes) but external_data length "
                                    f"{length_n}; {REEXPORT}")
        if t.name in seen:
            raise ModelPackageError(f"{what} is named twice among the external initializers; {REEXPORT}")
        seen.add(t.name)
        # a read-only view of the checked bytes: numpy and onnxruntime copy nothing (OrtValue keeps the array)
        array: np.ndarray = np.frombuffer(view[offset_n:offset_n + length_n], dtype=dtype).reshape(t.dims)
        out.names.append(t.name)
        out.values.append(ort.OrtValue.ortvalue_from_numpy(array))
    return out
