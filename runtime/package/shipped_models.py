"""The model packages shipped inside the distribution (the repository's models/ folder, installed as
the data package `seq2onnx.models`), so a fresh `pip install .` of the checkout translates at once:

    Translator("numbers-en-de")            # a shipped model, by name
    seq2onnx translate numbers-en-de       # the same from the CLI

A path that exists always wins over a shipped name.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Union

PACKAGE = "seq2onnx.models"


def shipped_root() -> Path:
    """The folder holding the shipped packages (inside site-packages, or models/ in a checkout)."""
    from importlib.resources import files
    return Path(str(files(PACKAGE)))


def available_models() -> List[str]:
    """Names of the shipped model packages, e.g. ["numbers-en-de"]."""
    try:
        root = shipped_root()
    except (ImportError, TypeError):          # an install without the data package
        return []
    return sorted(p.name for p in root.iterdir() if (p / "manifest.json").is_file())


def resolve_model_dir(model_dir: Union[str, os.PathLike]) -> Path:
    """An existing path as given; else a shipped model's folder when `model_dir` is one's name."""
    path = Path(model_dir)
    if path.exists() or os.sep in str(model_dir) or "/" in str(model_dir):
        return path
    if str(model_dir) in available_models():
        return shipped_root() / str(model_dir)
    return path
