"""Tiny HuggingFace model folders in the hub layout (what `save_pretrained` writes), built offline in seconds:
the inputs of `seq2onnx convert` in the tests.

Each folder holds SentencePiece models trained here on real text (English msgids and their German or French
msgstrs from the gettext catalogs the system installs, training/gettext_data.py), the tokenizer files that
transformers' own tokenizer class writes when constructed from them, and a random-init transformers model
(d_model 64, 2+2 layers, 4 heads, ffn 128) with the real models' settings and a generation_config.json like
theirs:

  marian               OPUS-MT (opus-mt-en-de): source.spm + target.spm (unigram, nmt_nfkc), one joint
                       vocab.json (</s>=0, <unk>=1, the pieces, <pad> last), swish, decoder start = pad
  marian_separate      the same with separate_vocabs: vocab.json (source) + target_vocab.json
  marian_multilingual  OPUS-MT en-ROMANCE style: target tags >>deu<< >>fra<< in vocab.json, text before them
  m2m100               M2M100Tokenizer (language_codes="wmt21"): sentencepiece.bpe.model (BPE) + vocab.json in
                       fairseq's dictionary order (by frequency), language tokens and 8 made-up words after it
  nllb                 NllbTokenizer: sentencepiece.bpe.model (BPE) with fairseq's offset, its 202 language codes

The random models are made to behave like trained ones where the converter's tests need it: their outputs
depend on the input (a larger init std than transformers' 0.02), and most greedy outputs end with EOS
after 3-30 tokens (_length_signal; `greedy_lengths` measures it). Everything is seeded: a build is the same
every run.

Tests take the session fixture `hf_folders` (import it: `from tests.hf_folders import hf_folders`) and call
`hf_folders.get(kind)`; scripts call build_marian / build_m2m100 / build_nllb, or
`python -m tests.hf_folders OUT_DIR` from the repository root (every kind into OUT_DIR/<kind>).
"""
from __future__ import annotations

import functools
import io
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

try:
    import pytest
except ImportError:     # `python -m tests.hf_folders OUT_DIR` needs no pytest: only the fixture does
    pytest = None

if __package__ in (None, ""):          # imported with tests/ on sys.path (web/test/python_reference.py), or run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEED = 0
PAIRS = 3000                  # parallel lines per language pair the SentencePiece models are trained on
MARIAN_SPM_VOCAB = 400        # pieces of each Marian SentencePiece model (unigram, as OPUS-MT's)
FAIRSEQ_SPM_VOCAB = 600       # pieces of the M2M100 / NLLB SentencePiece model (BPE, as theirs)
MAX_LENGTH = 40               # generation_config max_length (the real ones: 512 / 200), small for speed
CALIBRATION = 50              # sentences calibrate_eos decodes
# the tiny transformer: d_model 64, 2 encoder + 2 decoder layers, 4 heads, ffn 128
TINY = dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128)
# How the random models are made to behave like trained ones (_length_signal), found by a search over these values
# on 200 gettext sentences; EOS's bias is calibrated per model (calibrate_eos).
LENGTH_FEATURE = 31      # the residual feature the length signal uses: the sinusoids' quietest (|value| < 0.01 at
                         # positions < 64 in Marian's and fairseq's layouts alike)
MARIAN_LENGTH = dict(init_std=0.2, marker=32.0, gain=-3.0, eos_weight=10.0, eos_scale=1.0, cross_scale=0.2)
FAIRSEQ_LENGTH = dict(init_std=0.4, marker=16.0, gain=-24.0, eos_weight=None, eos_scale=0.2, cross_scale=1.0)

MARIAN_TAGS = {"deu": ">>deu<<", "fra": ">>fra<<"}       # marian_multilingual's target languages
KINDS = ("marian", "marian_separate", "marian_multilingual", "m2m100", "nllb")


# --- text -------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def gettext_pairs(lang: str, n: int = PAIRS) -> Tuple[Tuple[str, str], ...]:
    """n (English msgid, msgstr in lang) pairs of the installed gettext catalogs, spread over all of them
    (every k-th of the sorted distinct pairs), so the same every run on the same system."""
    from seq2onnx.training.gettext_data import catalog_files, read_catalogs

    files = catalog_files(lang)
    pairs, _ = read_catalogs(files)
    if len(pairs) < n:
        raise RuntimeError(f"tests/hf_folders.py needs {n} gettext pairs for {lang!r}, found {len(pairs)} in "
                           f"{len(files)} catalogs under /usr/share/locale/{lang}: install translated packages")
    step = len(pairs) / n
    return tuple(pairs[int(i * step)] for i in range(n))


def train_spm(lines: Sequence[str], model_type: str, vocab_size: int) -> bytes:
    """A SentencePiece model trained on lines (serialized ModelProto): nmt_nfkc normalization (the default,
    as OPUS-MT's and fairseq's), default character coverage 0.9995 (rare characters are left out, as in
    real models), pieces <unk>=0, <s>=1, </s>=2. The same lines give the same model (trained once a process)."""
    return _train_spm(tuple(lines), model_type, vocab_size)


@functools.lru_cache(maxsize=None)
def _train_spm(lines: Tuple[str, ...], model_type: str, vocab_size: int) -> bytes:
    import sentencepiece as spm

    out = io.BytesIO()
    spm.set_random_generator_seed(SEED)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, model_type=model_type, vocab_size=vocab_size,
        num_threads=1, minloglevel=2)
    return out.getvalue()


def _spm_pieces(model: bytes) -> List[Tuple[str, int]]:
    """(piece, type) of a SentencePiece model in id order (type 1 normal, 2 unknown, 3 control)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_proto=model)
    return [(sp.id_to_piece(i), 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 1)
            for i in range(sp.get_piece_size())]


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


# --- the random models --------------------------------------------------------------------------------
def _seeded(seed: int) -> None:
    import torch

    torch.manual_seed(seed)


def _save_model(folder: Path, config, make_model: Callable, seed: int, shift_eos: Callable, generation: dict,
                prefixes: Sequence[str] = ("",), weights: bool = True) -> None:
    """The random model of `config` (make_model(config) after seeding torch with `seed`), EOS's logit calibrated
    (calibrate_eos: shift_eos(model) -> how to shift it), saved in folder (which holds the tokenizer already) with
    its generation_config.json; weights=False: config.json alone (what the tokenizer tests read), in no time."""
    from transformers import GenerationConfig

    if not weights:
        config.save_pretrained(str(folder))
        return
    _seeded(seed)
    model = make_model(config).eval()
    model.generation_config = GenerationConfig(**generation)
    shift_eos(model)(calibrate_eos(model, folder, prefixes))
    model.save_pretrained(str(folder), safe_serialization=True)
    model.generation_config.save_pretrained(str(folder))


def calibrate_eos(model, folder: Path, prefixes: Sequence[str] = ("",)) -> float:
    """The shift of EOS's logit that puts the most greedy lengths of CALIBRATION sentences (gettext msgids, each
    after one of `prefixes` in turn; counted for the prefix with the fewest) in 4..30 tokens. A greedy path does not
    depend on EOS's logit until EOS wins, so one decode with EOS held back gives every step's margin of EOS over the
    best other token, and from it the length that any shift would give."""
    import torch
    from transformers import AutoTokenizer

    lines = [s for s, _ in gettext_pairs("de")[1::PAIRS // CALIBRATION]]
    sources = [prefixes[i % len(prefixes)] + line for i, line in enumerate(lines)]
    batch = AutoTokenizer.from_pretrained(str(folder))(sources, return_tensors="pt", padding=True)
    config = model.generation_config
    steps = config.max_length - 1
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1, do_sample=False, min_new_tokens=steps)   # [B, 1 + steps]
        logits = model(**batch, decoder_input_ids=out[:, :-1]).logits                          # [B, steps, V]
    eos = config.eos_token_id
    others = logits.clone()
    others[..., eos] = -torch.inf
    for (banned,) in config.bad_words_ids or []:
        others[..., banned] = -torch.inf
    margin = logits[..., eos] - others.max(-1).values                                            # [B, steps]
    group = torch.arange(len(sources)) % len(prefixes)                                           # [B]: its prefix
    best, best_count = 0.0, -1
    for shift in torch.arange(-20.0, 40.0, 0.25).tolist():
        ends = (margin + shift > 0).float()
        lengths = torch.where(ends.any(1), ends.argmax(1) + 1, torch.tensor(steps))
        good = (lengths >= 4) & (lengths <= 30)
        count = min(int(good[group == g].sum()) for g in range(len(prefixes)))      # the worst prefix's
        if count > best_count:
            best, best_count = shift, count
    return best


def _length_signal(model, start_id: int, eos_id: int, marker: float, gain: float, eos_weight, eos_scale: float,
                   cross_scale: float, **_) -> None:
    """Make a random seq2seq model's greedy outputs end with EOS after a number of steps that depends on the input,
    as a trained model's do (a random one repeats a token forever or stops at once, whatever the EOS bias).

    Feature k = LENGTH_FEATURE of the decoder's residual stream is given to a length signal: only the start token's
    embedding has it (marker); head 0 of the first decoder self-attention attends uniformly over the prefix (zero
    queries) and reads it, so at step t it holds marker / (t + 1), and writes it back times `gain` (< 0, large
    enough that the sum with the start token's own marker rises with t); no other sublayer writes feature k. EOS's
    output embedding reads feature k (eos_weight; the start token's own when EOS is the start, as in M2M100), so
    EOS's logit grows with every step at a rate that the LayerNorms make depend on the input. The cross-attention
    is scaled by cross_scale (a random one otherwise fixes the output to one token per source), EOS's other
    embedding features by eos_scale (a start token = EOS would otherwise predict itself)."""
    import torch

    k, decoder = LENGTH_FEATURE, model.model.decoder
    with torch.no_grad():
        emb = decoder.embed_tokens.weight                          # [V, D], tied to the output projection
        emb[eos_id] *= eos_scale
        emb[:, k] = 0
        emb[start_id, k] = marker / model.config.d_model ** 0.5    # the embeddings are scaled by sqrt(d_model)
        if eos_id != start_id:
            emb[eos_id, k] = eos_weight
        for layer in decoder.layers:
            layer.encoder_attn.out_proj.weight.mul_(cross_scale)
            for linear in (layer.self_attn.out_proj, layer.encoder_attn.out_proj, layer.fc2):
                linear.weight[k] = 0                                 # [D_out, D_in]: nothing else writes k
                linear.bias[k] = 0
        head = decoder.layers[0].self_attn
        d = head.head_dim
        for linear in (head.q_proj, head.v_proj):
            linear.weight[:d] = 0
            linear.bias[:d] = 0
        head.v_proj.weight[0, k] = 1
        head.out_proj.weight[:, :d] = 0
        head.out_proj.weight[k, 0] = gain


def _marian_config(vocab_size: int, target_vocab_size: int, pad_id: int, eos_id: int, separate: bool):
    from transformers import MarianConfig

    return MarianConfig(
        vocab_size=vocab_size, decoder_vocab_size=target_vocab_size, **TINY, activation_function="swish",
        max_position_embeddings=512, scale_embedding=True, share_encoder_decoder_embeddings=not separate,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, init_std=MARIAN_LENGTH["init_std"],
        pad_token_id=pad_id, eos_token_id=eos_id, bos_token_id=eos_id, decoder_start_token_id=pad_id,
        forced_eos_token_id=eos_id)


def _marian_model(config):
    import torch
    from transformers import MarianMTModel

    model = MarianMTModel(config)
    with torch.no_grad():                       # a trained model's logits bias: random (EOS's: calibrate_eos)
        model.final_logits_bias.copy_(torch.randn(1, config.decoder_vocab_size) * 0.5)
    _length_signal(model, config.decoder_start_token_id, config.eos_token_id, **MARIAN_LENGTH)
    return model


def _fairseq_config(vocab_size: int, pad_id: int, bos_id: int, eos_id: int):
    from transformers import M2M100Config

    return M2M100Config(
        vocab_size=vocab_size, **TINY, activation_function="relu", max_position_embeddings=1024,
        scale_embedding=True, dropout=0.1, attention_dropout=0.1, activation_dropout=0.0,
        encoder_layerdrop=0.05, decoder_layerdrop=0.05, init_std=FAIRSEQ_LENGTH["init_std"],
        pad_token_id=pad_id, bos_token_id=bos_id, eos_token_id=eos_id, decoder_start_token_id=eos_id)


def _fairseq_model(config):
    import torch
    from transformers import M2M100ForConditionalGeneration

    model = M2M100ForConditionalGeneration(config)
    with torch.no_grad():                       # random LayerNorm weights, as a trained model's
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1 + 0.1 * torch.randn_like(module.weight))
                module.bias.copy_(0.1 * torch.randn_like(module.bias))
    _length_signal(model, config.eos_token_id, config.eos_token_id, **FAIRSEQ_LENGTH)
    return model


def _shift_marian_eos(model) -> Callable[[float], None]:
    eos_id = model.config.eos_token_id

    def shift(by: float) -> None:
        model.final_logits_bias.data[0, eos_id] += by
    return shift


def _shift_fairseq_eos(model) -> Callable[[float], None]:
    """M2M100 has no logits bias: the final LayerNorm's bias on the length feature, which only EOS reads."""
    eos_id = model.config.eos_token_id

    def shift(by: float) -> None:
        decoder = model.model.decoder
        decoder.layer_norm.bias.data[LENGTH_FEATURE] += by / decoder.embed_tokens.weight[eos_id, LENGTH_FEATURE].item()
    return shift


MARIAN_GENERATION = dict(num_beams=4, renormalize_logits=True, max_length=MAX_LENGTH)
M2M100_GENERATION = dict(num_beams=5, early_stopping=True, max_length=MAX_LENGTH)


# --- Marian --------------------------------------------------------------------------------------------
def marian_vocab(*models: bytes, tags: Sequence[str] = ()) -> Dict[str, int]:
    """OPUS-MT's vocab.yml as vocab.json: </s> 0, <unk> 1, tags, the pieces of each model, <pad> last."""
    tokens = ["</s>", "<unk>", *tags]
    for model in models:
        tokens += [p for p, kind in _spm_pieces(model) if kind == 1 and p not in tokens]
    return {token: i for i, token in enumerate(tokens + ["<pad>"])}


def write_marian_tokenizer(folder: Path, src_spm: bytes, tgt_spm: bytes, separate_vocabs: bool = False,
                           tags: Sequence[str] = (), target_lang: Optional[str] = "de"
                           ) -> Tuple[Dict[str, int], Dict[str, int]]:
    """The OPUS-MT tokenizer files in `folder`: source.spm, target.spm, vocab.json (+ target_vocab.json when
    separate_vocabs), and what MarianTokenizer.save_pretrained writes -> (source vocab, target vocab)."""
    from transformers import MarianTokenizer

    (folder / "source.spm").write_bytes(src_spm)
    (folder / "target.spm").write_bytes(tgt_spm)
    if separate_vocabs:
        src_vocab, tgt_vocab = marian_vocab(src_spm), marian_vocab(tgt_spm)
        _write_json(folder / "vocab.json", src_vocab)
        _write_json(folder / "target_vocab.json", tgt_vocab)
    else:
        src_vocab = tgt_vocab = marian_vocab(src_spm, tgt_spm, tags=tags)
        _write_json(folder / "vocab.json", src_vocab)
    MarianTokenizer(
        source_spm=str(folder / "source.spm"), target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
        target_vocab_file=str(folder / "target_vocab.json") if separate_vocabs else None,
        separate_vocabs=separate_vocabs, source_lang="en", target_lang=target_lang,
    ).save_pretrained(str(folder))
    return src_vocab, tgt_vocab


def build_marian(folder, separate_vocabs: bool = False, multilingual: bool = False, weights: bool = True) -> Path:
    """An OPUS-MT folder at `folder` (created): English -> German, or -> German and French (multilingual,
    tags >>deu<< >>fra<<); the model's ids are vocab.json's (target ones target_vocab.json's if separate)."""
    if separate_vocabs and multilingual:
        raise ValueError("build_marian: a multilingual folder has a joint vocabulary")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pairs = gettext_pairs("de")
    if multilingual:                           # half German, half French: as many lines as the others
        pairs = pairs[::2] + gettext_pairs("fr")[1::2]
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    src_spm = train_spm(sources, "unigram", MARIAN_SPM_VOCAB)
    tgt_spm = train_spm(targets, "unigram", MARIAN_SPM_VOCAB)
    src_vocab, tgt_vocab = write_marian_tokenizer(
        folder, src_spm, tgt_spm, separate_vocabs, tags=list(MARIAN_TAGS.values()) if multilingual else (),
        target_lang=None if multilingual else "de")

    pad, eos = tgt_vocab["<pad>"], tgt_vocab["</s>"]
    config = _marian_config(len(src_vocab), len(tgt_vocab), pad, eos, separate_vocabs)
    seed = SEED + (5 if multilingual else 1)   # multilingual: of the seeds 1..5, the one whose lengths vary most
    _save_model(folder, config, _marian_model, seed, _shift_marian_eos,
                dict(MARIAN_GENERATION, bad_words_ids=[[pad]], forced_eos_token_id=eos, bos_token_id=eos,
                     eos_token_id=eos, pad_token_id=pad, decoder_start_token_id=pad),
                prefixes=[tag + " " for tag in MARIAN_TAGS.values()] if multilingual else ("",), weights=weights)
    return folder


# --- M2M100 and NLLB ------------------------------------------------------------------------------------
def _fairseq_spm(folder: Path) -> Tuple[bytes, List[str]]:
    """The BPE SentencePiece model of an M2M100 / NLLB folder, trained on English and German lines, written
    as sentencepiece.bpe.model, and the training lines."""
    de = gettext_pairs("de")
    lines = [s for s, _ in de] + [t for _, t in de]
    model = train_spm(lines, "bpe", FAIRSEQ_SPM_VOCAB)
    (folder / "sentencepiece.bpe.model").write_bytes(model)
    return model, lines


def build_m2m100(folder, weights: bool = True) -> Path:
    """An M2M100 folder (language_codes "wmt21": en ha is ja cs ru zh de; default en -> de): vocab.json is
    fairseq's dictionary (<s> <pad> </s> <unk>, then the pieces by their frequency in the training lines),
    the 8 language tokens and 8 made-up words follow it in the model's vocabulary."""
    import sentencepiece as spm
    from transformers import M2M100Tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model, lines = _fairseq_spm(folder)
    sp = spm.SentencePieceProcessor(model_proto=model)
    counts = Counter(p for line in lines for p in sp.encode(line, out_type=str))
    pieces = [p for p, kind in _spm_pieces(model) if kind == 1]
    order = sorted(range(len(pieces)), key=lambda i: (-counts[pieces[i]], i))      # stable: spm order on ties
    vocab = {t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + [pieces[i] for i in order])}
    _write_json(folder / "vocab.json", vocab)
    tokenizer = M2M100Tokenizer(
        vocab_file=str(folder / "vocab.json"), spm_file=str(folder / "sentencepiece.bpe.model"),
        language_codes="wmt21", src_lang="en", tgt_lang="de")
    tokenizer.save_pretrained(str(folder))

    size = len(vocab) + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words
    config = _fairseq_config(size, vocab["<pad>"], vocab["<s>"], vocab["</s>"])
    _save_model(folder, config, _fairseq_model, SEED + 2, _shift_fairseq_eos,
                dict(M2M100_GENERATION, bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"],
                     pad_token_id=vocab["<pad>"], decoder_start_token_id=vocab["</s>"]), weights=weights)
    return folder


def build_nllb(folder, weights: bool = True) -> Path:
    """An NLLB-200 folder: sentencepiece.bpe.model and what transformers' NllbTokenizer converts it to
    (tokenizer.json: <s> <pad> </s> <unk>, the pieces with fairseq's offset of 1, the 202 language codes,
    <mask>), default source eng_Latn. Its generation_config is NLLB's: greedy, max_length only."""
    from transformers import NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    _fairseq_spm(folder)
    # converts the spm file (the language codes named: from an spm file alone transformers 5.23 replaces them
    # with the spm's control pieces; a hub folder's tokenizer.json has them)
    tokenizer = NllbTokenizer.from_pretrained(str(folder), src_lang="eng_Latn",
                                              extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES))
    tokenizer.save_pretrained(str(folder))

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<s>", "<pad>", "</s>")}
    config = _fairseq_config(len(tokenizer), ids["<pad>"], ids["<s>"], ids["</s>"])
    _save_model(folder, config, _fairseq_model, SEED + 3, _shift_fairseq_eos,
                dict(max_length=MAX_LENGTH, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                     pad_token_id=ids["<pad>"], decoder_start_token_id=ids["</s>"]), weights=weights)
    return folder


BUILDERS: Dict[str, Callable[..., Path]] = {           # kind -> builder(folder, weights=True)
    "marian": build_marian,
    "marian_separate": lambda folder, **kw: build_marian(folder, separate_vocabs=True, **kw),
    "marian_multilingual": lambda folder, **kw: build_marian(folder, multilingual=True, **kw),
    "m2m100": build_m2m100,
    "nllb": build_nllb,
}


# --- texts for the tokenizer tests (tests/export/test_hf_tokenizers.py; write_converted for the JS tests) --------
TEXTS = 5000
RANDOM_ID_SEQUENCES = 500
RANDOM_SEED = 32

# what the generated texts are made of
PUNCTUATION = list(".,;:!?-–—'\"()[]{}/\\@#$%^&*+=_~`|«»„“”‘’…·•") + ["...", "?!", "--"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u200b", "\u2028", "\x85", "\u1680"]
EMOJI = ["😀", "👍🏽", "❤️", "🇩🇪", "👨‍👩‍👧", "🤖", "✨", "🎉"]
FOREIGN = ["日本語", "中文字", "Москва", "Ελληνικά", "العربية", "עברית", "한국어", "ไทย", "ß", "ø", "ł", "ğ", "Ω", "∑", "€",
           "©", "™", "°", "µ", "\u0301", "e\u0301", "\ufffd", "\U0001d54f"]
NFKC = ["Ｈｅｌｌｏ", "ＡＢＣ１２３", "ﬁle", "ﬂow", "ﬀ", "x²", "H₂O", "½", "①②", "Ⅻ", "ｶﾀｶﾅ", "㎏", "℡", "ℌ", "ǅ",
        "\u212b", "ﾟ", "…", "‥", "™"]


def _word(rng: random.Random, words: Sequence[str]) -> str:
    word = rng.choice(words)
    change = rng.random()
    if change < 0.15:
        word = word.upper()
    elif change < 0.3:
        word = word.title()
    elif change < 0.4:
        word = word.swapcase()
    return word


def generated_text(rng: random.Random, words: Sequence[str]) -> str:
    """A few words of gettext text mixed with digits, punctuation, odd whitespace, emoji, foreign and NFKC-changing
    characters; sometimes leading or trailing whitespace."""
    parts: List[str] = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.random()
        if kind < 0.45:
            parts.append(_word(rng, words))
        elif kind < 0.55:
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
        elif kind < 0.68:
            parts.append(rng.choice(PUNCTUATION))
        elif kind < 0.76:
            parts.append(rng.choice(EMOJI))
        elif kind < 0.88:
            parts.append(rng.choice(FOREIGN))
        else:
            parts.append(rng.choice(NFKC))
        parts.append(rng.choice(WHITESPACE) if rng.random() < 0.25 else (" " if rng.random() < 0.7 else ""))
    text = "".join(parts)
    if rng.random() < 0.1:
        text = rng.choice(WHITESPACE) + text
    if rng.random() < 0.15:
        text = text.rstrip() if rng.random() < 0.5 else text + rng.choice(WHITESPACE)
    return text


def tokenizer_texts(n: int = TEXTS) -> List[str]:
    """n strings: gettext msgids, German and French msgstrs (2/5), generated ones (the rest), and a few edge cases."""
    rng = random.Random(RANDOM_SEED)
    de, fr = gettext_pairs("de"), gettext_pairs("fr")
    real = [s for s, _ in de[::3]] + [t for _, t in de[1::5]] + [t for _, t in fr[2::7]]
    real = real[: 2 * n // 5]
    words = sorted({w for line in real for w in line.split()})
    edge = ["", " ", "   ", "\t\n", "a", "A", "1", ".", "x  y", " leading", "trailing ", "ÄÖÜäöüß", "😀😀😀",
            "日本語のテキスト", "Ｆｕｌｌ ｗｉｄｔｈ", "ﬁﬂﬀ ligatures", "e\u0301te\u0301", "\u200b", "a\u00a0b", "12,345.67"]
    out = edge + real
    while len(out) < n:
        out.append(generated_text(rng, words))
    return [t for t in out if not _holds_special(t)][:n]


def _holds_special(text: str) -> bool:
    return any(s in text for s in ("<s>", "</s>", "<pad>", "<unk>", "<mask>", ">>")) or text.lstrip().startswith(">>")



# Where a converted tokenizer cannot equal a SentencePiece-based transformers tokenizer (export/hf_tokenizers.py says
# why), each for a reason `explained` names; all together they may explain at most MAX_EXPLAINED of the texts.
MAX_EXPLAINED = 0.02


def explained(text: str, ours: List[int], theirs: List[int], sp, normalizer) -> Optional[str]:
    """Why ours differs from transformers' ids on text, if for a known reason: "tie" (the same pieces in another
    order: SentencePiece's Viterbi adds float32 scores, tokenizers' float64), "unknown run" (SentencePiece makes a
    run of characters it does not know one piece, looked up whole in the vocabulary; the converted Unigram / BPE
    model looks up the characters it has), "grapheme" (tokenizers' Precompiled normalizer maps a grapheme cluster
    by its first characters and drops the rest, SentencePiece maps them all)."""
    if sorted(ours) == sorted(theirs):
        return "tie"
    if any(len(p) > 1 and sp.piece_to_id(p) == sp.unk_id() for p in sp.encode(text, out_type=str)):
        return "unknown run"
    normalized = normalizer.normalize_str(text)
    if sp.normalize(text) != ("\u2581" + normalized.replace(" ", "\u2581") if normalized else ""):
        return "grapheme"
    return None


def random_ids(rng: random.Random, vocab_size: int, n: int = RANDOM_ID_SEQUENCES) -> List[List[int]]:
    return [[rng.randrange(vocab_size) for _ in range(rng.randint(0, 12))] for _ in range(n)]



# --- checks and the fixture -------------------------------------------------------------------------------
def greedy_lengths(folder, sources: Sequence[str], **tokenizer_kwargs) -> List[int]:
    """Generated tokens (incl. EOS) of greedy decoding of each source with the folder's model and tokenizer
    (transformers, max_length MAX_LENGTH): how the random model behaves."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder), **tokenizer_kwargs)
    model = AutoModelForSeq2SeqLM.from_pretrained(str(folder)).eval()
    batch = tokenizer(list(sources), return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1, do_sample=False, max_length=MAX_LENGTH)
    eos = model.generation_config.eos_token_id
    lengths = []
    for row in out[:, 1:].tolist():                       # without the decoder start
        lengths.append(row.index(eos) + 1 if eos in row else len(row))
    return lengths


class HFFolders:
    """The folders of one test session, each built on first use under `root`: get(kind) a whole folder,
    tokenizer_folder(kind) one with the tokenizer files and config.json (the whole one if built already)."""

    def __init__(self, root: Path):
        self.root = root
        self._built: Dict[Tuple[str, bool], Path] = {}

    def get(self, kind: str) -> Path:
        return self._build(kind, weights=True)

    def tokenizer_folder(self, kind: str) -> Path:
        return self._built.get((kind, True)) or self._build(kind, weights=False)

    def _build(self, kind: str, weights: bool) -> Path:
        if kind not in BUILDERS:
            raise KeyError(f"no HF folder kind {kind!r}: one of {', '.join(KINDS)}")
        if (kind, weights) not in self._built:
            folder = self.root / (kind if weights else f"{kind}-tokenizer")
            self._built[kind, weights] = BUILDERS[kind](folder, weights=weights)
        return self._built[kind, weights]


if pytest is not None:
    @pytest.fixture(scope="session")
    def hf_folders(tmp_path_factory) -> HFFolders:
        return HFFolders(tmp_path_factory.mktemp("hf_folders"))


def transformers_tokenizer(folder: Path):
    """transformers' own tokenizer of a folder (MarianTokenizer, M2M100Tokenizer or NllbTokenizer)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def write_converted(folder, out) -> Dict[str, Path]:
    """export/hf_tokenizers.py's files for the HF folder `folder`, written into `out` (created), and out/expected.json:
    what transformers' tokenizer gives on tokenizer_texts(), for the JS runtime's tests -> name -> path.

    expected.json: {"texts": [str], "source_ids": [[int]] (transformers' ids, no special tokens), "target_ids":
    [[int]] (Marian: as a target text; else = source_ids), "decode_ids": [[int]] (target_ids, then random id
    sequences), "decoded": [str] (transformers' decode, skip_special_tokens=True), "explained": {"source"|"target":
    {index: reason}} (texts where the converted tokenizer differs from transformers for a reason `explained` names;
    the Python converter's output, compare with that on those), "tokenizer": the manifest's tokenizer field}."""
    import sentencepiece
    from tokenizers import Tokenizer

    from seq2onnx.export import hf_tokenizers
    from seq2onnx.runtime.package.tokenizer import specials_as_text

    folder, out = Path(folder), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    converted = hf_tokenizers.convert(folder, config)
    written = {}
    for name, text in converted.files.items():
        (out / name).write_text(text, encoding="utf-8")
        written[name] = out / name
    hf = transformers_tokenizer(folder)
    texts = tokenizer_texts()
    source_ids = [hf(t, add_special_tokens=False).input_ids for t in texts]
    marian = config["model_type"] == "marian"
    target_ids = [hf(text_target=t, add_special_tokens=False).input_ids for t in texts] if marian else source_ids
    decode_ids = target_ids + random_ids(random.Random(RANDOM_SEED), config.get("decoder_vocab_size")
                                         or config["vocab_size"])
    spm_files = {"source": "source.spm", "target": "target.spm"} if marian else \
        {"source": "sentencepiece.bpe.model"} if (folder / "vocab.json").is_file() else {}
    names = {"source": "source_tokenizer.json", "target": "target_tokenizer.json"} if marian else \
        {"source": "tokenizer.json"}
    reasons: Dict[str, Dict[int, str]] = {}
    for side, ids in (("source", source_ids), ("target", target_ids)):
        if side not in spm_files:
            continue
        ours = specials_as_text(Tokenizer.from_str(converted.files[names[side]]))
        sp = sentencepiece.SentencePieceProcessor(model_file=str(folder / spm_files[side]))
        mine = [e.ids for e in ours.encode_batch(texts)]
        reasons[side] = {i: explained(t, a, b, sp, ours.normalizer) or "unexplained"
                         for i, (t, a, b) in enumerate(zip(texts, mine, ids)) if a != b}
    expected = {"texts": texts, "source_ids": source_ids, "target_ids": target_ids, "decode_ids": decode_ids,
                "decoded": [hf.decode(ids, skip_special_tokens=True) for ids in decode_ids], "explained": reasons,
                "tokenizer": converted.field}
    (out / "expected.json").write_text(json.dumps(expected, ensure_ascii=False), encoding="utf-8")
    written["expected.json"] = out / "expected.json"
    return written


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[1] != "--tokenizers"):
        print("usage: python -m tests.hf_folders OUT_DIR [--tokenizers]\n  builds every kind into OUT_DIR/<kind>; "
              "--tokenizers: tokenizer files and config.json only (no weights), and OUT_DIR/<kind>.converted/ (the "
              "converted tokenizer files and expected.json: write_converted)", file=sys.stderr)
        return 2
    out, tokenizers_only = Path(argv[0]), len(argv) == 2
    for kind in KINDS:
        folder = BUILDERS[kind](out / kind, weights=not tokenizers_only)
        print(f"{kind}: {folder}")
        if tokenizers_only:
            print(f"{kind}: {', '.join(str(p) for p in write_converted(folder, out / f'{kind}.converted').values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
