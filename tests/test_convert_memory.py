"""seq2onnx convert holds a model's weights a bounded number of times (issue 54): the conversion's peak memory above
what its imports take stays within MAX_WEIGHT_COPIES times the float32 weights, on a model whose weights (~200 MB)
dwarf the rest, so that one more copy of them anywhere (a graph serialized whole, a session's prepacked weights, a
loader's mapped file beside its copy) shows. bench/convert.py measures the same at NLLB-200's real shapes.

The folder: bench/convert.py's NLLB-200-shaped one (vocabulary 256,206, random weights, length signal, EOS
calibrated) with one layer each side and d_model 192: its embedding table is 188 MiB of its 190.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))      # the repository root: `bench` package
from bench.convert import NLLB_600M, build_nllb_folder, parameters  # noqa: E402

SHAPE = dict(NLLB_600M, d_model=192, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=384, decoder_ffn_dim=384)
# the PyTorch model's weights (transformers' and the mapped model share them) and, at most, one more copy of them in
# onnxruntime's sessions or a graph being written; every other copy was removed (the convert before: 5x)
MAX_WEIGHT_COPIES = 2.0
# what a conversion may take besides weights: the parity and gate batches' activations at vocabulary 256,206
# ([rows, V] float32 log-probs, generate()'s scores), onnxruntime's arenas, the allocator's slack
SLACK_MIB = 200

CHILD = """
import json, re, sys
from pathlib import Path
def rss(key):
    return int(re.search(rf"^{key}:\\s+(\\d+) kB", Path("/proc/self/status").read_text(), re.M).group(1)) / 1024
import onnx, onnxruntime, torch, transformers                       # what every conversion imports, measured apart
from transformers import AutoModelForSeq2SeqLM, M2M100ForConditionalGeneration
from seq2onnx.export import commands, hf_convert, parity, quantize
from seq2onnx.runtime.cli import main
from seq2onnx.runtime.translator import Translator
base = rss("VmRSS")
code = main(["convert", *sys.argv[1:]])
print(json.dumps({"code": code, "base_mib": base, "peak_mib": rss("VmHWM")}))
"""


@pytest.fixture(scope="module")
def big_vocab_folder(tmp_path_factory) -> Path:
    return build_nllb_folder(tmp_path_factory.mktemp("memory") / "nllb-shaped", SHAPE)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
@pytest.mark.parametrize("flags", [[], ["--int8", "--skip-int8-validation"]], ids=["fp32", "int8"])
def test_conversion_peak_memory_is_bounded_by_the_weights(big_vocab_folder, tmp_path, flags):
    config = json.loads((big_vocab_folder / "config.json").read_text())
    weights_mib = parameters(config) * 4 / 2**20
    proc = subprocess.run([sys.executable, "-c", CHILD, str(big_vocab_folder), str(tmp_path / "out"), *flags],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    above = got["peak_mib"] - got["base_mib"]
    assert above <= MAX_WEIGHT_COPIES * weights_mib + SLACK_MIB, (
        f"peak {got['peak_mib']:.0f} MiB, {above:.0f} above the imports' {got['base_mib']:.0f}: "
        f"{above / weights_mib:.2f}x the {weights_mib:.0f} MiB of weights")
