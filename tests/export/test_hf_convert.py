"""seq2onnx convert (export/hf_convert.py) on tiny transformers folders built in the test (tests/hf_folders.py):
MarianMT with a joint vocabulary, with separate vocabularies and with target tags, M2M100 and NLLB.

Each converted package runs in the runtime at its own defaults (the generation_config it came with) and must
give transformers' generate() output: the same ids and text on real sentences, greedy and beam, and the same
scores within 1e-4 (tests/agreement.py's rule for ties: a different hypothesis passes only where its score and
transformers' are the same up to that tolerance). The converter's own gate (before anything is written) runs
on synthetic sources; these tests use real text, tokenized by each side's own tokenizer.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch

from tests.hf_folders import MARIAN_TAGS, gettext_pairs, hf_folders  # noqa: F401 - the fixture
from seq2onnx.export import hf_convert
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.translator import Translator
from seq2onnx.training.model import sinusoidal_positions

# transformers 5.23's M2M100Tokenizer writes the language tokens (__de__) and, as <unk>, the made-up words into
# decoded text even with skip_special_tokens; ours skips both, as its NllbTokenizer does: compare without them
M2M100_SPECIALS = re.compile(r"__[a-z]{2,3}__|<unk>")
SENTENCES = 80                  # real source sentences per kind and decoding (fast: the models are tiny)
SCORE_TOLERANCE = hf_convert.SCORE_TOLERANCE
# kind -> (translate_batch language options, transformers tokenizer options, generate() options)
LANGUAGES: Dict[str, Tuple[Dict[str, str], Dict[str, str], Dict[str, Any]]] = {
    "marian": ({}, {}, {}),
    "marian_separate": ({}, {}, {}),
    "marian_multilingual": ({"target_lang": "fra"}, {}, {}),
    "m2m100": ({"source_lang": "en", "target_lang": "de"}, {"src_lang": "en", "tgt_lang": "de"}, {"lang": "__de__"}),
    "nllb": ({"source_lang": "eng_Latn", "target_lang": "deu_Latn"}, {"src_lang": "eng_Latn"},
             {"lang": "deu_Latn"}),
}


@pytest.fixture(scope="session")
def converted(hf_folders, tmp_path_factory):  # noqa: F811
    """kind -> (the HF folder, the package converted from it); marian with --int8 through the CLI (a random model's
    int8 figures are measured and recorded, not held to the gate a trained model passes)."""
    out = tmp_path_factory.mktemp("converted")
    packages = {}
    for kind in LANGUAGES:
        folder = hf_folders.get(kind)
        if kind == "marian":
            proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "convert", str(folder),
                                   str(out / kind), "--int8", "--skip-int8-validation"], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-2000:]
        else:
            hf_convert.run_convert(hf_convert.ConvertOptions(folder, out / kind))
        packages[kind] = (folder, out / kind)
    return packages


def _sources(kind: str) -> List[str]:
    lang = "fr" if kind == "marian_multilingual" else "de"
    texts = [s for s, _ in gettext_pairs(lang)]
    return texts[-SENTENCES:]          # the last lines: the ones the SentencePiece models saw least


def _hf_generate(kind: str, folder: Path, texts: List[str], **options: Any):
    """transformers' own tokenizer and generate() at the folder's defaults -> (the source ids, per text (the ids
    without the decoder start and EOS, the score generate() ranks by: hf_convert.hf_generate), the decoded texts)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    _, tok_kwargs, gen = LANGUAGES[kind]
    tokenizer = AutoTokenizer.from_pretrained(str(folder), **tok_kwargs)
    model = AutoModelForSeq2SeqLM.from_pretrained(str(folder)).eval()
    if kind == "marian_multilingual":
        texts = [f"{MARIAN_TAGS['fra']} {t}" for t in texts]
    if "lang" in gen:
        options["forced_bos_token_id"] = tokenizer.convert_tokens_to_ids(gen["lang"])
    sources = tokenizer(texts)["input_ids"]
    out = hf_convert.hf_generate(model, sources, **options)
    texts = tokenizer.batch_decode([ids for ids, _ in out], skip_special_tokens=True)
    if kind == "m2m100":
        texts = [M2M100_SPECIALS.sub("", t).strip() for t in texts]
    return sources, out, texts


@pytest.mark.parametrize("kind, decoding", [(kind, decoding) for kind in LANGUAGES for decoding in ("defaults", "greedy")
                                            if not (kind == "nllb" and decoding == "greedy")])   # NLLB's defaults: greedy
def test_converted_model_equals_transformers(converted, kind, decoding):
    folder, pkg = converted[kind]
    texts = _sources(kind)
    lang_options = LANGUAGES[kind][0]
    greedy = decoding == "greedy"
    sources, theirs, their_texts = _hf_generate(kind, folder, texts, **({"num_beams": 1} if greedy else {}))
    translator = Translator(pkg, compute_type="float32")
    results = translator.translate_batch(texts, return_scores=True, **lang_options, **({"beam_size": 1} if greedy
                                                                                         else {}))
    prefix, _ = translator._languages(lang_options.get("source_lang"), lang_options.get("target_lang"))
    ours_sources = [prefix + translator.source_ids(t) for t in texts]
    same = [a == b for a, b in zip(ours_sources, sources)]
    assert sum(same) >= len(texts) - 1, "source ids differ from transformers'"      # export/hf_tokenizers.py
    beam = translator.package.generation["beam_size"] > 1 and not greedy
    identical = ties = 0
    for i, (r, (ids, score), text) in enumerate(zip(results, theirs, their_texts)):
        if not same[i]:
            continue
        mine = r.normalized_scores[0] if beam else r.scores[0]
        tolerance = hf_convert.score_tolerance(beam, len(ids))
        if r.token_ids[0] == ids:
            identical += 1
            assert r.hypotheses[0] == text, (kind, i)
            assert abs(mine - score) <= tolerance, (kind, i, mine, score)
        else:   # a tie: the two hypotheses score the same up to float32 rounding
            assert abs(mine - score) <= tolerance, (kind, i, r.token_ids[0], ids, mine, score)
            ties += 1
    assert identical >= len(texts) - 2, (identical, ties)
    lengths = [len(r.token_ids[0]) for r in results]
    assert min(lengths) < max(lengths)            # not one output for every input: the comparison can fail


def test_converted_manifest(converted):
    folder, pkg = converted["marian"]
    m = json.loads((pkg / "manifest.json").read_text())
    assert m["format_version"] == 4 and m["source_model"]["type"] == "marian"
    assert m["generation"]["beam_rules"] == "transformers" and m["generation"]["beam_size"] == 4
    assert m["config"]["activation"] == "swish" and m["config"]["sinusoid"] == "halves"
    gate = m["source_model"]["parity"]
    assert gate["greedy"]["identical"] + gate["greedy"]["ties"] == gate["greedy"]["sentences"] > 0
    int8 = m["variants"]["int8"]
    assert int8["status"] == "validation-skipped" and 0 < int8["parity"]["top1_agreement"] <= 1
    _, m2m = converted["m2m100"]
    m = json.loads((m2m / "manifest.json").read_text())
    assert m["languages"]["target_token"] == "forced_bos" and m["languages"]["source_token"] is True
    assert m["config"]["norm_first"] is True and m["config"]["position_offset"] == m["config"]["pad_id"] + 1


def test_language_errors_are_one_line(converted):
    _, pkg = converted["nllb"]
    translator = Translator(pkg)
    with pytest.raises(ValueError, match=r"target_lang 'xx_Yyyy' is not a target language of this model; it has "):
        translator.translate_batch(["Hello"], source_lang="eng_Latn", target_lang="xx_Yyyy")
    with pytest.raises(ValueError, match=r"target_lang is needed: this model translates into 202 languages"):
        translator.translate_batch(["Hello"], source_lang="eng_Latn")
    _, pkg = converted["marian"]
    with pytest.raises(ValueError, match=r"source_lang 'fr' is not a source language of this model; it has en "):
        Translator(pkg).translate_batch(["Hello"], source_lang="fr")


def test_sinusoid_layouts_are_transformers_tables(converted):
    """The layouts a fresh model builds (training/model.py) are the tables of the models converted from."""
    from transformers import AutoModelForSeq2SeqLM

    for kind, layout in (("marian", "halves"), ("m2m100", "fairseq")):
        folder, _ = converted[kind]
        model = AutoModelForSeq2SeqLM.from_pretrained(str(folder))
        table = model.get_encoder().embed_positions
        weights = table.weight if hasattr(table, "weight") else table.weights
        offset = 0 if kind == "marian" else model.config.pad_token_id + 1
        ours = sinusoidal_positions(200, model.config.d_model, layout, offset)
        assert torch.allclose(ours, weights[offset:offset + 200].float(), atol=2e-5), kind


def test_refusals_are_one_line_and_write_nothing(hf_folders, tmp_path):  # noqa: F811
    folder = hf_folders.get("marian")
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in folder.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    config = json.loads((folder / "config.json").read_text())
    cases = [({"model_type": "t5"}, r"model_type 't5' cannot be converted"),
             ({"activation_function": "tanh"}, r"activation_function 'tanh' is not supported"),
             ({"decoder_ffn_dim": 256}, r"encoder_ffn_dim \(128\) differs from decoder_ffn_dim \(256\)")]
    for change, message in cases:
        (bad / "config.json").write_text(json.dumps({**config, **change}))
        with pytest.raises(Seq2OnnxError, match=message):
            hf_convert.run_convert(hf_convert.ConvertOptions(bad, tmp_path / "out"))
        assert not (tmp_path / "out").exists()
    (bad / "config.json").write_text(json.dumps(config))
    gen = json.loads((folder / "generation_config.json").read_text())
    (bad / "generation_config.json").write_text(json.dumps({**gen, "do_sample": True}))
    with pytest.raises(Seq2OnnxError, match=r"generation_config.json sets do_sample=True"):
        hf_convert.run_convert(hf_convert.ConvertOptions(bad, tmp_path / "out"))
    (bad / "model.safetensors").unlink()
    with pytest.raises(Seq2OnnxError, match=r"has no weights \(model.safetensors or pytorch_model.bin\)"):
        hf_convert.run_convert(hf_convert.ConvertOptions(bad, tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_cli_translates_at_the_package_defaults(converted, tmp_path):
    """`seq2onnx translate` with no decoding flags decodes as generate() does (the package's defaults, not the
    CLI's own), and takes the target language as a flag."""
    _, pkg = converted["marian_multilingual"]
    texts = _sources("marian_multilingual")[:6]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "translate", str(pkg), "-i", str(src),
                           "--target-lang", "fra"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    expected = [r.hypotheses[0] for r in Translator(pkg).translate_batch(texts, target_lang="fra")]
    assert proc.stdout.splitlines() == expected
    proc = subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "translate", str(pkg), "-i", str(src),
                           "--target-lang", "xx"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--target-lang 'xx' is not a target language" \
        in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", ["marian", "marian_separate", "nllb"])
def test_mapped_model_holds_the_transformers_tensors_not_copies(hf_folders, kind):  # noqa: F811
    """The converter's model (transformer_from_hf) reads transformers' own tensors: every parameter's storage is one
    of the HF model's, so the conversion holds the weights once, ties stay tied (the output projection is
    the target embedding), and it computes what transformers computes."""
    folder = hf_folders.get(kind)
    config = hf_convert.read_config(folder)
    cfg = hf_convert.model_config(config)
    hf = hf_convert.load_hf_model(folder)
    model = hf_convert.transformer_from_hf(hf, cfg)
    theirs = {t.untyped_storage().data_ptr() for t in hf.state_dict().values()}
    for name, p in model.named_parameters():
        assert p.device.type == "cpu" and p.untyped_storage().data_ptr() in theirs, name
    assert (model.output_projection.weight is model.tgt_embed.weight) == cfg.tie_output_embedding
    assert model.pe.device.type == "cpu" and torch.isfinite(model.pe).all()
    eos = cfg.eos_id
    assert hf_convert.check_log_probs(hf, model, [[5, 9, 7, eos], [11, 4, eos]]) <= 1e-5


@pytest.mark.parametrize("vocab", [1000, 256206])
def test_greedy_scores_of_transformers_are_log_softmax_of_each_step(vocab):
    """The gate's greedy score of transformers' hypothesis: each step's processed logits' log-softmax, along the
    vocabulary (the contiguous axis: hf_convert.chosen_log_probs says why not compute_transition_scores), at the
    token taken; generate()'s sequences hold the decoder start, then one token a step. At NLLB's vocabulary too."""
    steps = 3
    gen = torch.Generator().manual_seed(0)
    scores = tuple(torch.randn(2, vocab, generator=gen) * 4 for _ in range(steps))
    scores[1][1, :7] = float("-inf")                     # processed logits: ids a processor suppressed
    sequences = torch.tensor([[2, 5, 9, 11], [2, 3, 8, 6]])
    got = hf_convert.chosen_log_probs(sequences, scores)
    assert got.shape == (2, steps) and got.dtype == torch.float32
    for t, step in enumerate(scores):
        for b in range(2):
            assert got[b, t] == step[b].log_softmax(-1)[sequences[b, t + 1]]
    exact = torch.stack([s.double().log_softmax(-1).gather(1, sequences[:, t + 1:t + 2])[:, 0]
                         for t, s in enumerate(scores)], dim=1)
    if vocab == 1000:                                    # a sum of 1,000 float32 terms: far within the gate's
        assert float((got.double() - exact).abs().max()) < hf_convert.SCORE_TOLERANCE / 100
