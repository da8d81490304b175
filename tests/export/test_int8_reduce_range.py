"""int8 weights are 7-bit (export/quantize.py REDUCE_RANGE): onnxruntime's int8 GEMM then sums exactly on AVX2
CPUs without VNNI as on AVX512/VNNI ones, so an int8 package gives the same integers on every x86 CPU."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests import REPO

SHIPPED = REPO / "models" / "numbers-en-de"


def _int8_weights(path: Path):
    """The int8 weights of the graph: the integer GEMMs' and the table that the embedding and the output projection
    read (export/quantize.py int8_embeddings), with its data from the variant's shared data file."""
    return [numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer
            if t.data_type == onnx.TensorProto.INT8]


@pytest.mark.parametrize("which", ["tiny", "shipped"])
def test_int8_weights_are_7_bit_and_the_manifest_says_so(which, request):
    folder = request.getfixturevalue("tiny_package") if which == "tiny" else SHIPPED
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    int8 = manifest["variants"]["int8"]
    assert int8["quantization"]["reduce_range"] is True
    for graph in (int8["encoder"], int8["decoder_step"]):
        weights = _int8_weights(folder / graph)
        assert weights, f"{graph} holds no int8 weights"
        # reduce_range, symmetric: |w| <= 64, so |a * w + a * w| <= 255 * 64 * 2 < 32767 and VPMADDUBSW's 16-bit
        # pair sums cannot saturate; each column's largest weight maps to 64 (8-bit weights would reach 127)
        assert max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == 64, graph
