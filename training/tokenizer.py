"""The joint subword tokenizer (HuggingFace `tokenizers`), shared by source and target.

BPE over NFKC-normalised text; the Metaspace pre-tokenizer marks word starts with "▁" and its
decoder turns them back into spaces, so `decode(encode(text))` restores the text. Options, as
SentencePiece and HF tokenizers users know them, all stored in tokenizer.json so that every runtime
applies them: `lowercase` (a Lowercase normalizer after NFKC: "Forty-Two" and "forty-two" are the
same ids; decoded text is then lower case), `split_digits` (every digit its own piece, SentencePiece's
split_digits: "1234" is 1 2 3 4, so a model can read place values), `group_digits` (a run of digits
gets thousands separators, "1234567" reads as "1,234,567": a model that must say how large a number is
need not count its digits) and `split_punctuation` (each punctuation character its own piece: the "-"
of "forty-two" does not glue to a word).
There is no post-processor (docs/CONTRACTS.md): the model code adds EOS / BOS itself, e.g.
    source ids     = encode(text) + [eos]
    decoder input  = [bos] + encode(target)
    labels         = encode(target) + [eos]
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from seq2onnx.runtime.package.tokenizer import THOUSANDS, specials_as_text

# name in ModelConfig -> token; their ids are looked up in the trained tokenizer, never assumed
SPECIAL_TOKENS: Dict[str, str] = {"pad_id": "<pad>", "bos_id": "<s>", "eos_id": "</s>", "unk_id": "<unk>"}


def train_tokenizer(texts: Iterable[str], vocab_size: int, lowercase: bool = False, split_digits: bool = False,
                    split_punctuation: bool = False, group_digits: bool = False) -> Tokenizer:
    """Train a BPE tokenizer of at most `vocab_size` pieces (specials included) on `texts`.

    A small corpus may give fewer pieces than asked for: read the real size from
    `tok.get_vocab_size()`.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size must be > {len(SPECIAL_TOKENS)}, got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_id"]))
    steps = [normalizers.NFKC()]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if group_digits:
        steps.append(normalizers.Replace(Regex(THOUSANDS), ","))
    tok.normalizer = steps[0] if len(steps) == 1 else normalizers.Sequence(steps)
    splitters = [pre_tokenizers.Metaspace()]
    if split_punctuation:
        splitters.append(pre_tokenizers.Punctuation())
    if split_digits:
        splitters.append(pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = splitters[0] if len(splitters) == 1 else pre_tokenizers.Sequence(splitters)
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS.values()),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path: str) -> Tokenizer:
    return specials_as_text(Tokenizer.from_file(str(path)))


def tokenizer_from_json(text: str) -> Tokenizer:
    """The tokenizer stored in a checkpoint (the tokenizer.json text)."""
    return specials_as_text(Tokenizer.from_str(text))


def special_ids(tok: Tokenizer) -> Dict[str, int]:
    """{"pad_id", "bos_id", "eos_id", "unk_id"} -> ids in `tok`, the ModelConfig field names."""
    ids = {}
    for field, token in SPECIAL_TOKENS.items():
        i = tok.token_to_id(token)
        if i is None:
            raise ValueError(f"the tokenizer has no {token} token: train it with seq2onnx (training/tokenizer.py)")
        ids[field] = i
    return ids


def encode_source(tok: Tokenizer, text: str, eos_id: int) -> List[int]:
    """Source ids: subwords + [EOS]."""
    return tok.encode(text).ids + [eos_id]


def encode_target(tok: Tokenizer, text: str) -> List[int]:
    """Target subword ids without specials; see `decoder_io` for the training pair."""
    return tok.encode(text).ids


def decoder_io(target_ids: List[int], bos_id: int, eos_id: int) -> Tuple[List[int], List[int]]:
    """target ids -> (decoder input [BOS] + ids, labels ids + [EOS]), both of length len(ids) + 1."""
    return [bos_id] + list(target_ids), list(target_ids) + [eos_id]


def decode(tok: Tokenizer, ids: List[int]) -> str:
    """Generated ids (without EOS) -> text."""
    return tok.decode(list(ids), skip_special_tokens=True)
