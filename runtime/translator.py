"""Translator: the public API of the runtime (text in, text out), in CTranslate2's terms.

    tr = Translator("models/numbers-en-de", device="auto", compute_type="default")
    tr.translate("three hundred and one")                                   # -> str
    tr.translate_batch(texts, beam_size=4, num_hypotheses=2, return_scores=True)   # -> [TranslationResult]
    for piece in tr.generate_tokens(text, beam_size=4): ...                  # streaming

One Translator may be used from many threads at once: it holds only the read-only package and
the onnxruntime sessions (which are thread-safe); every call keeps its state local.

Awkward input has a defined result (docs/CONTRACTS.md, "Runtime input"):
  * a text with nothing but whitespace ("" included) is not translated: one empty hypothesis, score 0;
  * a lone surrogate (a str that is not valid Unicode, e.g. from surrogateescape) becomes U+FFFD,
    with a warning naming the input;
  * characters the tokenizer never saw (emoji, CJK, control characters, NUL) become its <unk> piece;
  * a text over max_input_length tokens is cut to it (EOS kept), with a warning naming the input;
    only a prefix of a long text is tokenized (`token_ids`), so its length costs no memory or time.
"""
from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .decode.alignment import hard_alignment, word_index
from .decode.constraints import check_phrase_ids, check_work, normalize_phrases, require_beam, split_work
from .decode.decoding import TextStream, decode, decode_steps, score
from .decode.search import Hypothesis
from .errors import ModelPackageError
from .package.manifest import UNCHECKED, ModelPackage, read_package
from .results import ScoringResult, TranslationResult
from .options import (DEFAULT_MAX_BATCH_SIZE, MAX_CHARS_PER_TOKEN, Arg, BatchType, DecodingOptions, OptionError,
                      OptionTypeError, OptionWarning, TranslationOptions, check_choice, check_count, check_ids,
                      check_text, with_defaults)
from .engine.loader import open_engine
from .engine.session import SessionConfig, check_onnxruntime, onnxruntime_version, resolve_device
from .text_input import TranslateRequest, is_blank, max_source_chars, split_batches, token_ids  # noqa: F401 (callers import them here)

if TYPE_CHECKING:
    import onnxruntime as ort

log = logging.getLogger("seq2onnx.runtime")

# compute_type -> package variant; "default" is fp16 on CUDA when the package has it, else fp32
COMPUTE_TYPES = {"default": None, "float32": "fp32", "int8": "int8", "float16": "fp16"}
MAX_THREADS = 4 * (os.cpu_count() or 1)     # intra/inter-op threads: more only thrash (10**6 hangs onnxruntime)
SURROGATE = re.compile("[\ud800-\udfff]")


def pick_variant(package: ModelPackage, compute_type: str, device: str) -> str:
    check_choice("compute_type", compute_type, COMPUTE_TYPES)
    name = COMPUTE_TYPES[compute_type]
    if name is None:
        name = "fp16" if device == "cuda" and "fp16" in package.variants else "fp32"
    if name == "fp16" and device != "cuda":
        raise OptionError(Arg("compute_type"), " float16 runs on CUDA only; use ", Arg("device"), " cuda, or ",
                          Arg("compute_type"), " float32 / int8 on the CPU")
    if name == "int8" and device == "cuda":
        raise OptionError(Arg("compute_type"), " int8 runs on the CPU only; use ", Arg("device"), " cpu, or ",
                          Arg("compute_type"), " float16 on CUDA")
    if name not in package.variants:
        available = ", ".join(f"{v} ({package.variants[v].precision})" for v in package.variants)
        raise ModelPackageError(f"{package.root} has no {compute_type} variant; it has {available} "
                                f"(export with --int8 / --fp16 to add one)")
    return name


def _check_per_source(name: str, value: Any, n: int, entry: str, per: str = "source") -> None:
    """`value` one entry per source (a list or tuple of n)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise OptionTypeError(Arg(name), f" must be a list of one {entry} per {per}, got {type(value).__name__}")
    if len(value) != n:
        raise OptionError(Arg(name), f" must hold one {entry} per {per} ({n}), got {len(value)}")


class Translator:
    def __init__(self, model_dir: Union[str, os.PathLike], device: str = "auto", compute_type: str = "default",
                 intra_threads: int = 0, inter_threads: int = 1, device_id: int = 0, verify: bool = True,
                 optimization: str = "all"):
        """Load a model package (written by `seq2onnx export`).

        device: "auto" (CUDA when usable, else CPU; int8 always picks the CPU), "cpu", "cuda".
        compute_type: "default", "float32", "int8" (CPU), "float16" (CUDA).
        intra_threads: onnxruntime intra-op threads (0: its default); inter_threads: inter-op threads;
            each at most 4 x the CPU cores (MAX_THREADS).
        verify: check the SHA-256 of the files loaded against the manifest.
        optimization: onnxruntime graph optimisation level (disable, basic, extended, all).
        """
        check_count("intra_threads", intra_threads, 0, MAX_THREADS)
        check_count("inter_threads", inter_threads, 1, MAX_THREADS)
        check_count("device_id", device_id, 0)
        check_choice("optimization", optimization, ("disable", "basic", "extended", "all"))
        check_choice("compute_type", compute_type, tuple(COMPUTE_TYPES))
        self.package = read_package(model_dir, verify=verify)
        self.config = self.package.config
        self.device = "cpu" if device == "auto" and compute_type == "int8" else resolve_device(device, device_id)
        self.variant = pick_variant(self.package, compute_type, self.device)
        v = self.package.variants[self.variant]
        if v.status in UNCHECKED:
            warnings.warn(f"{self.package.root}: the {self.variant} variant {UNCHECKED[v.status]}; its tokens may "
                          f"differ from float32 more than the export's thresholds allow", stacklevel=2)
        check_onnxruntime(v.min_onnxruntime, f"{self.package.root}: the {self.variant} variant")
        sc = SessionConfig(self.device, device_id, intra_threads, inter_threads, optimization)
        few_rows = None               # a second decoder step for steps of few rows, where this onnxruntime runs it
        if v.few_rows is not None and self.device == "cpu" and onnxruntime_version() >= v.few_rows.min_onnxruntime:
            few_rows = (v.few_rows.decoder_step, v.few_rows.max_rows)
        # each graph read once, checked, and handed to onnxruntime as those bytes (ModelPackage.read_graph)
        self.engine = open_engine(v.encoder, v.decoder_step, self.config, sc,
                                  cross_per_sentence=self.package.cross_per_sentence, read=self.package.read_graph,
                                  decoder_format=self.package.decoder_format, few_rows=few_rows)
        self.package.release_shared()
        for session, path in zip(self.engine.decoders, (v.decoder_step, few_rows and few_rows[0])):
            self._check_graph_vocab(session, path)
            self._check_graph_cross_axis(session, path)
        self.tokenizer = self.package.tokenizer          # source texts -> ids
        self.detokenizer = self.package.detokenizer      # output ids -> text, and target texts -> ids
        # self.engine: the decoding engine (engine/base.py Engine), for id-level use with decoding.decode
        log.info("seq2onnx: %s runs on %s (variant %s, %s)", self.package.root, self.device, self.variant, v.precision)

    def _check_graph_cross_axis(self, decoder: ort.InferenceSession, decoder_path: Optional[Path]) -> None:
        """A manifest that says cross K/V are per sentence needs a graph whose cross inputs have their own
        batch axis: a graph of the earlier contract fails at the first beam step of a batch."""
        if not self.package.cross_per_sentence:
            return
        dims = {i.name: i.shape for i in decoder.get_inputs()}
        rows, sentences = dims["input_ids"][0], dims["encoder_attention_mask"][0]
        if isinstance(rows, str) and rows == sentences:
            raise ModelPackageError(f"{decoder_path}: the manifest says the decoder step takes cross K/V once per "
                                    f"sentence, but the graph's encoder_attention_mask and input_ids share the "
                                    f"batch axis {rows!r}: the graph and the manifest do not belong together; "
                                    f"re-export the model with `seq2onnx export`")

    def _check_graph_vocab(self, decoder: ort.InferenceSession, decoder_path: Optional[Path]) -> None:
        """The decoder's log-probs must cover exactly the tokenizer's ids (a swapped tokenizer.json or an
        edited manifest would otherwise decode ids that mean other pieces, or none)."""
        dims = decoder.get_outputs()[0].shape
        width = dims[-1] if dims else None
        if isinstance(width, int) and width != self.config.vocab_size:
            raise ModelPackageError(f"{decoder_path}: the graph scores {width} tokens per step but {self.package.root} "
                                    f"has a tokenizer and config of {self.config.vocab_size}: the tokenizer does not "
                                    f"belong to this model; re-export the model with `seq2onnx export`")

    # --- text <-> ids --------------------------------------------------------------------------
    def _check_texts(self, texts: Sequence[str]) -> List[str]:
        """Each text must be a str; lone surrogates (not encodable as UTF-8) become U+FFFD, with a warning."""
        if isinstance(texts, str):
            raise OptionTypeError(Arg("texts"), " must be a list of str, got one str: wrap it in a list, or call "
                                  "translate()")
        checked = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise OptionTypeError(Arg("texts", f"[{i}]"), f" must be str, got {type(t).__name__}")
            if SURROGATE.search(t):
                warnings.warn(f"input {i} is not valid Unicode (lone surrogates); they were replaced with U+FFFD",
                              stacklevel=3)
                t = SURROGATE.sub("\ufffd", t)
            checked.append(t)
        return checked

    def _sources(self, texts: Sequence[str], max_input_length: Optional[int],
                 numbers: Optional[Sequence[int]] = None, prefix: Sequence[int] = ()) -> Tuple[List[List[int]], List[bool]]:
        """texts -> source ids (prefix: language tokens, then the text's, then EOS), cut to max_input_length ids (the
        prefix and EOS kept) with a warning naming the input (its number in `numbers`, default its position)."""
        limit = self._input_limit(max_input_length)
        sources, truncated = [], []
        for j, (ids, cut) in enumerate(zip(*token_ids(self.tokenizer, texts, limit))):
            ids = list(prefix) + ids
            i = j if numbers is None else numbers[j]
            if len(ids) + 1 > limit:
                count = f"more than {limit}" if cut else f"{len(ids) + 1}"
                warnings.warn(OptionWarning(f"input {i} has {count} tokens (EOS included); truncated to ",
                                            Arg("max_input_length"), f"={limit}"), stacklevel=3)
            elif cut:
                warnings.warn(OptionWarning(f"input {i} is longer than {max_source_chars(limit)} characters (",
                                            Arg("max_input_length"), f"={limit} x {MAX_CHARS_PER_TOKEN}); the rest "
                                            "was not translated"), stacklevel=3)
            truncated.append(cut or len(ids) + 1 > limit)
            sources.append(ids[:limit - 1] + [self.config.eos_id])
        return sources, truncated

    def _input_limit(self, max_input_length: Optional[int]) -> int:
        """The source ids kept (EOS included): max_input_length, 1..max_positions; None: max_positions."""
        limit = self.config.max_positions if max_input_length is None else max_input_length
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= self.config.max_positions:
            raise OptionError(Arg("max_input_length"), f" must be an integer in [1, {self.config.max_positions}] "
                              f"(the model's max_positions), got {max_input_length!r}")
        return limit

    def prefix_ids(self, target_prefix: Optional[Sequence[Optional[str]]], n: int) -> Optional[List[List[int]]]:
        if target_prefix is None:
            return None
        args = [Arg("target_prefix", f"[{i}]", p) for i, p in enumerate(target_prefix)]
        return self._target_ids(args, self._prefix_texts(target_prefix, n), "start with it")

    @staticmethod
    def _prefix_texts(target_prefix: Sequence[Optional[str]], n: int) -> List[str]:
        """target_prefix: one str (or None: "") per input, each valid text."""
        _check_per_source("target_prefix", target_prefix, n, "str (or None)", "input")
        return ["" if p is None else check_text(Arg("target_prefix", f"[{i}]"), p) for i, p in enumerate(target_prefix)]

    def _target_ids(self, args: Sequence[Arg], texts: Sequence[str], what: str) -> List[List[int]]:
        """Target texts tokenized alone (a target prefix, a constraint phrase), or a one-line error naming the one
        the vocabulary cannot spell: a character it lacks would become <unk>, and detokenized text drops <unk>
        (the translation would not hold the text asked for); or one longer than a translation can be."""
        limit = self.config.max_positions
        ids, cut = token_ids(self.detokenizer, texts, limit)
        for arg, x, c in zip(args, ids, cut):
            if c or len(x) > limit:
                raise OptionError(arg, f" is longer than a translation can be (the model's max_positions, {limit} "
                                  "tokens)")
            if self.config.unk_id in x:
                raise OptionError(arg, " has characters the model's tokenizer does not know (they become <unk>): no "
                                  f"translation can {what}")
        return ids

    def constraint_ids(self, constraints: Any, n: int) -> Optional[List[List[List[int]]]]:
        """Per input its phrases' ids: each phrase tokenized alone as target text (constraints.py says why)."""
        if constraints is None:
            return None
        limit = self.config.max_positions
        out = []
        for i, phrases in enumerate(normalize_phrases(constraints, n, limit, max_source_chars(limit))):
            out.append(self._target_ids([Arg("constraints", f"[{i}][{j}]", p) for j, p in enumerate(phrases)],
                                        phrases, "hold it"))
        return self._check_constraint_ids("constraints", out, n)

    def _check_constraint_ids(self, name: str, constraint_ids: Any, n: int) -> List[List[List[int]]]:
        cfg = self.config
        return check_phrase_ids(name, constraint_ids, n, cfg.vocab_size, (cfg.pad_id, cfg.bos_id, cfg.eos_id),
                                cfg.max_positions)

    def _check_id_batch(self, sources: Sequence[Sequence[int]]) -> List[List[int]]:
        """What translate_ids and score_ids take alike: the source id lists (-> as lists)."""
        if isinstance(sources, (str, bytes)) or not isinstance(sources, (list, tuple)):
            raise OptionTypeError(Arg("sources"), f" must be a list of id lists, got {type(sources).__name__}")
        return [check_ids(Arg("sources", f"[{i}]"), s, self.config.source_vocab_size, self.config.max_positions, 1)
                for i, s in enumerate(sources)]

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.detokenizer.decode(list(ids))

    def pieces(self, ids: Sequence[int], source: bool = False) -> List[str]:
        """The target tokenizer's piece of each id ("▁drei", "hundert", "</s>"); source=True: the source one's."""
        tokenizer = self.tokenizer if source else self.detokenizer
        return [tokenizer.id_to_token(int(i)) for i in ids]

    def source_words(self, text: str, source_lang: Optional[str] = None, target_lang: Optional[str] = None
                     ) -> List[Optional[Tuple[int, int]]]:
        """Where each source word that return_alignment's pairs number lies in `text`: (start, end) in characters,
        white space around it left out; None for a word of the language tokens that start the source (NLLB's,
        Marian's >>fra<<) or one without characters. The words of a text cut to max_input_length are all listed."""
        prefix, _ = self._languages(source_lang, target_lang)
        encoding = self.tokenizer.encode(text)
        spans: List[Optional[Tuple[int, int]]] = [None] * len(prefix) + [tuple(o) for o in encoding.offsets]
        words: List[Optional[Tuple[int, int]]] = []
        for word, span in zip(word_index(self.pieces(prefix, source=True) + list(encoding.tokens)), spans):
            if word == len(words):
                words.append(None)
            if span is not None and span[1] > span[0]:
                old = words[word]
                words[word] = span if old is None else (min(old[0], span[0]), max(old[1], span[1]))
        for i, span in enumerate(words):
            if span is not None:
                start, end = span
                while start < end and text[start].isspace():
                    start += 1
                while end > start and text[end - 1].isspace():
                    end -= 1
                words[i] = (start, end) if end > start else None
        return words

    def _languages(self, source_lang: Optional[str], target_lang: Optional[str]) -> Tuple[List[int], Dict[str, Any]]:
        """The ids that start every source (NLLB's source language token, Marian's >>fra<< target tag) and the
        decoding options the target language sets (forced_bos_id: M2M100 / NLLB), from the package's languages."""
        langs, ids = self.package.languages, self.package.language_ids
        if langs is None:
            given = "source_lang" if source_lang is not None else "target_lang" if target_lang is not None else None
            if given:
                raise OptionError(Arg(given), " cannot be checked: this model's package records no languages "
                                  "(export it with --source-lang and --target-lang)")
            return [], {}
        source = langs.pick("source", source_lang, "source_lang")
        target = langs.pick("target", target_lang, "target_lang")
        prefix = [ids[source]] if langs.source_token and source is not None else []
        if target is None:                  # the model needs no target language (pick raises where it does)
            return prefix, {}
        if langs.target_token == "source_prefix":
            prefix.append(ids[target])
        return prefix, ({"forced_bos_id": ids[target]} if langs.target_token == "forced_bos" else {})

    def _decoding(self, decoding: Dict[str, Any]) -> Dict[str, Any]:
        """The package's generation defaults (a converted model: what its generate() does), then the call's
        (options.with_defaults: sampling without a beam_size decodes with beam size 1)."""
        return with_defaults(decoding, self.package.generation)

    def _decoding_options(self, accepts: Callable[..., Any], decoding: Dict[str, Any]) -> DecodingOptions:
        """A call's decoding options over the package's defaults, checked, the ids they name against this model's
        vocabulary too (accepts: the API method, named in an unknown option's error)."""
        return DecodingOptions.from_kwargs(accepts, **self._decoding(decoding)).check_vocabulary(self.config.vocab_size)

    def source_ids(self, text: str, max_input_length: Optional[int] = None) -> List[int]:
        """The ids translate_batch decodes for `text`: its pieces, cut to max_input_length, and EOS."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")                     # translate_batch warns about the cut
            return self._sources(self._check_texts([text]), max_input_length)[0][0]

    # --- the API ---------------------------------------------------------------------------------
    def translate_ids(self, sources: Sequence[Sequence[int]], max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                      batch_type: BatchType = "examples",
                      target_prefix_ids: Optional[Sequence[Sequence[int]]] = None,
                      constraint_ids: Optional[Sequence[Optional[Sequence[Sequence[int]]]]] = None,
                      **decoding: Any) -> List[List[Hypothesis]]:
        """Id-level translation: sources are id lists ending with EOS (docs/CONTRACTS.md).
        Returns per source up to num_hypotheses Hypothesis(tokens, score, normalized_score, finished).
        max_batch_size: examples (or padded source tokens, batch_type "tokens") decoded at once; the
        default keeps memory flat however many sources; 0 decodes them all in one batch.
        constraint_ids: per source its phrases (id lists, or None), which every hypothesis must hold
        (translate_batch's constraints; Hypothesis.missing_constraints counts those it does not)."""
        options = self._decoding_options(self.translate_ids, decoding)
        call = TranslationOptions(max_batch_size=max_batch_size, batch_type=batch_type)
        return self._translate_ids(sources, call, target_prefix_ids, constraint_ids, options)

    def _translate_ids(self, sources: Sequence[Sequence[int]], call: TranslationOptions,
                       target_prefix_ids: Optional[Sequence[Sequence[int]]],
                       constraint_ids: Optional[Sequence[Optional[Sequence[Sequence[int]]]]],
                       options: DecodingOptions) -> List[List[Hypothesis]]:
        """translate_ids with its records: the ids checked, decoded in batches of call's batching."""
        sources = self._check_id_batch(sources)
        cfg = self.config
        if target_prefix_ids is not None:
            _check_per_source("target_prefix_ids", target_prefix_ids, len(sources), "id list")
            target_prefix_ids = [[] if p is None else
                                 check_ids(Arg("target_prefix_ids", f"[{i}]"), p, cfg.vocab_size, cfg.max_positions,
                                           never=(cfg.pad_id, cfg.bos_id, cfg.eos_id))
                                 for i, p in enumerate(target_prefix_ids)]
        phrases = None
        if constraint_ids is not None:
            phrases = self._check_constraint_ids("constraint_ids", constraint_ids, len(sources))
            if any(phrases):
                require_beam(options.beam_size)
                check_work("constraint_ids", phrases, options.beam_size)
        results: List[List[Hypothesis]] = [[] for _ in sources]
        for batch in split_batches([len(s) for s in sources], call.max_batch_size, call.batch_type):
            # a batch whose constrained steps would pass MAX_CONSTRAINT_WORK is decoded a few sentences at a time
            for group in [batch] if phrases is None else split_work(batch, phrases, options.beam_size):
                prefixes = None if target_prefix_ids is None else [target_prefix_ids[i] for i in group]
                out = decode(self.engine, cfg, [sources[i] for i in group], options, prefixes,
                             constraints=None if phrases is None else [phrases[i] for i in group])
                for i, hyps in zip(group, out):
                    results[i] = hyps
        return results

    def translate_batch(self, texts: Sequence[str], max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                        batch_type: BatchType = "examples",
                        max_input_length: Optional[int] = None, return_scores: bool = False,
                        target_prefix: Optional[Sequence[Optional[str]]] = None, return_alignment: bool = False,
                        constraints: Optional[Sequence[Optional[Sequence[str]]]] = None,
                        source_lang: Optional[str] = None, target_lang: Optional[str] = None,
                        **decoding: Any) -> List[TranslationResult]:
        """Translate texts; results in the caller's order (awkward input: the module docstring).
        Decoding options: see DecodingOptions
        (beam_size, num_hypotheses, length_penalty, max_decoding_length, min_decoding_length,
        max_length_a, max_length_b, sampling_topk, sampling_topp, sampling_temperature,
        repetition_penalty, no_repeat_ngram_size, seed, return_attention).
        return_attention: each hypothesis's cross-attention [target tokens][source tokens + EOS];
        return_alignment: its word alignment, (source word, target word) pairs (runtime/decode/alignment.py).
        Both need a format-2 package (`seq2onnx export` writes them) and cost nothing when not asked for.
        constraints: per text a list of phrases (or None), e.g. [["Datei", "Ordner"], None]: terminology that every
        hypothesis must hold, each phrase as a contiguous run of its tokens (tokenized alone, as target text: its
        first piece a word start); beam search only (beam_size >= 2), with dynamic beam allocation
        (runtime/decode/constraints.py). TranslationResult.constraints_met says per hypothesis whether it holds them all:
        False only when no hypothesis within the length limit does (docs/CONTRACTS.md, "Terminology constraints").
        source_lang / target_lang: the languages of a multilingual model (its package's languages; `seq2onnx info`
        lists them), e.g. target_lang="fra" for an OPUS-MT en-ROMANCE model, source_lang="eng_Latn",
        target_lang="deu_Latn" for NLLB; a model of one language pair needs neither.
        With no decoding options, a converted model decodes as its transformers generate() does (its generation
        defaults: `seq2onnx info`)."""
        texts = self._check_texts(texts)
        call, options = self.check_options(
            len(texts), max_batch_size=max_batch_size, batch_type=batch_type, max_input_length=max_input_length,
            return_scores=return_scores, return_alignment=return_alignment, target_prefix=target_prefix,
            constraints=constraints, source_lang=source_lang, target_lang=target_lang, **decoding)
        return self.run_batch(texts, call, options)

    def run_batch(self, texts: Sequence[str], call: TranslationOptions,
                  options: DecodingOptions) -> List[TranslationResult]:
        """translate_batch with the records check_options made of its keywords (the server's batches)."""
        request = self.prepare_batch(texts, call, options)
        hyps = self._translate_ids(request.sources, call, request.prefixes, request.source_phrases,
                                   request.decode_options)
        return self.batch_results(request, hyps)

    def check_options(self, n_texts: int, **options: Any) -> Tuple[TranslationOptions, DecodingOptions]:
        """translate_batch's keyword arguments for `n_texts` texts -> the records it works with, checked against this
        model as translate_batch checks them, short of tokenizing: its own keywords (TranslationOptions: the batching,
        max_input_length, the languages, the attention the package can give, the shape and text of target_prefix and
        constraints; what only their tokens tell, such as a character the tokenizer lacks, is prepare_batch's to find)
        and the DecodingOptions it decodes with (the package's generation defaults, then the target language's, then
        the call's; the ids they name within the vocabulary). The one place that turns translate_batch's keywords
        into its records; a bad one: one line naming it, as translate_batch says it. The server checks each request
        with it before it is queued, so that no batch holds a request whose options fail its step, and its jobs hold
        the records."""
        call, decoding = TranslationOptions.split(options)
        return call, self._check_call(n_texts, call, decoding, self.translate_batch)

    def _check_call(self, n: int, call: TranslationOptions, decoding: Mapping[str, Any],
                    accepts: Callable[..., Any]) -> DecodingOptions:
        """check_options' checks of `call` for n texts -> the DecodingOptions of `decoding`, the decoding keywords as
        given, over the package's defaults and the target language's (accepts: the API method, named in an unknown
        option's error)."""
        _, implied = self._languages(call.source_lang, call.target_lang)
        options = self._decoding_options(accepts, {**implied, **decoding})
        if (options.return_attention or call.return_alignment) and not self.engine.has_attention:
            raise self.engine.no_attention_error()
        self._input_limit(call.max_input_length)
        if call.target_prefix is not None:
            self._prefix_texts(call.target_prefix, n)
        if call.constraints is not None:
            limit = self.config.max_positions
            if any(normalize_phrases(call.constraints, n, limit, max_source_chars(limit))):
                require_beam(options.beam_size)
        return options

    def prepare_batch(self, texts: Sequence[str], call: TranslationOptions,
                      options: DecodingOptions) -> TranslateRequest:
        """Texts and the records check_options made of translate_batch's keywords -> what decoding needs
        (TranslateRequest): the texts checked and tokenized, every error before any work, for translate_batch and
        for the server's continuous batching alike."""
        texts = self._check_texts(texts)
        lang_prefix, _ = self._languages(call.source_lang, call.target_lang)
        prefixes = self.prefix_ids(call.target_prefix, len(texts))
        phrases = self.constraint_ids(call.constraints, len(texts))
        if phrases is not None and any(phrases):
            check_work("constraints", phrases, options.beam_size)
        todo = [i for i, t in enumerate(texts) if not is_blank(t)]   # blank texts: the empty hypothesis
        sources, truncated = self._sources([texts[i] for i in todo], call.max_input_length, todo, lang_prefix)
        # return_alignment is read from the attention
        decode_options = replace(options, return_attention=True) if call.return_alignment else options
        return TranslateRequest(texts, call, options, decode_options, todo, sources, truncated,
                                None if prefixes is None else [prefixes[i] for i in todo], phrases)

    def batch_results(self, request: TranslateRequest, hyps: List[List[Hypothesis]]) -> List[TranslationResult]:
        """The TranslationResults of a prepared request from its sources' hypotheses (in request.todo's order)."""
        texts, options, phrases = request.texts, request.options, request.phrases
        return_scores, return_alignment = request.call.return_scores, request.call.return_alignment
        todo, sources, truncated = request.todo, request.sources, request.truncated
        zero = [0.0] if return_scores else None
        translated: Dict[int, TranslationResult] = {}
        for i, h, cut, source in zip(todo, hyps, truncated, sources):
            ids = [x.tokens for x in h]
            translated[i] = TranslationResult(
                self.detokenizer.decode_batch(ids), ids,
                [x.score for x in h] if return_scores else None,
                [x.normalized_score for x in h] if return_scores else None, cut, [x.finished for x in h],
                source_unknown_tokens=source.count(self.config.unk_id))
            if phrases is not None:
                translated[i].constraints_met = [x.missing_constraints == 0 for x in h]
        # request.todo holds every text that is not blank
        results = [TranslationResult([""], [[]], zero and [0.0], zero and [0.0], finished=[True]) if is_blank(t)
                   else translated[i] for i, t in enumerate(texts)]
        if phrases is not None:
            for i in (i for i, t in enumerate(texts) if is_blank(t)):           # not translated
                results[i].constraints_met = [not phrases[i]]
        if options.return_attention or return_alignment:
            for i, h, source in zip(todo, hyps, sources):
                self._attach_attention(results[i], h, source, options.return_attention, return_alignment)
            for i in (i for i, t in enumerate(texts) if is_blank(t)):           # nothing read, nothing aligned
                results[i].attention = [[]] if options.return_attention else None
                results[i].alignment = [[]] if return_alignment else None
        return results

    def _attach_attention(self, result: TranslationResult, hyps: List[Hypothesis], source: List[int],
                          attention: bool, alignment: bool) -> None:
        """Each hypothesis's attention rows (an empty hypothesis, decoded in 0 steps, has none) and alignment."""
        rows = [np.zeros((0, len(source)), np.float32) if h.attention is None else h.attention for h in hyps]
        if attention:
            result.attention = [r.tolist() for r in rows]
        if alignment:
            src = self.pieces(source[:-1], source=True)                            # the EOS column is not a word
            result.alignment = [hard_alignment(r, src, self.pieces(h.tokens)) for r, h in zip(rows, hyps)]

    def score_ids(self, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                  max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
                  batch_type: BatchType = "examples") -> List[List[float]]:
        """Id-level scoring: sources end with EOS, targets do not (EOS is scored after them).
        -> per pair, the log-prob of each target id and of EOS (decoding.score)."""
        call = TranslationOptions(max_batch_size=max_batch_size, batch_type=batch_type)
        sources = self._check_id_batch(sources)
        _check_per_source("targets", targets, len(sources), "id list")
        targets = [check_ids(Arg("targets", f"[{i}]"), t, self.config.vocab_size,   # - 1: the EOS scored after it
                             self.config.max_positions - 1) for i, t in enumerate(targets)]
        results: List[List[float]] = [[] for _ in sources]
        for batch in split_batches([len(s) for s in sources], call.max_batch_size, call.batch_type):
            for i, log_probs in zip(batch, score(self.engine, self.config, [sources[i] for i in batch],
                                                 [targets[i] for i in batch])):
                results[i] = log_probs
        return results

    def score_batch(self, sources: Sequence[str], targets: Sequence[str],
                    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE, batch_type: BatchType = "examples",
                    max_input_length: Optional[int] = None) -> List[ScoringResult]:
        """The model's log-probability of each target given its source, token by token (CTranslate2's
        score_batch): one ScoringResult(tokens, log_probs) per pair, EOS last; sum(log_probs) is the score
        translate_batch(return_scores=True) reports for that translation. Uses: reranking, filtering a parallel
        corpus, quality estimation. A target too long for the model is cut to fit (EOS kept), with a warning."""
        sources, targets = self._check_texts(sources), self._check_texts(targets)
        if len(targets) != len(sources):
            raise OptionError(Arg("targets"), f" must hold one target per source: {len(sources)} sources, "
                              f"{len(targets)} targets")
        src_ids, _ = self._sources(sources, max_input_length)
        limit = self.config.max_positions - 1                    # target ids; EOS takes the last position
        tgt_ids, cut = token_ids(self.detokenizer, targets, limit)
        for i, (ids, c) in enumerate(zip(tgt_ids, cut)):
            if c or len(ids) > limit:
                warnings.warn(f"target {i} is longer than the model's {limit + 1} positions (EOS included); "
                              "only its beginning was scored", stacklevel=2)
        tgt_ids = [ids[:limit] for ids in tgt_ids]
        scores = self.score_ids(src_ids, tgt_ids, max_batch_size, batch_type)
        eos = self.detokenizer.id_to_token(self.config.eos_id)
        return [ScoringResult([self.detokenizer.id_to_token(t) for t in ids] + [eos], lp)
                for ids, lp in zip(tgt_ids, scores)]

    def translate(self, text: str, target_prefix: Optional[str] = None, constraints: Optional[Sequence[str]] = None,
                  **options: Any) -> str:
        """The best translation of one text (options as translate_batch; constraints: its phrases)."""
        prefix = None if target_prefix is None else [target_prefix]
        phrases = None if constraints is None else [constraints]
        return self.translate_batch([text], target_prefix=prefix, constraints=phrases, **options)[0].hypotheses[0]

    def generate_tokens(self, text: str, max_input_length: Optional[int] = None, target_prefix: Optional[str] = None,
                        constraints: Optional[Sequence[str]] = None, source_lang: Optional[str] = None,
                        target_lang: Optional[str] = None,
                        **decoding: Any) -> Generator[str, None, Optional[Hypothesis]]:
        """Stream the best translation of one text as text pieces; "".join(pieces) == translate(text).

        Greedy and sampling yield each token's text as it is chosen. Beam search yields the
        prefix that every live beam and every finished hypothesis share (no later step can change
        it), and the rest when the search ends. The generator's return value (StopIteration.value) is
        the Hypothesis streamed (tokens, scores, finished; None for a blank text): `seq2onnx serve`'s result.
        """
        if decoding.get("num_hypotheses", 1) != 1:
            raise OptionError("generate_tokens streams one hypothesis: ", Arg("num_hypotheses"), " must be 1")
        call = TranslationOptions(max_input_length=max_input_length,
                                  target_prefix=None if target_prefix is None else [target_prefix],
                                  constraints=None if constraints is None else [constraints],
                                  source_lang=source_lang, target_lang=target_lang)
        _, implied = self._languages(source_lang, target_lang)
        options = self._decoding_options(self.generate_tokens, {**implied, **decoding})
        return (yield from self.stream(text, call, options))

    def stream(self, text: str, call: TranslationOptions,
               options: DecodingOptions) -> Generator[str, None, Optional[Hypothesis]]:
        """generate_tokens with its records (check_options' for one text; the server's streams): its target_prefix
        and constraints one entry, for the text."""
        lang_prefix, _ = self._languages(call.source_lang, call.target_lang)
        (text,) = self._check_texts([text])
        phrases = self.constraint_ids(call.constraints, 1)
        if phrases is not None and any(phrases):
            require_beam(options.beam_size)
            check_work("constraints", phrases, options.beam_size)
        prefixes = self.prefix_ids(call.target_prefix, 1)
        if is_blank(text):                                      # as translate(): the empty translation
            return None
        sources, _ = self._sources([text], call.max_input_length, prefix=lang_prefix)
        steps = decode_steps(self.engine, self.config, sources, options, prefixes, constraints=phrases)
        stream = TextStream(self.detokenize)
        while True:
            try:
                search = next(steps)
            except StopIteration as stop:
                best = stop.value[0][0]
                break
            piece = stream.update(search)
            if piece:
                yield piece
        piece = stream.final(best.tokens)
        if piece:
            yield piece
        return best
