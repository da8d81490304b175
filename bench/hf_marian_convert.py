"""A really trained HF MarianMTModel, converted by `seq2onnx convert`, against transformers.

    python bench/hf_marian_convert.py data               # gettext en->de split, SentencePiece, MarianTokenizer
    python bench/hf_marian_convert.py train --minutes 20 # MarianMTModel, plain PyTorch loop; resumes if killed
    python bench/hf_marian_convert.py convert            # seq2onnx convert --int8 (export/hf_convert.run_convert)
    python bench/hf_marian_convert.py quality            # generate() vs our Translator on the test set
    python bench/hf_marian_convert.py speed              # transformers, Optimum, CTranslate2 and ours, one run
    python bench/hf_marian_convert.py all --minutes 20   # data, train, convert, quality (not speed)

Every step writes under --work (default bench/.cache/hf_marian_convert/, git-ignored) and skips what is
already there (`--force` redoes the step), so the steps can be run one at a time, and a killed training
resumes from its last checkpoint.

  data     `seq2onnx data gettext --lang de` (training/gettext_data.py): English msgids -> German msgstrs, split
           by a hash of the source. Two SentencePiece unigram models (nmt_nfkc, as OPUS-MT's), source.spm on the
           English side and target.spm on the German side of the training pairs, SPM_VOCAB pieces each, one
           joint vocab.json and MarianTokenizer's files: the OPUS-MT layout (tests/hf_folders.py writes it).
  train    MarianMTModel (MODEL below: d_model 128, 3+3 layers, 4 heads, FFN 512, swish, sinusoids, embeddings
           scaled by sqrt(d_model), shared and tied), AdamW with the inverse-sqrt warm-up (noam_lr), label
           smoothing 0.1, batches of --max-tokens padded tokens (training/data.py's BatchStream), gradient
           clip 1.0, for --minutes of wall clock (training time only: the checkpoint records it). It
           save_pretrained's the model with a generation_config like OPUS-MT's (GENERATION). The machine's
           cores are shared with other work while it trains: its speed is no benchmark.
  convert  run_convert(--int8) into work/package: our model package, gated against transformers itself.
  quality  the first TEST_SENTENCES test pairs (every k-th): transformers' generate() one sentence at a time at
           the model's defaults (beam 4) and greedy (num_beams=1), against our Translator on the same source
           ids at its package defaults (beam 4) and beam_size=1: identical token sequences, ties (different
           tokens, scores within SCORE_TOLERANCE), then chrF and BLEU (sacrebleu) of each system's detokenized
           text, and of our int8 variant. Writes bench/results/hf_marian_convert_quality.json.
  speed    on the test sources: transformers (torch, 2 threads), Optimum ORTModelForSeq2SeqLM fp32 and int8 (its
           own dynamic quantizer, in bench/optimum_worker.py's overlay venv), CTranslate2 from
           `TransformersConverter(folder)` (float32 and int8) and ours fp32 and int8, interleaved in rounds
           (bench/measure.py), at batch 1 greedy and batch 16 beam 4, each system at the model's generation
           settings (max length 256, bad_words [pad], forced EOS; CTranslate2 has no renormalize). Sentences/s
           and the ratio to ours. Writes bench/results/hf_marian_convert.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WORK = ROOT / "bench" / ".cache" / "hf_marian_convert"
RESULTS = ROOT / "bench" / "results"
LANG = "de"
SPM_VOCAB = 5000              # pieces of each SentencePiece model; the joint vocabulary is their union
MAX_LEN = 128                 # training pairs longer than this (tokens, EOS included) on either side are left out
# the model: small enough to learn something in ~20 minutes on 2 cores shared with other work (d_model 256 ran
# at ~11 s a step of 2048 tokens there: ~110 steps in 20 minutes, too few to stop its outputs looping)
MODEL = dict(d_model=128, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=512, decoder_ffn_dim=512, activation_function="swish", max_position_embeddings=512,
             scale_embedding=True, share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
             dropout=0.1, attention_dropout=0.0, activation_dropout=0.0)
# Helsinki-NLP/opus-mt-en-de's generation_config, max_length 256 (theirs: 512)
GENERATION = dict(num_beams=4, renormalize_logits=True, max_length=256)
RECIPE = dict(warmup_steps=400, lr_factor=0.7, max_tokens=2048, label_smoothing=0.1, clip_norm=1.0, betas=(0.9, 0.98), eps=1e-9,
              weight_decay=0.01, seed=1)
CHECKPOINT_SECONDS = 60       # a checkpoint at least this often (and at the end)
VALID_INTERVAL = 250          # steps
TEST_SENTENCES = 500


def paths(work: Path) -> Dict[str, Path]:
    return {"data": work / "data", "spm": work / "spm", "train": work / "train", "model": work / "model",
            "package": work / "package"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def read_split(work: Path, split: str) -> List[Tuple[str, str]]:
    from seq2onnx.training.data import read_tsv
    return read_tsv(str(paths(work)["data"] / f"{split}.tsv"))[0]


def test_pairs(work: Path, n: int) -> List[Tuple[str, str]]:
    """n pairs of the test split, every k-th (the split is sorted by text)."""
    pairs = read_split(work, "test")
    step = max(1, len(pairs) / n) if n < len(pairs) else 1
    return [pairs[int(i * step)] for i in range(min(n, len(pairs)))]


# --- 1. data ----------------------------------------------------------------------------------------------
def step_data(work: Path, force: bool) -> None:
    from seq2onnx.training.gettext_data import write_gettext_data
    from tests.hf_folders import train_spm, write_marian_tokenizer

    p = paths(work)
    if force or not (p["data"] / "test.tsv").exists():
        counts, report = write_gettext_data(p["data"], LANG, overwrite=True)
        log(f"data: gettext {LANG}: {counts} pairs from {len(report.files)} catalogs")
    if not force and (p["spm"] / "tokenizer_config.json").exists():
        log(f"data: {p['spm']} exists")
        return
    pairs = read_split(work, "train")
    start = time.perf_counter()
    src_spm = train_spm([s for s, _ in pairs], "unigram", SPM_VOCAB)
    tgt_spm = train_spm([t for _, t in pairs], "unigram", SPM_VOCAB)
    tmp = p["spm"].with_name("spm.tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    vocab, _ = write_marian_tokenizer(tmp, src_spm, tgt_spm, target_lang=LANG)
    if p["spm"].exists():
        import shutil
        shutil.rmtree(p["spm"])
    tmp.rename(p["spm"])
    log(f"data: SentencePiece {SPM_VOCAB} + {SPM_VOCAB} pieces, joint vocabulary {len(vocab)} "
        f"({time.perf_counter() - start:.0f}s) -> {p['spm']}")


# --- 2. train ---------------------------------------------------------------------------------------------
def load_tokenizer(folder: Path):
    from transformers import MarianTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    import warnings
    warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
    return MarianTokenizer.from_pretrained(str(folder))


def encode(tok, pairs: Sequence[Tuple[str, str]]):
    """MarianTokenizer ids -> training/data.py Examples (source + EOS, target without EOS), long pairs left out."""
    from seq2onnx.training.data import Example

    src = tok([s for s, _ in pairs])["input_ids"]
    tgt = tok(text_target=[t for _, t in pairs])["input_ids"]          # each ends with EOS
    return [Example(list(s), list(t[:-1])) for s, t in zip(src, tgt) if len(s) <= MAX_LEN and len(t) <= MAX_LEN]


def new_model(tok):
    import torch
    from transformers import MarianConfig, MarianMTModel

    pad, eos = tok.pad_token_id, tok.eos_token_id
    config = MarianConfig(vocab_size=len(tok.encoder), decoder_vocab_size=len(tok.encoder), **MODEL,
                          pad_token_id=pad, eos_token_id=eos, bos_token_id=eos, decoder_start_token_id=pad,
                          forced_eos_token_id=eos)
    torch.manual_seed(RECIPE["seed"])
    return MarianMTModel(config)


def generation_config(tok):
    from transformers import GenerationConfig
    pad, eos = tok.pad_token_id, tok.eos_token_id
    return GenerationConfig(**GENERATION, bad_words_ids=[[pad]], forced_eos_token_id=eos, bos_token_id=eos,
                            eos_token_id=eos, pad_token_id=pad, decoder_start_token_id=pad)


def _save_atomic(obj, path: Path) -> None:
    import torch
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def step_train(work: Path, minutes: float, force: bool) -> None:
    import torch

    from bench.base_model import atomic_folder
    from bench.train_quality import MarianAdapter
    from seq2onnx.training.data import BatchStream
    from seq2onnx.training.evaluate import validation_loss
    from seq2onnx.training.optim import label_smoothed_loss, noam_lr

    p = paths(work)
    ckpt_path = p["train"] / "checkpoint.pt"
    if force:
        import shutil
        shutil.rmtree(p["train"], ignore_errors=True)
        shutil.rmtree(p["model"], ignore_errors=True)
    # one thread: on cores shared with other work, two of torch's threads wait on each other and a step takes many
    # times as long (bench/results/shared-machine.md)
    torch.set_num_threads(1)
    tok = load_tokenizer(p["spm"])
    model = new_model(tok)
    params = list({id(q): q for q in model.parameters()}.values())     # tied weights once
    optimizer = torch.optim.AdamW(params, lr=1.0, betas=RECIPE["betas"], eps=RECIPE["eps"],
                                  weight_decay=RECIPE["weight_decay"])
    d_model = MODEL["d_model"]
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda done: noam_lr(done + 1, d_model, RECIPE["warmup_steps"], RECIPE["lr_factor"]))
    ids = {"pad_id": tok.pad_token_id, "bos_id": tok.pad_token_id, "eos_id": tok.eos_token_id}  # bos: decoder start
    stream = BatchStream(encode(tok, read_split(work, "train")), RECIPE["max_tokens"], RECIPE["seed"], ids)
    valid = encode(tok, read_split(work, "valid"))
    adapter = MarianAdapter(model, SimpleNamespace(**ids))
    state = {"step": 0, "seconds": 0.0, "log": []}
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        stream.load_state_dict(ckpt["stream"])
        torch.set_rng_state(ckpt["rng"])
        state = ckpt["state"]
        log(f"train: resumed at step {state['step']}, {state['seconds'] / 60:.1f} min trained")
    if state["seconds"] >= 60 * minutes and (p["model"] / "model.safetensors").exists():
        log(f"train: done ({state['step']} steps, {state['seconds'] / 60:.1f} min) -> {p['model']}")
        return
    p["train"].mkdir(parents=True, exist_ok=True)

    def checkpoint():
        _save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "scheduler": scheduler.state_dict(), "stream": stream.state_dict(),
                      "rng": torch.get_rng_state(), "state": state}, ckpt_path)

    def validate():
        with torch.no_grad():
            v = validation_loss(adapter, valid, RECIPE["max_tokens"], RECIPE["label_smoothing"])
        state["log"].append({"step": state["step"], "minutes": state["seconds"] / 60, "valid_loss": v["loss"],
                             "valid_nll": v["nll_loss"]})
        log(f"train: step {state['step']} ({state['seconds'] / 60:.1f} min): valid loss {v['loss']:.3f} "
            f"nll {v['nll_loss']:.3f}")

    def zero_pad_row():
        # OPUS-MT's <pad> row is zero (Marian starts the decoder from a zero embedding; CTranslate2 relies on
        # it): the tied output projection's gradient would move it, so it is reset after every update
        with torch.no_grad():
            model.model.shared.weight[ids["pad_id"]].zero_()

    zero_pad_row()
    model.train()
    last_ckpt = time.monotonic()
    window, tokens = [], 0
    while state["seconds"] < 60 * minutes:
        t0 = time.monotonic()
        b = stream.next()
        loss, _ = label_smoothed_loss(adapter(b.src_ids, b.src_mask, b.tgt_in), b.labels, ids["pad_id"],
                                      RECIPE["label_smoothing"])
        (loss / b.n_tokens).backward()
        torch.nn.utils.clip_grad_norm_(params, RECIPE["clip_norm"])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        zero_pad_row()
        state["step"] += 1
        state["seconds"] += time.monotonic() - t0
        window.append(loss.item() / b.n_tokens)
        tokens += b.n_tokens
        if state["step"] % 50 == 0:
            log(f"train: step {state['step']} ({state['seconds'] / 60:.1f} min): loss {sum(window) / len(window):.3f}"
                f", lr {scheduler.get_last_lr()[0]:.2e}")
            window = []
        if state["step"] % VALID_INTERVAL == 0:
            validate()
        if time.monotonic() - last_ckpt >= CHECKPOINT_SECONDS:
            checkpoint()
            last_ckpt = time.monotonic()
    validate()
    checkpoint()
    model.eval()
    model.generation_config = generation_config(tok)

    def write(folder: Path) -> None:
        model.save_pretrained(str(folder), safe_serialization=True)
        tok.save_pretrained(str(folder))
        (folder / "training.json").write_text(json.dumps(
            {"model": MODEL, "recipe": RECIPE, "spm_vocab": SPM_VOCAB, "steps": state["step"],
             "minutes": state["seconds"] / 60, "valid": state["log"]}, indent=2) + "\n")
    atomic_folder(p["model"], write)
    log(f"train: {state['step']} steps, {state['seconds'] / 60:.1f} min -> {p['model']}")


# --- 3. convert -------------------------------------------------------------------------------------------
def step_convert(work: Path, force: bool, int8_validation: bool = True) -> None:
    from seq2onnx.export.commands import summary
    from seq2onnx.export.hf_convert import ConvertOptions, run_convert

    p = paths(work)
    if not force and (p["package"] / "manifest.json").exists():
        log(f"convert: {p['package']} exists")
        return
    parity = work / "parity_sources.txt"
    parity.write_text("".join(s + "\n" for s, _ in read_split(work, "valid")[:64]), encoding="utf-8")
    result = run_convert(ConvertOptions(p["model"], p["package"], int8=True, overwrite=True, parity_data=parity,
                                        int8_validation=int8_validation), log=log)
    log(summary(result))


# --- 4. quality -------------------------------------------------------------------------------------------
def _hf_generate(hf, src: List[int], beam: int):
    """generate() of one source at the model's generation_config, num_beams=beam -> (tokens, score): the
    tokens without the decoder start and EOS, the score transformers ranks by (beam: sequences_score; greedy:
    the sum of the chosen tokens' processed log-probs)."""
    import torch

    from seq2onnx.export.hf_convert import hf_tokens

    ids = torch.tensor([src])
    out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beam, do_sample=False,
                      output_scores=True, return_dict_in_generate=True)
    tokens = hf_tokens(out.sequences, hf.generation_config.eos_token_id)[0]
    if beam > 1:
        return tokens, float(out.sequences_scores[0])
    chosen = out.sequences[0, 1:]
    return tokens, float(sum(step[0, t] for step, t in zip(out.scores, chosen.tolist())))


def step_quality(work: Path, n: int) -> Dict[str, Any]:
    import torch
    from transformers import MarianMTModel

    from seq2onnx.export.hf_convert import SCORE_TOLERANCE
    from seq2onnx.runtime.translator import Translator
    from seq2onnx.training.evaluate import translation_metrics

    p = paths(work)
    torch.set_num_threads(1)            # a correctness check, not timed: one thread suffers least on shared cores
    tok = load_tokenizer(p["model"])
    hf = MarianMTModel.from_pretrained(str(p["model"])).eval()
    pairs = test_pairs(work, n)
    texts, refs = [s for s, _ in pairs], [t for _, t in pairs]
    sources = tok(texts)["input_ids"]
    fp32 = Translator(p["package"], device="cpu", compute_type="float32", intra_threads=1)
    int8 = Translator(p["package"], device="cpu", compute_type="int8", intra_threads=1)
    default_beam = json.loads((p["model"] / "generation_config.json").read_text())["num_beams"]
    out: Dict[str, Any] = {"test_sentences": len(pairs), "model": json.loads((p["model"] / "training.json").read_text()),
                           "score_tolerance": SCORE_TOLERANCE, "default_num_beams": default_beam,
                           "source_ids_equal_marian_tokenizer": sum(fp32.source_ids(t) == s
                                                                    for t, s in zip(texts, sources)),
                           "modes": {}}
    for mode, beam in (("greedy", 1), (f"beam{default_beam}", default_beam)):
        start = time.perf_counter()
        theirs = []
        with torch.no_grad():
            for src in sources:
                theirs.append(_hf_generate(hf, src, beam))
        hf_s = time.perf_counter() - start
        kwargs = {} if beam == default_beam else {"beam_size": beam}    # else the package's defaults
        mine = fp32.translate_ids(sources, **kwargs)
        identical = ties = 0
        worst = 0.0
        differ = []
        for i, ((t_tokens, t_score), hyps) in enumerate(zip(theirs, mine)):
            h = hyps[0]
            score = h.normalized_score if beam > 1 else h.score
            diff = abs(score - t_score)
            if list(h.tokens) == t_tokens:
                identical += 1
                worst = max(worst, diff)
            elif diff <= SCORE_TOLERANCE:
                ties += 1
            else:
                differ.append({"index": i, "score_diff": diff, "ours": list(h.tokens), "transformers": t_tokens})
        hf_text = tok.batch_decode([t for t, _ in theirs], skip_special_tokens=True)
        fp32_res = fp32.translate_batch(texts, **kwargs)              # our tokenizers, end to end
        our_text = [r.hypotheses[0] for r in fp32_res]
        int8_res = int8.translate_batch(texts, **kwargs)
        int8_text = [r.hypotheses[0] for r in int8_res]
        same_text = sum(a == b for a, b in zip(hf_text, our_text))
        row = {"identical": identical, "ties": ties, "different": len(differ), "max_score_diff_identical": worst,
               "differences": differ[:10], "text_identical": same_text,
               "end_to_end_tokens_identical": sum(r.token_ids[0] == t for r, (t, _) in zip(fp32_res, theirs)),
               "transformers": translation_metrics(hf_text, refs), "ours_fp32": translation_metrics(our_text, refs),
               "ours_int8": translation_metrics(int8_text, refs),
               "int8_tokens_equal_fp32": sum(a.token_ids[0] == list(b[0].tokens) for a, b in zip(int8_res, mine)),
               "transformers_seconds_one_at_a_time": hf_s,
               "examples": [{"source": texts[i], "reference": refs[i], "transformers": hf_text[i],
                             "ours_fp32": our_text[i], "ours_int8": int8_text[i]} for i in range(0, len(texts), 100)]}
        out["modes"][mode] = row
        log(f"quality {mode}: {identical}/{len(pairs)} identical, {ties} ties, {len(differ)} different; "
            f"text identical {same_text}; chrF/BLEU transformers {row['transformers']['chrf']:.2f}/"
            f"{row['transformers']['bleu']:.2f}, ours {row['ours_fp32']['chrf']:.2f}/{row['ours_fp32']['bleu']:.2f}, "
            f"int8 {row['ours_int8']['chrf']:.2f}/{row['ours_int8']['bleu']:.2f}")
    return out


def write_quality(out: Dict[str, Any], results: Path) -> None:
    import transformers

    import seq2onnx.runtime as rt
    out["versions"] = {"transformers": transformers.__version__, "seq2onnx": rt.__version__}
    results.mkdir(parents=True, exist_ok=True)
    (results / "hf_marian_convert_quality.json").write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n",
                                                             encoding="utf-8")
    (results / "hf_marian_convert_quality.md").write_text(quality_markdown(out) + "\n", encoding="utf-8")
    log(quality_markdown(out))
    log(f"quality -> {results / 'hf_marian_convert_quality.json'} and .md")


def quality_markdown(out: Dict[str, Any]) -> str:
    m, n = out["model"], out["test_sentences"]
    cfg = m["model"]
    lines = ["# A trained MarianMTModel through `seq2onnx convert`: tokens and scores against transformers", "",
             f"gettext en->de (training/gettext_data.py), MarianMTModel d_model {cfg['d_model']}, "
             f"{cfg['encoder_layers']}+{cfg['decoder_layers']} layers, FFN {cfg['encoder_ffn_dim']}, "
             f"{cfg['activation_function']}, SentencePiece unigram {m.get('spm_vocab')} + {m.get('spm_vocab')} (OPUS-MT "
             f"layout), trained {m['steps']} steps ({m['minutes']:.0f} min on 2 cores shared with other work; final "
             f"validation loss {m['valid'][-1]['valid_loss']:.3f}). {n} test sentences (every k-th of the split), "
             f"transformers {out['versions']['transformers']} generate() one sentence at a time at the model's "
             f"generation_config, against seq2onnx's Translator at the package's defaults (greedy: beam_size=1) on "
             f"the same source ids. Our source tokenizer gives MarianTokenizer's ids on "
             f"{out['source_ids_equal_marian_tokenizer']}/{n}. Tie: different tokens, scores within "
             f"{out['score_tolerance']:g}.", "",
             "| decoding | identical tokens | ties | different | max score diff (identical) | end to end (our "
             "tokenizer) identical | text identical | chrF transformers / ours fp32 / ours int8 | BLEU transformers "
             "/ ours fp32 / ours int8 | int8 tokens = fp32 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, r in out["modes"].items():
        chrf = " / ".join(f"{r[k]['chrf']:.2f}" for k in ("transformers", "ours_fp32", "ours_int8"))
        bleu = " / ".join(f"{r[k]['bleu']:.2f}" for k in ("transformers", "ours_fp32", "ours_int8"))
        lines.append(f"| {mode} | {r['identical']}/{n} | {r['ties']} | {r['different']} | "
                     f"{r['max_score_diff_identical']:.2g} | {r['end_to_end_tokens_identical']}/{n} | "
                     f"{r['text_identical']}/{n} | {chrf} | {bleu} | {r['int8_tokens_equal_fp32']}/{n} |")
    return "\n".join(lines)


# --- 5. speed ---------------------------------------------------------------------------------------------
SPEED_CASES = (("batch 1 greedy", 1, 1), ("batch 16 beam 4", 16, 4))    # (name, batch, beam), as bench/run.py's
SPEED_SENTENCES = 96          # test sources each case decodes per round (batch 16: 6 batches)
THREADS = 2                   # intra-op threads of every system (bench/README.md)


class Speed:
    """One system at one precision: run(batches, beam) -> (best tokens of each source, without the decoder start
    and EOS; seconds of the decoding calls alone). Each decodes at the model's generation settings; where a model
    forces its first target token (NLLB's target language: forced_bos), every system is given it and the rows keep
    it (bench/real_shapes.py strips it)."""
    name, precision = "?", "fp32"

    def run(self, batches: List[List[List[int]]], beam: int) -> Tuple[List[List[int]], float]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class OursSpeed(Speed):
    def __init__(self, package: Path, precision: str, forced_bos_id: Optional[int] = None):
        from bench.engines import Seq2OnnxRuntime
        from seq2onnx.runtime.translator import Translator
        self.name, self.precision = f"seq2onnx {precision}", precision
        self.translator = Translator(package, device="cpu", compute_type=Seq2OnnxRuntime.COMPUTE_TYPES[precision],
                                     intra_threads=THREADS, inter_threads=1)
        self.extra = {} if forced_bos_id is None else {"forced_bos_id": forced_bos_id}

    def run(self, batches, beam):
        tokens, seconds = [], 0.0
        for batch in batches:
            start = time.perf_counter()
            out = self.translator.translate_ids(batch, max_batch_size=len(batch), beam_size=beam, **self.extra)
            seconds += time.perf_counter() - start
            tokens += [list(hyps[0].tokens) for hyps in out]
        return tokens, seconds


class TransformersSpeed(Speed):
    name = "HF transformers (torch)"

    def __init__(self, model_dir: Path, forced_bos_id: Optional[int] = None):
        import torch
        from transformers import AutoModelForSeq2SeqLM
        torch.set_num_threads(THREADS)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(str(model_dir)).eval()
        self.pad, self.eos = self.model.config.pad_token_id, self.model.generation_config.eos_token_id
        self.extra = {} if forced_bos_id is None else {"forced_bos_token_id": forced_bos_id}

    def run(self, batches, beam):
        import torch

        from seq2onnx.export.hf_convert import hf_tokens
        tokens, seconds = [], 0.0
        for batch in batches:
            width = max(len(s) for s in batch)
            ids = torch.tensor([s + [self.pad] * (width - len(s)) for s in batch])
            mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch])
            start = time.perf_counter()
            with torch.inference_mode():
                out = self.model.generate(input_ids=ids, attention_mask=mask, num_beams=beam, do_sample=False,
                                          **self.extra)
            seconds += time.perf_counter() - start
            tokens += hf_tokens(out, self.eos)
        return tokens, seconds


class CT2Speed(Speed):
    """CTranslate2 on `ct2-transformers-converter`'s model of the same folder: id -> token strings of vocab.json,
    the model's length limit; it has no forced EOS and no renormalize (their effect on the best hypothesis: none
    but at the limit, and the beam's ranking on renormalize's rounding). target_prefix: the forced first target
    token (NLLB's language code), given as CTranslate2's target_prefix; its hypotheses keep it."""

    def __init__(self, ct2_dir: Path, compute_type: str, vocab: Dict[str, int], eos_id: int, max_length: int,
                 target_prefix: Optional[str] = None):
        import ctranslate2
        self.name = f"CTranslate2 {compute_type}"
        self.precision = {"float32": "fp32", "int8": "int8"}[compute_type]
        self.translator = ctranslate2.Translator(str(ct2_dir), device="cpu", compute_type=compute_type,
                                                 inter_threads=1, intra_threads=THREADS)
        self.tokens = {i: t for t, i in vocab.items()}
        self.ids, self.eos = vocab, eos_id
        self.max_decoding_length = max_length - 1          # transformers' max_length counts the decoder start
        self.target_prefix = target_prefix

    def run(self, batches, beam):
        tokens, seconds = [], 0.0
        for batch in batches:
            strings = [[self.tokens[i] for i in s] for s in batch]
            prefix = None if self.target_prefix is None else [[self.target_prefix]] * len(batch)
            start = time.perf_counter()
            out = self.translator.translate_batch(strings, beam_size=beam, max_batch_size=len(batch),
                                                  max_decoding_length=self.max_decoding_length, target_prefix=prefix)
            seconds += time.perf_counter() - start
            tokens += [[self.ids[t] for t in r.hypotheses[0] if self.ids[t] != self.eos] for r in out]
        return tokens, seconds


class OptimumSpeed(Speed):
    def __init__(self, worker, precision: str, eos_id: int, forced_bos_id: Optional[int] = None):
        self.worker, self.name, self.precision, self.eos = worker, f"Optimum ORT {precision}", precision, eos_id
        self.extra = {} if forced_bos_id is None else {"forced_bos": forced_bos_id}

    def run(self, batches, beam):
        from seq2onnx.export.hf_convert import hf_tokens
        import torch
        ans = self.worker.request(variant=self.precision, batches=batches, beam=beam, **self.extra)
        rows = [[0] + row for row in ans["tokens"]]          # hf_tokens drops the first (the decoder start)
        width = max(len(r) for r in rows)
        return hf_tokens(torch.tensor([r + [self.eos] * (width - len(r)) for r in rows]), self.eos), ans["seconds"]


def build_ct2(model_dir: Path, out: Path) -> Path:
    """`ct2-transformers-converter --model model_dir --output_dir out` (float32 weights; int8 at load)."""
    if not (out / "model.bin").exists():
        from ctranslate2.converters import TransformersConverter
        TransformersConverter(str(model_dir)).convert(str(out), force=True)
        log(f"speed: CTranslate2 model -> {out}")
    return out


def build_optimum(model_dir: Path, work: Path):
    """Optimum's own export (fp32) and ORTQuantizer (int8) of the folder, in the overlay process."""
    import subprocess

    from bench.engines import BENCH, ensure_optimum_overlay, optimum_env
    overlay = ensure_optimum_overlay(WORK.parent / "optimum-site")
    out = work / "optimum"
    if not (out / "int8").exists():
        cmd = [sys.executable, str(BENCH / "optimum_worker.py"), "export", str(model_dir), str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=optimum_env(overlay))
        if proc.returncode != 0:
            raise RuntimeError(f"Optimum export failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        log(f"speed: Optimum export -> {out}")
    return overlay, out


SPEED_SYSTEMS = ("ours", "hf", "optimum", "ct2")


def run_speed(work: Path, n: int, rounds: int, systems: Sequence[str], results: Path) -> Dict[str, Any]:
    import statistics

    from bench import report
    from bench.engines import OptimumWorker
    from bench.measure import PAUSE_S

    p = paths(work)
    systems = list(systems or SPEED_SYSTEMS)
    tok = load_tokenizer(p["model"])
    sources = tok([s for s, _ in test_pairs(work, n)])["input_ids"]
    generation = json.loads((p["model"] / "generation_config.json").read_text())
    load_before = os.getloadavg()
    engines: List[Speed] = []
    overlay = worker = None
    if "ours" in systems:
        engines += [OursSpeed(p["package"], "fp32"), OursSpeed(p["package"], "int8")]
    if "hf" in systems:
        engines.append(TransformersSpeed(p["model"]))
    if "optimum" in systems:
        overlay, optimum_dir = build_optimum(p["model"], work)
        worker = OptimumWorker(overlay, optimum_dir, THREADS)
        engines += [OptimumSpeed(worker, "fp32", tok.eos_token_id), OptimumSpeed(worker, "int8", tok.eos_token_id)]
    if "ct2" in systems:
        ct2_dir = build_ct2(p["model"], work / "ct2")
        engines += [CT2Speed(ct2_dir, c, tok.encoder, tok.eos_token_id, generation["max_length"])
                    for c in ("float32", "int8")]
    reference = TransformersSpeed.name if "hf" in systems else engines[0].name
    cases = []
    try:
        for name, batch, beam in SPEED_CASES:
            batches = [sources[i:i + batch] for i in range(0, len(sources), batch)]
            seconds: Dict[str, List[float]] = {e.name: [] for e in engines}
            outputs: Dict[str, List[List[int]]] = {}
            for r in range(rounds + 1):                              # round 0: warm-up, not counted
                for e in engines:
                    time.sleep(PAUSE_S)
                    outputs[e.name], s = e.run(batches, beam)
                    if r > 0:
                        seconds[e.name].append(s)
                log(f"  {name}: round {r}/{rounds} done" + (" (warm-up)" if r == 0 else ""))
            generated = {e.name: sum(len(t) + 1 for t in outputs[e.name]) for e in engines}   # EOS included
            rows = []
            for e in engines:
                row = {"system": e.name, "precision": e.precision, "seconds": seconds[e.name],
                       "sentences_per_s": len(sources) / statistics.median(seconds[e.name]),
                       "target_tokens_per_s": generated[e.name] / statistics.median(seconds[e.name]),
                       "rows_equal_transformers": sum(a == b for a, b in zip(outputs[e.name], outputs[reference])),
                       "rows": len(sources)}
                for ours in ("seq2onnx fp32", "seq2onnx int8"):          # how many times faster ours is, per round
                    if ours in seconds:
                        row[f"{ours} speedup"] = statistics.median(
                            s / o for s, o in zip(seconds[e.name], seconds[ours]))
                rows.append(row)
            cases.append({"case": name, "batch": batch, "beam": beam, "rows": rows})
    finally:
        if worker is not None:
            worker.close()
    data = {"machine": report.machine(overlay), "load_avg_before": load_before, "load_avg_after": os.getloadavg(),
            "sentences": len(sources), "vocab_size": len(tok.encoder), "rounds": rounds, "threads": THREADS,
            "generation": generation,
            "model": json.loads((p["model"] / "training.json").read_text()), "reference": reference, "cases": cases}
    md = speed_markdown(data)
    report.write(results, "hf_marian_convert", data, md)
    print(md)
    return data


def speed_markdown(data: Dict[str, Any]) -> str:
    m, mach = data["model"]["model"], data["machine"]
    lines = ["# A trained MarianMTModel converted by `seq2onnx convert`, against the engines on the same folder",
             "",
             f"gettext en->de, MarianMTModel d_model {m['d_model']}, {m['encoder_layers']}+{m['decoder_layers']} "
             f"layers, FFN {m['encoder_ffn_dim']}, {m['activation_function']}, vocabulary {data['vocab_size']} "
             f"({data['model']['steps']} steps). {data['sentences']} test sources, each case at the model's "
             f"generation settings (max_length {data['generation']['max_length']}), {data['threads']} threads every "
             f"system, {data['rounds']} rounds after a warm-up, interleaved. Speedup: the median over rounds of the "
             f"system's seconds / ours (> 1: ours is faster). Rows equal: best hypothesis token-identical to "
             f"{data['reference']}'s.",
             "",
             f"Machine: {mach['cpu']}, {mach['cpus_usable']} CPUs; load average {data['load_avg_before'][0]:.2f} "
             f"before, {data['load_avg_after'][0]:.2f} after; git {mach['git_commit']}"
             f"{' (dirty)' if mach['git_dirty'] else ''}, {mach['date']}.", ""]
    for case in data["cases"]:
        lines += [f"## {case['case']}", "",
                  "| system | sentences/s | target tokens/s | seq2onnx fp32 speedup | seq2onnx int8 speedup | rows equal |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in case["rows"]:
            sp = [f"{r[k]:.2f}x" if k in r else "-" for k in ("seq2onnx fp32 speedup", "seq2onnx int8 speedup")]
            lines.append(f"| {r['system']} | {r['sentences_per_s']:.1f} | {r['target_tokens_per_s']:.0f} | {sp[0]} | "
                         f"{sp[1]} | {r['rows_equal_transformers']}/{r['rows']} |")
        lines.append("")
    lines.append("Packages: " + ", ".join(f"{k} {v}" for k, v in mach["packages"].items()))
    return "\n".join(lines)


# --- driver -----------------------------------------------------------------------------------------------
def main(argv: Sequence[str] = ()) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("data", "train", "convert", "quality", "speed", "all"))
    ap.add_argument("--work", type=Path, default=WORK)
    ap.add_argument("--minutes", type=float, default=25.0, help="training wall-clock budget (default 25)")
    ap.add_argument("--test-sentences", type=int, default=TEST_SENTENCES)
    ap.add_argument("--force", action="store_true", help="redo the step even if its output exists")
    ap.add_argument("--skip-int8-validation", action="store_true",
                    help="convert: keep the int8 variant when it fails its quality gate (seq2onnx convert's flag)")
    ap.add_argument("--rounds", type=int, default=5, help="speed: timed rounds per case")
    ap.add_argument("--systems", nargs="+", choices=SPEED_SYSTEMS, help="speed: a subset of the systems")
    ap.add_argument("--speed-sentences", type=int, default=SPEED_SENTENCES,
                    help="speed: test sources each case decodes per round (default %(default)s)")
    ap.add_argument("--results", type=Path, default=RESULTS, help="quality and speed: where their .json and .md go (default bench/results)")
    a = ap.parse_args(list(argv) or None)
    work = a.work.absolute()
    work.mkdir(parents=True, exist_ok=True)
    if a.step in ("data", "all"):
        step_data(work, a.force)
    if a.step in ("train", "all"):
        step_train(work, a.minutes, a.force)
    if a.step in ("convert", "all"):
        step_convert(work, a.force, not a.skip_int8_validation)
    if a.step in ("quality", "all"):
        write_quality(step_quality(work, a.test_sentences), a.results)
    if a.step == "speed":
        run_speed(work, a.speed_sentences, a.rounds, a.systems, a.results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
