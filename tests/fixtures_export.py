"""Session fixture (a pytest plugin listed in conftest.py): the tiny checkpoint exported once.

`tiny_package` is the model package the runtime tests load: fp32 and int8 variants, written by the
real export pipeline (trace, check, parity, quantise, write), with the toy task's validation
sentences as real parity inputs. Treat it as read-only.
"""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_package(tiny_run) -> Path:
    """Path of the package exported with --int8 from `tiny_checkpoint`. `tiny_run` (fixtures_training.py) writes it
    (export_tiny_package): it trains on until the export's parity gates accept the model."""
    return tiny_run.parent / "package" / "model"
