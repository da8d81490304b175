"""seq2onnx.runtime: torch-free decoding with numpy + onnxruntime + tokenizers.

`import seq2onnx.runtime` stays light: Translator and friends (which import onnxruntime)
load on first use.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Translator": "seq2onnx.runtime.translator",
    "TranslationResult": "seq2onnx.runtime.translator",
    "ScoringResult": "seq2onnx.runtime.translator",
    "DecodingOptions": "seq2onnx.runtime.options",
    "Hypothesis": "seq2onnx.runtime.decode.decoding",
    "ModelConfig": "seq2onnx.runtime.package.config",
    "Seq2OnnxError": "seq2onnx.runtime.errors",
    "ModelPackageError": "seq2onnx.runtime.errors",
    "OptionError": "seq2onnx.runtime.options",
    "translate_document": "seq2onnx.runtime.documents.translate",
    "translate_documents": "seq2onnx.runtime.documents.translate",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'seq2onnx.runtime' has no attribute {name!r}")
