"""Session fixture (a pytest plugin listed in conftest.py): the tiny checkpoint exported once.

`tiny_package` is the model package the runtime tests load: fp32 and int8 variants, written by the
real export pipeline (trace, check, parity, quantise, write), with the toy task's validation
sentences as real parity inputs. Treat it as read-only.
"""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_package(tiny_checkpoint, tiny_data_dir, tmp_path_factory) -> Path:
    """Path of a package exported with --int8 from `tiny_checkpoint` (fixtures_training.py)."""
    from seq2onnx.export.commands import ExportOptions, run_export

    out = tmp_path_factory.mktemp("tiny_package") / "model"
    run_export(ExportOptions(checkpoint=tiny_checkpoint, out_dir=out, int8=True,
                             parity_data=tiny_data_dir / "valid.tsv"))
    return out
