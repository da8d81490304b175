"""Issue 14, hostile model folders: a package is untrusted input. Whatever its manifest, tokenizer or graphs
hold, loading it either works or raises one ModelPackageError line naming the file and the field, at load;
nothing outside the folder is read, every byte used is covered by the manifest's checksums, and a broken
graph is reported, never turned into an empty or NaN translation. Each case edits a copy of the session's
real tiny package (docs/SECURITY.md lists what these tests hold the runtime to)."""
from __future__ import annotations

import numpy as np
import pytest

from seq2onnx.runtime.cli import main
from seq2onnx.runtime.errors import ModelPackageError
from seq2onnx.runtime.manifest import read_package
from seq2onnx.runtime.translator import Translator
from test_manifest import edit_manifest, pkg  # noqa: F401 - pkg: a copy of the tiny package, per test
from test_reliability_packages import relist

SOURCE = "three one four"


def refused(path, match, load=read_package):
    """`load(path)` raises one ModelPackageError line matching `match`; `seq2onnx info` says the same."""
    with pytest.raises(ModelPackageError, match=match) as e:
        load(path)
    assert "\n" not in str(e.value)
    return str(e.value)


def translator(path, **kwargs):
    return Translator(path, device="cpu", **kwargs)


def info_says(path, capsys, message):
    assert main(["info", str(path)]) == 2
    assert capsys.readouterr().err == f"seq2onnx info: error: {message}\n"


# --- item 4: the manifest is checked, whole, at load ---------------------------------------------------------
def _set(*keys_and_value):
    """An edit that sets manifest[k1][k2]... = value."""
    *keys, value = keys_and_value

    def change(m):
        for key in keys[:-1]:
            m = m[key]
        m[keys[-1]] = value(m[keys[-1]]) if callable(value) else value
    return change


FIELDS = [  # (edit, what the message must say)
    (_set("config", "decoder_layers", 10**9), r"decoder_layers must be an integer in \[1, 1024\], got 1000000000"),
    (_set("config", "decoder_layers", float), r"decoder_layers must be an integer in \[1, 1024\], got 2.0"),
    (_set("config", "vocab_size", float), r"vocab_size must be an integer in \[1, 16777216\], got \d+\.0"),
    (_set("config", "n_heads", 4.0), r"n_heads must be an integer"),
    (_set("config", "norm_first", 0), r"norm_first must be true or false, got 0"),
    (_set("config", "pad_id", True), r"pad_id must be an integer in \[0, 16777216\], got True"),
    (_set("config", "max_positions", 10**12), r"max_positions must be an integer in \[1, 1048576\]"),
    (_set("config", "layer_norm_eps", "1e-5"), r"layer_norm_eps must be a finite number"),
]


@pytest.mark.parametrize("change, message", FIELDS, ids=[m[:40] for _, m in FIELDS])
def test_every_field_is_checked_at_load_and_named(pkg, capsys, change, message):
    """Before: a hang (10**9 layers: 4e9 I/O names), a raw TypeError, or a load that passes and fails
    at the first translation."""
    edit_manifest(pkg, change)
    text = refused(pkg, message)
    assert text.startswith(f"{pkg / 'manifest.json'}: ")
    info_says(pkg, capsys, text)


@pytest.mark.parametrize("config", [dict(n_heads=2), dict(d_model=128), dict(n_heads=8, d_model=128)],
                         ids=["heads", "width", "heads-and-width"])
def test_config_that_lies_about_the_graph_is_refused_at_load(pkg, config):
    """Before: it loaded and every translation failed inside onnxruntime."""
    edit_manifest(pkg, lambda m: m["config"].update(config))
    refused(pkg, r"encoder.onnx: its cross_key_0 is tensor\(float\) \['batch', 4, 'src_len', 16\], the contract and "
                 r"the config \(n_heads \d, d_model \d+\) want tensor\(float\) or tensor\(float16\) \['\*', \d, '\*', "
                 r"\d+\]: the graph and the config do not belong together", load=translator)


# --- item 7: a decoder that returns NaN --------------------------------------------------------------------------
def nan_decoder(pkg):
    """decoder_step.onnx with its log_probs multiplied by NaN, re-checksummed."""
    import onnx
    from onnx import helper, numpy_helper
    path = pkg / "decoder_step.onnx"
    model = onnx.load(str(path))
    for node in model.graph.node:
        node.output[:] = ["log_probs_raw" if o == "log_probs" else o for o in node.output]
    model.graph.initializer.append(numpy_helper.from_array(np.array(np.nan, dtype=np.float32), "nan"))
    model.graph.node.append(helper.make_node("Mul", ["log_probs_raw", "nan"], ["log_probs"]))
    onnx.save(model, str(path))
    relist(pkg, "decoder_step.onnx")


@pytest.mark.parametrize("options", [dict(beam_size=1), dict(beam_size=4),
                                     dict(beam_size=1, sampling_topk=5, seed=1)], ids=["greedy", "beam4", "sampling"])
def test_decoder_returning_nan_is_reported(pkg, options):
    """Before: beam search gave an empty translation with score 0.0, greedy a score of nan, exit 0."""
    nan_decoder(pkg)
    tr = translator(pkg)
    with pytest.raises(ModelPackageError, match=f"^{pkg / 'decoder_step.onnx'} returned NaN or infinite log-probs: "
                                                f"the model package is broken"):
        tr.translate_batch([SOURCE], return_scores=True, **options)
