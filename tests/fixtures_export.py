"""Session fixture (a pytest plugin listed in conftest.py): the tiny checkpoint exported once.

`tiny_package` is the model package the runtime tests load: fp32 and int8 variants, written by the
real export pipeline (trace, check, parity, quantise, write), with the toy task's validation
sentences as real parity inputs. Treat it as read-only.

`package_graphs` stands in for the trace (export/onnx_export.py export_graphs) in the export tests whose
subject comes after it: a failing parity check, the write stage killed, another variant, external data. Each
trace of the tiny model costs 5-10 s of CPU (tens of seconds on 2 busy cores); the package's own export
(tiny_run) traces for real, and so do a random kill in export/test_export.py, the int8 variants' fused decoder steps,
scripts/test_checkpoint_from_package.py and export/test_row_lengths.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Tuple

import onnx
import pytest


@pytest.fixture(scope="session")
def tiny_package(tiny_run) -> Path:
    """Path of the package exported with --int8 from `tiny_checkpoint`. `tiny_run` (fixtures_training.py) writes it
    (export_tiny_package): it trains on until the export's parity gates accept the model."""
    return tiny_run.parent / "package" / "model"


def package_graphs(package: Path, trace_decoder: bool = False) -> Callable[..., Tuple[Path, Path]]:
    """export_graphs for the model `package` was exported from, at the export's opset and decoder format: the trace
    replaced by the package's fp32 graphs (what export_graphs wrote for that model), copied into out_dir and put
    through the step export_graphs takes after its trace (_fuse_projections: fusion, a no-op on these graphs, and
    with `external` the weights written into a data file beside each); with trace_decoder, only the encoder is
    copied and the decoder step is traced from the model given (one the test patched). What follows runs for real:
    the fp32 parity check of the graphs against the model given is what tells a copy that does not belong to it."""
    from seq2onnx.export import onnx_export
    from seq2onnx.runtime.package.manifest import read_package

    config = read_package(package).config

    def export_graphs(model, out_dir: Path, opset: int = onnx_export.DEFAULT_OPSET,
                      decoder_format: int = onnx_export.DECODER_FORMAT, external: bool = False,
                      meanwhile: Callable[[], None] = lambda: None) -> Tuple[Path, Path]:
        defaults = (onnx_export.DEFAULT_OPSET, onnx_export.DECODER_FORMAT)
        assert model.cfg == config and (opset, decoder_format) == defaults, (
            "package_graphs stands in for the export of the package's own model at the export's opset and format only")
        enc, dec = Path(out_dir) / onnx_export.ENCODER_FILE, Path(out_dir) / onnx_export.DECODER_FILE
        for path in (enc,) if trace_decoder else (enc, dec):     # weights inside, as a trace writes them
            onnx.save(onnx.load(str(package / path.name)), str(path))
            onnx_export._fuse_projections(path, external)
        if trace_decoder:
            import torch
            with torch.no_grad():                   # as export_graphs traces it
                onnx_export._export_decoder(model.float().eval(), dec, opset, decoder_format, external=external)
        meanwhile()
        return enc, dec

    return export_graphs
