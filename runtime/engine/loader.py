"""The engine for a resolved device: ArrayEngine (cpu.py) on CPU, IoBindingEngine (cuda.py) on CUDA, over the
sessions of a package's graphs (session.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Tuple, Union

import onnxruntime as ort

from ..package.config import ModelConfig
from ..package.external_data import ExternalGraph
from .cpu import ArrayEngine
from .session import SPINNING, GraphEngine, SessionConfig, open_session, return_free_heap


def open_engine(encoder_path: Path, decoder_path: Path, config: ModelConfig, sc: SessionConfig,
                cross_per_sentence: bool = False, read: Optional[Callable[[Path], Union[bytes, ExternalGraph]]] = None,
                decoder_format: Optional[int] = None, few_rows: Optional[Tuple[Path, int]] = None) -> GraphEngine:
    """The engine for a resolved device: ArrayEngine on CPU, IoBindingEngine on CUDA. read: the package's reader of a
    graph's checked bytes (ModelPackage.read_graph), called for each graph right before its session is built, so that
    one graph's bytes at a time are in memory (open_session lets go of them); None: onnxruntime reads the paths.
    decoder_format: the package's decoder contract (ModelPackage.decoder_format: the graphs must follow it); None:
    whichever the graph shows.
    few_rows: (path, max_rows) of a decoder step for steps of at most max_rows rows (the variant's few_rows, CPU
    only: ArrayEngine.use_few_rows)."""
    def session(path: Path, graph: str, version: Optional[int], spinning: Optional[str] = None) -> ort.InferenceSession:
        built = open_session(path, graph, config, sc, None if read is None else read(path), version, spinning)
        return_free_heap()                     # the graph's bytes and onnxruntime's parsed copies are free by now
        return built
    encoder = session(encoder_path, "encoder", decoder_format)
    decoder = session(decoder_path, "decoder_step", decoder_format)
    if sc.device == "cuda":
        from .cuda import IoBindingEngine     # only on CUDA
        return IoBindingEngine(encoder, decoder, config, "cuda", sc.device_id, sc.providers(), cross_per_sentence,
                               str(decoder_path), encoder_path=str(encoder_path), search_on_device=True)
    engine = ArrayEngine(encoder, decoder, config, cross_per_sentence, str(decoder_path), str(encoder_path),
                         copy_threads=sc.copy_threads())
    if few_rows is not None:
        path, max_rows = few_rows
        few_session = session(path, "decoder_step", engine.decoder_format, SPINNING["few_rows"])
        engine.use_few_rows(few_session, max_rows, path)
    return engine
