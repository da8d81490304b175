"""bench/real_shapes.py's pure helpers: NLLB-200's id layout given to a small tokenizer, and the forced target
language taken off the rows. Figures of a run are the benchmark's; these check the helpers do what they say."""
from __future__ import annotations

import sys

import pytest

from tests import REPO

sys.path.insert(0, str(REPO))      # the repository root: `bench` package

from bench.real_shapes import FILLER, failure, nllb_layout, strip_first  # noqa: E402


def _small_tokenizer():
    """What a small NllbTokenizer saves: 6 pieces, then <mask> and two language codes as added tokens."""
    added = [{"id": i, "content": t, "special": True} for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"])]
    added += [{"id": 6, "content": "<mask>", "special": True}, {"id": 7, "content": "deu_Latn", "special": True},
              {"id": 8, "content": "eng_Latn", "special": True}]
    return {"model": {"type": "BPE", "vocab": {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5}},
            "added_tokens": added,
            "post_processor": {"special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]},
                                                  "eng_Latn": {"id": "eng_Latn", "ids": [8], "tokens": ["eng_Latn"]}}}}


def test_nllb_layout_puts_fillers_then_the_codes_in_order_then_mask():
    small = _small_tokenizer()
    out = nllb_layout(small, ["deu_Latn", "eng_Latn"], first_code=10)
    assert out["model"]["vocab"] == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5,
                                     **{FILLER.format(i): i for i in range(6, 10)}}
    assert [(t["content"], t["id"]) for t in out["added_tokens"]] == [
        ("<s>", 0), ("<pad>", 1), ("</s>", 2), ("<unk>", 3), ("deu_Latn", 10), ("eng_Latn", 11), ("<mask>", 12)]
    specials = out["post_processor"]["special_tokens"]
    assert specials["eng_Latn"]["ids"] == [11] and specials["</s>"]["ids"] == [2]
    assert small["added_tokens"][-1]["id"] == 8                 # the input is left as it was


def test_nllb_layout_refuses_what_does_not_fit():
    with pytest.raises(ValueError, match="pieces"):
        nllb_layout(_small_tokenizer(), ["deu_Latn", "eng_Latn"], first_code=5)
    with pytest.raises(ValueError, match="eng_Latn"):                       # an added token it does not know
        nllb_layout(_small_tokenizer(), ["deu_Latn"], first_code=10)


def test_strip_first_takes_off_only_a_leading_forced_token():
    assert strip_first([[7, 1, 2], [1, 7], []], 7) == [[1, 2], [1, 7], []]
    assert strip_first([[7, 1]], None) == [[7, 1]]


def test_failure_names_the_error_line_not_the_peak_line():
    assert failure('[3/5] parity: ok\nseq2onnx convert: error: the gate refused\n{"peak_rss_mib": 12.5}') == \
        "seq2onnx convert: error: the gate refused"
    assert failure("killed\n") == "killed"
