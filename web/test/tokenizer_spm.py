"""SentencePiece tokenizers for test/tokenizer_spm.test.js: train SentencePiece Unigram models (nmt_nfkc, as
OPUS-MT's) on the given texts and convert them to HF tokenizers JSON the ways the field does, so that the JS
tokenizer can be compared with Python's `tokenizers` (Rust) on them.

Reads one JSON job on stdin, writes its answer on stdout:
  {"op": "make", "texts": [...], "dir": DIR, "vocab_size": N} -> {"tokenizers": {name: path}}:
  "spm-converter":  transformers' SpmConverter (Precompiled, Strip right, Replace " {2,}" -> "▁"; Metaspace), with
                    language-code special tokens added after the vocabulary (as NLLB's)
  "from-spm":       tokenizers' SentencePieceUnigramTokenizer.from_spm's layout (Precompiled, Replace " {2,}" -> " ")
                    of a model trained with byte_fallback (<0x00>..<0xFF> pieces) and a lower character coverage
  "nllb":           transformers' NllbTokenizer's conversion (NllbConverter: a BPE SentencePiece model, Precompiled,
                    Replace " {2,}" -> " ", Metaspace; <s> <pad> </s> <unk> first, the 202 language codes as special
                    tokens after the pieces), without its post-processor (a package's tokenizer has none)
  {"op": "check", "files": [JSON text, ...]} -> {"errors": [null | message]}: does Rust tokenizers read each file?
  {"op": "scores", "lexemes": [JSON number, ...]} -> {"scores": [float | null]}: the f64 Rust tokenizers reads each
                    lexeme as, when it is a Unigram piece's score (null: Rust refuses the number)
"""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any, Dict, List


def train(texts: List[str], prefix: Path, **options: Any) -> Path:
    import sentencepiece as spm

    options = {"model_type": "unigram", **options}
    spm.SentencePieceTrainer.train(sentence_iterator=iter(texts), model_prefix=str(prefix), minloglevel=2,
                                   normalization_rule_name="nmt_nfkc", num_threads=1, **options)
    return prefix.with_suffix(".model")


def proto_of(path: Path) -> Any:
    from transformers.convert_slow_tokenizer import import_protobuf

    model = import_protobuf().ModelProto()
    model.ParseFromString(path.read_bytes())
    return model


def spm_converter(model: Path, languages: List[str]) -> Any:
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import SpmConverter

    original = types.SimpleNamespace(vocab_file=str(model), add_prefix_space=True, legacy=True)
    tokenizer = SpmConverter(original).converted()
    tokenizer.add_special_tokens([AddedToken(code, special=True, normalized=False) for code in languages])
    return tokenizer


def from_spm(model: Path) -> Any:
    """SentencePieceUnigramTokenizer.from_spm, which imports a sentencepiece_model_pb2 module from the working
    directory: the same tokenizer built here from transformers' copy of that module."""
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    proto = proto_of(model)
    tokenizer = Tokenizer(Unigram([(p.piece, p.score) for p in proto.pieces], proto.trainer_spec.unk_id,
                                  proto.trainer_spec.byte_fallback))
    tokenizer.normalizer = normalizers.Sequence([normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
                                                 normalizers.Replace(Regex(" {2,}"), " ")])
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tokenizer.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    return tokenizer


def make(job: Dict[str, Any]) -> Dict[str, Any]:
    out = Path(job["dir"])
    texts, size = job["texts"], job["vocab_size"]
    nmt = train(texts, out / "nmt", vocab_size=size, character_coverage=0.995)
    fallback = train(texts, out / "fallback", vocab_size=size + 256, character_coverage=0.98, byte_fallback=True)
    (out / "nllb").mkdir()
    bpe = train(texts, out / "nllb" / "sentencepiece.bpe", vocab_size=size, character_coverage=0.995, model_type="bpe")
    paths = {"spm-converter": out / "spm_converter.json", "from-spm": out / "from_spm.json", "nllb": out / "nllb.json"}
    spm_converter(nmt, ["__en__", "__de__", ">>fra<<", "eng_Latn"]).save(str(paths["spm-converter"]))
    from_spm(fallback).save(str(paths["from-spm"]))
    nllb(bpe).save(str(paths["nllb"]))
    return {"tokenizers": {k: str(v) for k, v in paths.items()}}


def check(job: Dict[str, Any]) -> Dict[str, Any]:
    from tokenizers import Tokenizer

    errors: List[Any] = []
    for text in job["files"]:
        try:
            Tokenizer.from_str(text)
            errors.append(None)
        except BaseException as e:  # noqa: BLE001 - a PanicException too
            errors.append(str(e).split("\n")[0] or type(e).__name__)
    return {"errors": errors}


def scores(job: Dict[str, Any]) -> Dict[str, Any]:
    from tokenizers import Tokenizer

    def read(lexemes: List[str]) -> List[float]:
        vocab = ", ".join(f'["p{i}", {lexeme}]' for i, lexeme in enumerate(lexemes))
        text = f'{{"model": {{"type": "Unigram", "unk_id": null, "vocab": [{vocab}]}}}}'
        # written back by Rust (shortest round trip), read here correctly rounded: the f64 Rust held
        return [score for _, score in json.loads(Tokenizer.from_str(text).to_str())["model"]["vocab"]]

    def one(lexeme: str) -> Any:
        try:
            return read([lexeme])[0]
        except Exception:  # noqa: BLE001 - Rust refuses the number (out of range)
            return None

    try:
        return {"scores": read(job["lexemes"])}
    except Exception:  # noqa: BLE001 - some number refused: each on its own
        return {"scores": [one(lexeme) for lexeme in job["lexemes"]]}


def nllb(model: Path) -> Any:
    from transformers import NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    # from a folder holding sentencepiece.bpe.model, the language codes named (as tests/hf_folders.py does)
    tokenizer = NllbTokenizer.from_pretrained(str(model.parent), src_lang="eng_Latn",
                                              extra_special_tokens=list(FAIRSEQ_LANGUAGE_CODES)).backend_tokenizer
    tokenizer.post_processor = None
    return tokenizer


def main() -> None:
    job = json.load(sys.stdin)
    json.dump({"make": make, "check": check, "scores": scores}[job["op"]](job), sys.stdout)


if __name__ == "__main__":
    main()
