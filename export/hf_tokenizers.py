"""The tokenizers of a transformers MarianMT (OPUS-MT), M2M100 or NLLB folder -> HF `tokenizers` JSON files that give
exactly the ids of transformers' MarianTokenizer / M2M100Tokenizer / NllbTokenizer and the same decoded text
(skip_special_tokens=True), for `seq2onnx convert` (export/hf_convert.py).

What each transformers tokenizer does, and what its JSON holds:

  Marian   source.spm / target.spm (SentencePiece unigram) segment the text; each piece's id is vocab.json's (or
           target_vocab.json's), <unk>'s for a piece the vocabulary lacks. A run of characters the SentencePiece
           model does not know is one piece (its surface), so it gets the vocabulary's id of that surface if there
           is one. Two files: source_tokenizer.json (source.spm) and target_tokenizer.json (target.spm), both in
           the model's id space (one vocabulary, or the source and the target one with separate_vocabs).
           A Unigram model over the vocabulary in id order: the SentencePiece model's pieces with its scores;
           entries made only of characters it does not know (the surfaces of unknown runs) and the special
           tokens with a score below every piece (UNREACHABLE_SCORE), so that they win only where SentencePiece
           has nothing either; every other entry of the vocabulary (the other side's pieces) can never match:
           its text in the file starts with MARKER (two U+2581), which no word after Metaspace(split) holds, and
           the decoder removes MARKER again.
  M2M100   sentencepiece.bpe.model (SentencePiece BPE) segments the text, vocab.json (fairseq's dictionary) gives
           the ids; then the language tokens __xx__ and fairseq's made-up words. One file, a BPE model with
           vocab.json's ids and the SentencePiece model's merges.
  NLLB     transformers 5 builds it as a `tokenizers` BPE already (from tokenizer.json, or from the SentencePiece
           model): that tokenizer, without its post-processor.

Normalization is SentencePiece's own: the Precompiled normalizer of the model's charsmap (nmt_nfkc for OPUS-MT and
fairseq), then its remove_extra_whitespaces (runs of spaces -> one, none at either end: two Replace normalizers with
regular expressions of ALLOWED_REGEXES), then Metaspace (add_dummy_prefix). Decoding is what the slow tokenizers'
convert_tokens_to_string does: the pieces joined, U+2581 as a space, the text stripped of spaces at both ends
(Replace and Fuse decoders).

No file has a post-processor: the runtime adds EOS and language tokens itself (docs/CONTRACTS.md "Tokenizer and
sequences"). Special tokens and language tokens are special added tokens, so decoding skips them; the runtime
loads the files with encode_special_tokens=True, so a literal "</s>" or ">>fra<<" in a text is text. (transformers'
MarianTokenizer splits a leading >>xx<< off the text instead; the runtime prepends the tag's id itself.)
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE, Unigram

from seq2onnx.runtime.errors import Seq2OnnxError, first_line
from seq2onnx.runtime.package.manifest import MAX_MANIFEST_BYTES, MAX_TOKENIZER_BYTES
from seq2onnx.runtime.package.manifest_records import Languages, Tokenizers
from seq2onnx.runtime.package.files import FolderRule, check_regular, read_regular
from seq2onnx.runtime.package.tokenizer import (ALLOWED_REGEXES, COLLAPSE_SPACES, EDGE_SPACES, foreign_regex,
                                                specials_as_text)

SPACE = "\u2581"                   # SentencePiece's whitespace symbol
MARKER = SPACE * 2                 # starts the text of a vocabulary entry that can never match (see above)
UNREACHABLE_SCORE = -1e6           # below any SentencePiece score: such an entry wins only where no piece can
SPM_UNIGRAM, SPM_BPE = 1, 2        # ModelProto.TrainerSpec.model_type
SPM_NORMAL = 1                     # ModelProto.SentencePiece.type of an ordinary piece
MADEUP_WORD = "madeupword{:04d}"   # fairseq's fillers after M2M100's language tokens
FILLER = "<seq2onnx_unused_{}>"    # ids of the model's vocabulary that its tokenizer does not name (NLLB-200)
MARIAN_TAG = (">>", "<<")          # Marian's target language tags: >>fra<<


@dataclass
class ConvertedTokenizers:
    """What the converter writes (files: name -> JSON text; field: the manifest's "tokenizer") and what it needs to
    know: the special tokens (role -> token, role -> id), every special id (specials, language tokens, fillers),
    the languages, and notes on anything that could not be made exact (one line each)."""
    files: Dict[str, str]
    field: Any
    special_tokens: Dict[str, str]
    special_token_ids: Dict[str, int]
    languages: Optional[Languages]
    special_id_list: List[int] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)

    def _load(self, name: str) -> Tokenizer:
        return specials_as_text(Tokenizer.from_str(self.files[name]))

    def source_tokenizer(self) -> Tokenizer:
        return self._load(Tokenizers.from_manifest(self.field, Path("manifest.json")).source)

    def target_tokenizer(self) -> Tokenizer:
        return self._load(Tokenizers.from_manifest(self.field, Path("manifest.json")).target)

    def special_ids(self) -> List[int]:
        return list(self.special_id_list)

    def language_id(self, code: str, side: str) -> int:
        """The id of language `code`'s token (side "source": in the source tokenizer, else the target one)."""
        if self.languages is None or code not in self.languages.tokens:
            raise Seq2OnnxError(f"the model has no language token for {code!r}")
        tokenizer = self.source_tokenizer() if side == "source" else self.target_tokenizer()
        return tokenizer.token_to_id(self.languages.tokens[code])

    def default_language_ids(self) -> Tuple[List[int], Optional[int]]:
        """(ids that start every source, the forced first target id or None) for the default languages; where the
        model names no default, its first language of that side."""
        langs = self.languages
        if langs is None or not langs.tokens:
            return [], None
        source = langs.default_source or (langs.source[0] if langs.source else None)
        target = langs.default_target or (langs.target[0] if langs.target else None)
        prefix = [self.language_id(source, "source")] if langs.source_token and source in langs.tokens else []
        if langs.target_token == "source_prefix" and target in langs.tokens:
            prefix = prefix + [self.language_id(target, "source")]
        forced = self.language_id(target, "target") if langs.target_token == "forced_bos" and target else None
        return prefix, forced


# --- reading the folder ------------------------------------------------------------------------------------
# A transformers folder is untrusted input, read by the runtime's rule for package files (runtime/package/files.py):
# a regular file in the folder itself (no symbolic link, FIFO or device), at most a limit of bytes.
DOWNLOAD = "download the model folder again (hf download MODEL --local-dir FOLDER)"
HF_FOLDER = FolderRule("seq2onnx convert", "the model folder", "", DOWNLOAD, Seq2OnnxError)
MAX_SETTINGS_BYTES = MAX_MANIFEST_BYTES      # config.json, generation_config.json, a weights index: a few kB each
MAX_FOLDER_ENTRIES = 10_000                  # a model folder holds a dozen files; more is not one


def folder_file(folder: Path, name: str, missing: Optional[str] = None) -> Path:
    """folder/name, a regular file in the folder itself (name: a file name, no folder part), or one line."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise Seq2OnnxError(f"{folder}: the file name {name[:80]!r} is not a file of the folder: seq2onnx convert "
                            f"reads nothing outside the model folder; {DOWNLOAD}")
    path = folder / name
    check_regular(path, missing or _missing(path), HF_FOLDER)
    return path


def _missing(path: Path) -> str:
    return (f"{path.parent} has no {path.name}: download the model's tokenizer files too "
            "(hf download MODEL --local-dir FOLDER)")


def read_bytes(folder: Path, name: str, limit: int = MAX_TOKENIZER_BYTES, missing: Optional[str] = None) -> bytes:
    """The bytes of folder/name (folder_file's rule), at most `limit` of them, or one line."""
    path = folder_file(folder, name, missing)
    data = read_regular(path, limit, missing or _missing(path), HF_FOLDER)
    if len(data) > limit:
        raise Seq2OnnxError(f"{path} has more than {limit} bytes, more than a model's {name} holds; {DOWNLOAD}")
    return data


def read_json(folder: Path, name: str, limit: int = MAX_TOKENIZER_BYTES, missing: Optional[str] = None) -> Any:
    """folder/name parsed as JSON (read_bytes), or one line."""
    path = folder / name
    data = read_bytes(folder, name, limit, missing)
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise Seq2OnnxError(f"{path} cannot be read as JSON ({e}); {DOWNLOAD}") from None
    except RecursionError:               # deeper than the parser goes (~1000 levels): no model file nests so
        raise Seq2OnnxError(f"{path} nests lists and objects more deeply than JSON is read here; {DOWNLOAD}") \
            from None


def read_optional_json(folder: Path, name: str) -> Any:
    """folder/name as read_json, or {} where the folder has no such file (nor a link of that name)."""
    return read_json(folder, name) if os.path.lexists(folder / name) else {}


def tokenizer_config(folder: Path) -> Dict[str, Any]:
    """tokenizer_config.json ({} where the folder has none), an object."""
    config = read_optional_json(folder, "tokenizer_config.json")
    if not isinstance(config, dict):
        raise Seq2OnnxError(f"{folder / 'tokenizer_config.json'} should be an object, got {type(config).__name__}; "
                            f"{DOWNLOAD}")
    return config


def check_folder(folder: Path) -> None:
    """Every entry of the folder is a folder or a regular file (check_regular): transformers opens the files it
    wants by name, so none may be a link to elsewhere, a FIFO or a device."""
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_FOLDER_ENTRIES:
                    raise Seq2OnnxError(f"{folder} holds more than {MAX_FOLDER_ENTRIES} entries, more than a "
                                        f"transformers model folder: pass the model's own folder")
                if not entry.is_dir(follow_symlinks=False):
                    check_regular(Path(entry.path), _missing(Path(entry.path)), HF_FOLDER)
    except OSError as e:
        raise Seq2OnnxError(f"{folder} cannot be listed ({e.strerror}): pass a readable model folder") from None


def _spm_proto(path: Path, model_type: int) -> Any:
    import sentencepiece
    from transformers.convert_slow_tokenizer import import_protobuf

    data = read_bytes(path.parent, path.name)
    try:
        proto = import_protobuf().ModelProto()
        proto.ParseFromString(data)
        if not proto.pieces:
            raise ValueError("it holds no pieces")
        sentencepiece.SentencePieceProcessor(model_proto=data)         # what transformers' tokenizers load
    except Exception as e:  # noqa: BLE001 - protobuf and sentencepiece raise their own kinds
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise Seq2OnnxError(f"{path} is not a SentencePiece model ({reason}); {DOWNLOAD}") from None
    kind = {SPM_UNIGRAM: "unigram", SPM_BPE: "BPE"}
    if proto.trainer_spec.model_type != model_type:
        raise Seq2OnnxError(f"{path} is a SentencePiece {kind.get(proto.trainer_spec.model_type, 'char/word')} model;"
                            f" this architecture's tokenizer is {kind[model_type]}: the folder is not a model "
                            "seq2onnx convert knows")
    if proto.trainer_spec.byte_fallback:
        raise Seq2OnnxError(f"{path} uses byte fallback, which MarianTokenizer / M2M100Tokenizer do not: the folder "
                            "is not a model seq2onnx convert knows")
    if proto.trainer_spec.treat_whitespace_as_suffix or not proto.normalizer_spec.escape_whitespaces:
        raise Seq2OnnxError(f"{path} puts whitespace after pieces or does not mark it: the folder is not a model "
                            "seq2onnx convert knows")
    return proto


def _vocab_ids(path: Path, size: int, field_name: str) -> Dict[str, int]:
    """vocab.json: token -> id, the ids exactly 0..n-1, n at most the model's vocabulary (config.json's
    `field_name`, `size`): checked before anything is built from it."""
    vocab = read_json(path.parent, path.name)
    if not isinstance(vocab, dict):
        raise Seq2OnnxError(f"{path} should map tokens to ids, got {type(vocab).__name__}; {DOWNLOAD}")
    if len(vocab) > size:
        raise Seq2OnnxError(f"{path} has {len(vocab)} tokens but config.json's {field_name} is {size}: the "
                            f"vocabulary does not belong to this model; {DOWNLOAD}")
    ids = vocab.values()
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or sorted(ids) != list(range(len(vocab))):
        raise Seq2OnnxError(f"{path}: its ids are not exactly 0..{len(vocab) - 1}, one per token; {DOWNLOAD}")
    return vocab


# --- the parts every SentencePiece JSON shares ------------------------------------------------------------
def _normalizer(proto) -> Optional[normalizers.Normalizer]:
    """SentencePiece's normalization: the charsmap, then remove_extra_whitespaces."""
    spec = proto.normalizer_spec
    parts: List[normalizers.Normalizer] = []
    if spec.precompiled_charsmap:
        parts.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        parts += [normalizers.Replace(Regex(COLLAPSE_SPACES), " "), normalizers.Replace(Regex(EDGE_SPACES), "")]
    return normalizers.Sequence(parts) if parts else None


def _pre_tokenizer(proto) -> pre_tokenizers.PreTokenizer:
    # split=True: a piece holds U+2581 only at its start (split_by_whitespace), so words segment alone
    scheme = "always" if proto.normalizer_spec.add_dummy_prefix else "never"
    return pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme=scheme, split=True)


def _decoder(unmark: bool) -> decoders.Decoder:
    """convert_tokens_to_string of the slow tokenizers: pieces joined, U+2581 -> space, stripped of spaces (not by
    a Strip decoder: tokenizers 0.23's panics on an empty text)."""
    parts = [decoders.Replace(MARKER, "")] if unmark else []
    return decoders.Sequence(parts + [decoders.Replace(SPACE, " "), decoders.Fuse(),
                                      decoders.Replace(Regex(EDGE_SPACES), "")])


def _assemble(model, proto, specials: Sequence[str], unmark: bool) -> Tokenizer:
    tokenizer = Tokenizer(model)
    normalizer = _normalizer(proto)
    if normalizer is not None:
        tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = _pre_tokenizer(proto)
    tokenizer.decoder = _decoder(unmark)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tokenizer


def _check_words(path: Path, pieces: Mapping[str, Any]) -> None:
    inner = next((p for p in pieces if SPACE in p[1:]), None)
    if inner is not None:
        raise Seq2OnnxError(f"{path}: the piece {inner!r} holds whitespace inside it (not split_by_whitespace); "
                            "seq2onnx convert knows SentencePiece models whose pieces are parts of words")


# --- Marian ------------------------------------------------------------------------------------------------------
def marian_side(spm_path: Path, vocab: Mapping[str, int], specials: Sequence[str]) -> Tuple[Tokenizer, List[str]]:
    """The tokenizer of one side of a Marian model (its SentencePiece model, the vocabulary of that side) in the
    vocabulary's ids, and notes on what it cannot make exact."""
    proto = _spm_proto(spm_path, SPM_UNIGRAM)
    pieces = {p.piece: p.score for p in proto.pieces if p.type == SPM_NORMAL}
    _check_words(spm_path, pieces)
    by_id = sorted(vocab, key=vocab.__getitem__)
    entries: List[Tuple[str, float]] = []
    for token in by_id:
        if token in pieces:
            entries.append((token, pieces[token]))
        elif token in specials or all(c not in pieces for c in token):       # specials; surfaces of unknown runs
            entries.append((token, UNREACHABLE_SCORE))
        else:                                                                 # the other side's pieces
            entries.append((MARKER + token, UNREACHABLE_SCORE))
    marked = next((t for t in by_id if MARKER in t), None)
    if marked is not None:
        raise Seq2OnnxError(f"{spm_path.parent / 'vocab.json'}: the token {marked!r} holds two U+2581 in a row, "
                            "which no SentencePiece piece does: download the model again")
    missing = [p for p in pieces if p not in vocab]
    notes = [f"{spm_path.name}: {len(missing)} of its pieces are not in the vocabulary (e.g. {missing[0]!r}); "
             "MarianTokenizer gives them <unk>, the converted tokenizer segments the text without them"] \
        if missing else []
    model = Unigram(entries, unk_id=vocab["<unk>"], byte_fallback=False)
    return _assemble(model, proto, [t for t in by_id if t in specials], unmark=True), notes


def _marian_tag_code(token: str) -> Optional[str]:
    start, end = MARIAN_TAG
    return token[len(start):-len(end)] if token.startswith(start) and token.endswith(end) and len(token) > 4 else None


def convert_marian(folder: Path, hf_config: Mapping[str, Any]) -> ConvertedTokenizers:
    config = tokenizer_config(folder)
    separate = bool(config.get("separate_vocabs", hf_config.get("share_encoder_decoder_embeddings") is False))
    src_vocab = _vocab_ids(folder / "vocab.json", hf_config["vocab_size"], "vocab_size")
    target_size = hf_config.get("decoder_vocab_size") or hf_config["vocab_size"]
    tgt_vocab = _vocab_ids(folder / "target_vocab.json", target_size, "decoder_vocab_size") if separate else src_vocab
    roles = {"pad": str(config.get("pad_token", "<pad>")), "eos": str(config.get("eos_token", "</s>")),
             "unk": str(config.get("unk_token", "<unk>"))}
    for vocab, name in ((src_vocab, "vocab.json"), (tgt_vocab, "target_vocab.json")):
        absent = [t for t in roles.values() if t not in vocab]
        if absent:
            raise Seq2OnnxError(f"{folder / name} has no {absent[0]} token: download the model again")
    tags = {code: t for t in src_vocab if (code := _marian_tag_code(t)) is not None} if not separate else {}
    specials = [*roles.values(), *tags.values()]
    source, src_notes = marian_side(folder / "source.spm", src_vocab, specials)
    target, tgt_notes = marian_side(folder / "target.spm", tgt_vocab, list(roles.values()))
    files = {"source_tokenizer.json": source.to_str(), "target_tokenizer.json": target.to_str()}
    source_lang, target_lang = config.get("source_lang"), config.get("target_lang")
    if tags:
        languages = Languages(source=(source_lang,) if source_lang else (), target=tuple(tags), tokens=tags,
                              target_token="source_prefix", default_source=source_lang,
                              default_target=target_lang if target_lang in tags else None)
    elif source_lang or target_lang:
        languages = Languages(source=(source_lang,) if source_lang else (),
                              target=(target_lang,) if target_lang else (),
                              default_source=source_lang, default_target=target_lang)
    else:
        languages = None
    special_ids = sorted({src_vocab[t] for t in specials} | {tgt_vocab[t] for t in roles.values()})
    return ConvertedTokenizers(
        files, Tokenizers("source_tokenizer.json", "target_tokenizer.json").to_manifest(), roles,
        {role: tgt_vocab[t] for role, t in roles.items()}, languages, special_ids, src_notes + tgt_notes)


# --- M2M100 --------------------------------------------------------------------------------------------------------
def _spm_merges(path: Path) -> List[Tuple[str, str]]:
    """The merges of a SentencePiece BPE model, in its order (transformers' own extraction)."""
    from transformers.convert_slow_tokenizer import SentencePieceExtractor
    from tokenizers.models import BPE as BPEModel

    return [tuple(m) for m in SentencePieceExtractor(str(path)).extract(BPEModel)["merges"]]


def convert_m2m100(folder: Path, hf_config: Mapping[str, Any]) -> ConvertedTokenizers:
    from transformers import M2M100Tokenizer

    spm_path, vocab_path = folder / "sentencepiece.bpe.model", folder / "vocab.json"
    proto = _spm_proto(spm_path, SPM_BPE)
    vocab = _vocab_ids(vocab_path, hf_config["vocab_size"], "vocab_size")
    slow = load_hf_tokenizer(M2M100Tokenizer, folder)            # the language codes it was saved with
    config = tokenizer_config(folder)
    pieces = [p.piece for p in proto.pieces if p.type == SPM_NORMAL]
    _check_words(spm_path, dict.fromkeys(pieces))
    merges = [m for m in _spm_merges(spm_path) if m[0] in vocab and m[1] in vocab and "".join(m) in vocab]
    missing = [p for p in pieces if p not in vocab]
    notes = [f"{spm_path.name}: {len(missing)} of its pieces are not in vocab.json (e.g. {missing[0]!r}); "
             "M2M100Tokenizer gives them <unk>, the converted tokenizer segments the text without them"] \
        if missing else []
    roles = {"pad": str(slow.pad_token), "bos": str(slow.bos_token), "eos": str(slow.eos_token),
             "unk": str(slow.unk_token)}
    model = BPE(vocab=dict(vocab), merges=merges, unk_token=roles["unk"], fuse_unk=True, byte_fallback=False,
                dropout=None)
    lang_tokens = {code: slow.get_lang_token(code) for code in slow.lang_code_to_id}
    fillers = [MADEUP_WORD.format(i) for i in range(slow.num_madeup_words)]
    specials = [*roles.values(), *lang_tokens.values(), *fillers]
    tokenizer = _assemble(model, proto, specials, unmark=False)
    for code, token in lang_tokens.items():
        if tokenizer.token_to_id(token) != slow.lang_code_to_id[code]:
            raise Seq2OnnxError(f"{folder}: language token {token} would get id {tokenizer.token_to_id(token)}, "
                                f"M2M100Tokenizer gives {slow.lang_code_to_id[code]}: the vocab.json does not fit")
    tokenizer = _fill(tokenizer, int(hf_config["vocab_size"]), folder)
    languages = Languages(source=tuple(lang_tokens), target=tuple(lang_tokens), tokens=lang_tokens,
                          source_token=True, target_token="forced_bos",
                          default_source=config.get("src_lang"), default_target=config.get("tgt_lang"))
    return _single(tokenizer, roles, languages, specials, notes)


def _fill(tokenizer: Tokenizer, vocab_size: int, folder: Path) -> Tokenizer:
    """The tokenizer with FILLER tokens for the model's ids past its own (NLLB-200's vocab_size is 2 larger)."""
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    if size > vocab_size:
        raise Seq2OnnxError(f"{folder}: the tokenizer has {size} tokens but config.json's vocab_size is {vocab_size}: "
                            "the tokenizer does not belong to this model")
    tokenizer.add_special_tokens([AddedToken(FILLER.format(i), special=True, normalized=False)
                                  for i in range(size, vocab_size)])
    return tokenizer


def _single(tokenizer: Tokenizer, roles: Dict[str, str], languages: Optional[Languages], specials: Sequence[str],
            notes: List[str]) -> ConvertedTokenizers:
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    filler = FILLER.split("{")[0]
    ids = sorted({vocab[t] for t in specials} | {i for t, i in vocab.items() if t.startswith(filler)})
    return ConvertedTokenizers({"tokenizer.json": tokenizer.to_str()}, Tokenizers("tokenizer.json",
                               "tokenizer.json").to_manifest(), roles, {r: vocab[t] for r, t in roles.items()},
                               languages, ids, notes)


# --- NLLB ------------------------------------------------------------------------------------------------------------
def convert_nllb(folder: Path, hf_config: Mapping[str, Any]) -> ConvertedTokenizers:
    from transformers import NllbTokenizer

    hf = load_hf_tokenizer(NllbTokenizer, folder)
    data = json.loads(hf.backend_tokenizer.to_str())
    data["post_processor"] = None                     # the runtime adds the language token and EOS itself
    tokenizer = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
    roles = {"pad": str(hf.pad_token), "bos": str(hf.bos_token), "eos": str(hf.eos_token), "unk": str(hf.unk_token)}
    codes = [str(t) for t in hf.extra_special_tokens if _is_nllb_code(str(t))]
    if not codes:
        raise Seq2OnnxError(f"{folder}: its NLLB tokenizer names no language codes (eng_Latn, ...): download the "
                            "model's tokenizer files again")
    tokenizer = _fill(tokenizer, int(hf_config["vocab_size"]), folder)
    config = tokenizer_config(folder)
    languages = Languages(source=tuple(codes), target=tuple(codes), tokens={c: c for c in codes},
                          source_token=True, target_token="forced_bos",
                          default_source=config.get("src_lang"), default_target=config.get("tgt_lang"))
    specials = [str(t) for t in hf.all_special_tokens] + codes
    return _single(tokenizer, roles, languages, specials, [])


def _is_nllb_code(token: str) -> bool:
    language, _, script = token.partition("_")
    return len(language) == 3 and language.isalpha() and language.islower() and len(script) == 4 \
        and script.isalpha() and script[0].isupper() and script[1:].islower()


# --- the entry point -------------------------------------------------------------------------------------------
def convert(folder, hf_config: Mapping[str, Any]) -> ConvertedTokenizers:
    """The converted tokenizers of a transformers model folder (config.json read as hf_config), checked that every
    regular expression they hold is one the runtime allows."""
    folder = Path(folder)
    kind = hf_config.get("model_type")
    config = tokenizer_config(folder)
    tokenizer_class = str(config.get("tokenizer_class", ""))
    if kind == "marian":
        converted = convert_marian(folder, hf_config)
    elif kind == "m2m_100" and (tokenizer_class.startswith("Nllb") or not os.path.lexists(folder / "vocab.json")):
        converted = convert_nllb(folder, hf_config)
    elif kind == "m2m_100":
        converted = convert_m2m100(folder, hf_config)
    else:
        raise Seq2OnnxError(f"{folder}: model_type {kind!r} has no tokenizer seq2onnx convert knows (marian, m2m_100)")
    for name, text in converted.files.items():
        foreign = foreign_regex(json.loads(text))
        if foreign is not None:       # a tokenizer.json of a newer transformers: say so rather than write it
            raise Seq2OnnxError(f"{folder}: its tokenizer's {foreign[0]} uses the regular expression {foreign[1]!r}, "
                                f"which the runtime does not allow ({', '.join(map(repr, ALLOWED_REGEXES))})")
    check_against_transformers(folder, converted, kind == "marian")
    return converted


# texts whose ids the converted tokenizers must give as transformers' own do (plain words, digits and punctuation:
# where a conversion is exact for every model, hf_tokenizers' notes aside)
CHECK_TEXTS = ("Hello, world!", "The file could not be opened.", "Save 3 copies of it, then close the window.")


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logging (its load reports), Python warnings and prints held back while it reads a folder, so
    that a refusal is one line of ours."""
    import logging

    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def load_hf_tokenizer(cls: Any, folder: Path) -> Any:
    """transformers' tokenizer `cls` (AutoTokenizer, M2M100Tokenizer...) of the folder, read from it alone, or one
    line."""
    try:
        with quiet_transformers():
            return cls.from_pretrained(str(folder), local_files_only=True)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds
        raise Seq2OnnxError(f"transformers cannot load the tokenizer of {folder} ({first_line(e) or type(e).__name__})"
                            f"; {DOWNLOAD}") from None


def check_against_transformers(folder: Path, converted: ConvertedTokenizers, marian: bool) -> None:
    """The converted tokenizers give the ids of transformers' own tokenizer of the folder (no special tokens added)
    on CHECK_TEXTS, source and target side: a tokenizer file that is not the model's (empty, another model's) shows
    here, before anything is written."""
    from transformers import AutoTokenizer

    hf = load_hf_tokenizer(AutoTokenizer, folder)
    sides = [("source", converted.source_tokenizer(), {})]
    if marian:
        sides.append(("target", converted.target_tokenizer(), {"text_target": True}))
    for side, ours, how in sides:
        for text in CHECK_TEXTS:
            with quiet_transformers():
                theirs = list(hf(**({"text_target": text} if how else {"text": text}),
                                 add_special_tokens=False).input_ids)
            mine = ours.encode(text).ids
            if mine != theirs:
                raise Seq2OnnxError(f"{folder}: the converted {side} tokenizer gives {text!r} the ids {mine[:8]}, "
                                    f"transformers' {type(hf).__name__} {theirs[:8]}: the folder's tokenizer files do "
                                    f"not agree with each other; {DOWNLOAD}")
