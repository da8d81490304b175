"""Decoding options, named as CTranslate2 users know them, checked once with clear messages.

Every option has a range (the table in docs/CONTRACTS.md, "Decoding options"); a value outside it
is a ValueError naming the option, the range and the value, raised before any work. The upper
bounds keep the arithmetic defined: a beam of a million rows, a length penalty of 1e308 or a
temperature that rounds to 0 in float32 would exhaust memory or turn scores into inf/nan.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Collection, Dict, List, Literal, Mapping, Optional, Sequence, Tuple, Union, get_args

import numpy as np

from .errors import Seq2OnnxError

MAX_BEAM_SIZE = 256                     # beam_size, and num_hypotheses when sampling
LENGTH_PENALTY_RANGE = (-10.0, 10.0)
MAX_LENGTH_A = 1000.0
MAX_LENGTH_B = 2**31 - 1
MIN_TOPP = 1e-6
TEMPERATURE_RANGE = (1e-4, 1e4)         # or exactly 0 (argmax)
REPETITION_PENALTY_RANGE = (1e-4, 1e4)
BeamRules = Literal["seq2onnx", "transformers"]     # when beam search finishes hypotheses and stops (search.py)
BEAM_RULES = get_args(BeamRules)
EarlyStopping = Union[bool, Literal["never"]]       # transformers' early_stopping (beam_rules="transformers" only)
EARLY_STOPPING = (False, True, "never")
MAX_SUPPRESS_IDS = 1 << 24                   # suppress_ids: at most this many (the largest vocabulary, config.py)
# examples per batch when the caller does not say (the Translator and the CLI): memory stays that of
# one batch however many sentences (the cache of one batch grows with its rows)
DEFAULT_MAX_BATCH_SIZE = 32
BatchType = Literal["examples", "tokens"]      # what max_batch_size counts: examples, or padded source tokens
BATCH_TYPES = get_args(BatchType)
# translate_batch's arguments of one entry per text: a target prefix (or None), phrases (or None)
TargetPrefixes = Sequence[Optional[str]]
Phrases = Sequence[Optional[Sequence[str]]]
PER_TEXT = ("target_prefix", "constraints")     # TranslationOptions' fields of one entry per text
# A text is never tokenized whole, only a prefix that holds its first max_input_length tokens, of at most
# max_input_length x MAX_CHARS_PER_TOKEN characters (translator.token_ids): tokenized whole, a line's memory grows
# with its length many times over (NFKC turns one U+FDFA into 18 characters).
MAX_CHARS_PER_TOKEN = 64


# --- errors that name the API's arguments ----------------------------------------------------------
@dataclass(frozen=True)
class Arg:
    """An argument of the API named in an error: `name` as the API spells it (beam_size, constraints), `index`
    the element within it (API only: "[0][1]"), `value` the element's text, shown after the name when given."""
    name: str
    index: str = ""
    value: Optional[str] = None

    def shown(self, name: str) -> str:
        return name if self.value is None else f"{name} {shorten(self.value)!r}"


def shorten(text: str, most: int = 40) -> str:
    return text if len(text) <= most else text[:most] + "..."


class NamesArgs(Exception):
    """A one-line message built from parts, str or Arg: str() names the arguments as the API does (`beam_size`,
    `constraints[0][1]`); `render(flag)` names them as a caller of its own, e.g. the command line: flag(api name)
    -> "--beam-size" (commands._flags, from option_table.py)."""

    def __init__(self, *parts: Union[str, Arg]):
        self.parts = parts
        super().__init__(self.render(lambda name: name, index=True))

    def render(self, flag: Callable[[str], str], index: bool = False) -> str:
        return "".join(p if isinstance(p, str) else p.shown(flag(p.name) + (p.index if index else ""))
                       for p in self.parts)


class OptionError(NamesArgs, Seq2OnnxError, ValueError):
    """A bad value of an API argument."""


class OptionWarning(NamesArgs, UserWarning):
    """A warning about what an API argument did (e.g. max_input_length cut an input)."""


class OptionTypeError(OptionError, TypeError):
    """An API argument of the wrong type (a TypeError and a ValueError alike)."""


def check_text(arg: Arg, value: Any) -> str:
    """A text argument of the API (a target prefix, a constraint phrase): a str that UTF-8 can encode (no lone
    surrogates, which `os.fsdecode` makes of argv bytes that are not UTF-8), else a one-line error."""
    if not isinstance(value, str):
        raise OptionTypeError(arg, f" must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise OptionError(Arg(arg.name, arg.index), " is not valid text (it holds lone surrogates, e.g. from bytes "
                          "that are not UTF-8): pass UTF-8 text") from None
    return value


def check_ids(arg: Arg, value: Any, vocab_size: int, most: int, least: int = 0, never: Sequence[int] = ()) -> List[int]:
    """An id-list argument of the API (a source, a target, a prefix, a phrase): a list, tuple or 1-D array of
    `least`..`most` integers in [0, vocab_size), none of `never`, else a one-line error naming it. -> the ids."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple, np.ndarray)):
        raise OptionTypeError(arg, f" must be a list of ids (int), got {type(value).__name__}")
    if not least <= len(value) <= most:
        raise OptionError(arg, f" must hold {least}..{most} ids, got {len(value)}")
    try:
        ids = np.asarray(value)
    except ValueError:                                  # ragged: a list inside
        ids = np.asarray(value, dtype=object)
    if len(value) and (ids.ndim != 1 or ids.dtype.kind not in "iu"
                       or (not isinstance(value, np.ndarray) and any(type(x) is bool for x in value))):
        bad = next((x for x in value if not isinstance(x, (int, np.integer)) or isinstance(x, bool)), value[0])
        raise OptionTypeError(arg, f" must hold ids (int), got {bad!r} ({type(bad).__name__})")
    if len(value) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise OptionError(arg, f" holds an id outside the vocabulary [0, {vocab_size}): "
                          f"{ids.min() if ids.min() < 0 else ids.max()}")
    banned = [x for x in never if x in ids]
    if banned:
        raise OptionError(arg, f" holds the id {banned[0]}, which no translation holds (PAD, BOS, EOS)")
    return ids.tolist()


def _check_int(name: str, value: Any, low: int, high: Optional[int] = None) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low and (high is None or value <= high)
    if not ok:
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise OptionError(Arg(name), f" must be an integer {allowed}, got {shorten(repr(value))}")


def check_count(name: str, value: Any, low: int, high: Optional[int] = None) -> None:
    """An integer argument of the API in [low, high] (high None: no bound), else a one-line error."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise OptionError(Arg(name), f" must be an integer {allowed}, got {value!r}")


def check_choice(name: str, value: Any, choices: Collection[str]) -> None:
    """A word argument of the API, one of `choices`, else a one-line error."""
    if not isinstance(value, str) or value not in choices:
        raise OptionError(Arg(name), f" must be one of {', '.join(choices)}, got {value!r}")


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:                               # an int past float's range (a JSON request's 1000...0)
        return False


def _check_float(name: str, value: Any, allowed: str, test) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and _finite(value) and test(value)
    if not ok:
        raise OptionError(Arg(name), f" must be a number {allowed}, got {shorten(repr(value))}")


def samples(sampling_topk: object) -> bool:
    """Whether decoding samples: sampling_topk other than 1 (CTranslate2's convention)."""
    return sampling_topk != 1


@dataclass(frozen=True)
class DecodingOptions:
    """How to decode. Sampling is on when sampling_topk != 1 (CTranslate2's convention)."""

    beam_size: int = 4                    # 1 = greedy (or sampling)
    num_hypotheses: int = 1               # n-best: <= beam_size; with sampling, that many samples
    length_penalty: float = 1.0           # rank by score / length ** length_penalty
    max_decoding_length: int = 256        # max steps (tokens, EOS included)
    min_decoding_length: int = 0          # EOS forbidden before this many tokens
    max_length_a: float = 3.0             # fairseq's relative limit: a * src_len + b steps, when a > 0 or b
    max_length_b: Optional[int] = 10      #   is given (src_len counts EOS). On by default (Marian's length
                                          #   factor 3), so a runaway stops early; a = 0, b = None: off
    sampling_topk: int = 1                # 1: argmax; 0: sample from the whole vocabulary; k: from the best k
    sampling_topp: float = 1.0            # nucleus: keep the smallest set of mass >= p
    sampling_temperature: float = 1.0     # 0: argmax
    repetition_penalty: float = 1.0       # log-probs of already generated tokens are multiplied by it
    no_repeat_ngram_size: int = 0         # 0: off; n: no n-gram appears twice
    seed: Optional[int] = None            # sampling seed; None: fresh entropy
    return_attention: bool = False        # keep each hypothesis's cross-attention rows (format-2 packages)
    # --- generation as transformers' generate() does it (a converted package's manifest "generation") ---
    beam_rules: BeamRules = "seq2onnx"    # "transformers": its _beam_search's finished set and stopping rule
    early_stopping: EarlyStopping = False  # transformers rules: False (heuristic), True (K finished), "never"
    suppress_ids: Optional[Tuple[int, ...]] = None   # ids never generated; None: PAD and BOS
    forced_bos_id: Optional[int] = None   # the first generated token, log-prob 0 (M2M100/NLLB target language)
    forced_eos: bool = False              # at the last step the length limit allows, EOS only, log-prob 0
    renormalize: bool = False             # log-softmax again after every filter (transformers' renormalize_logits)

    def __post_init__(self) -> None:
        _check_int("beam_size", self.beam_size, 1, MAX_BEAM_SIZE)
        _check_int("max_decoding_length", self.max_decoding_length, 0)
        _check_int("min_decoding_length", self.min_decoding_length, 0, self.max_decoding_length)
        low, high = LENGTH_PENALTY_RANGE
        _check_float("length_penalty", self.length_penalty, f"in [{low:g}, {high:g}]", lambda x: low <= x <= high)
        _check_float("max_length_a", self.max_length_a, f"in [0, {MAX_LENGTH_A:g}]", lambda x: 0 <= x <= MAX_LENGTH_A)
        if self.max_length_b is not None:
            _check_int("max_length_b", self.max_length_b, 0, MAX_LENGTH_B)
        _check_int("sampling_topk", self.sampling_topk, 0)
        _check_float("sampling_topp", self.sampling_topp, f"in [{MIN_TOPP:g}, 1]", lambda x: MIN_TOPP <= x <= 1)
        low, high = TEMPERATURE_RANGE
        _check_float("sampling_temperature", self.sampling_temperature, f"0 or in [{low:g}, {high:g}]",
                     lambda x: x == 0 or low <= x <= high)
        low, high = REPETITION_PENALTY_RANGE
        _check_float("repetition_penalty", self.repetition_penalty, f"in [{low:g}, {high:g}]",
                     lambda x: low <= x <= high)
        _check_int("no_repeat_ngram_size", self.no_repeat_ngram_size, 0)
        if self.seed is not None:
            _check_int("seed", self.seed, 0)
        if not isinstance(self.return_attention, bool):
            raise OptionError(Arg("return_attention"), f" must be True or False, got {self.return_attention!r}")
        if self.beam_rules not in BEAM_RULES:
            raise OptionError(Arg("beam_rules"), f" must be one of {', '.join(map(repr, BEAM_RULES))}, "
                              f"got {self.beam_rules!r}")
        if not any(self.early_stopping is e for e in EARLY_STOPPING[:2]) and self.early_stopping != "never":
            raise OptionError(Arg("early_stopping"), f" must be True, False or 'never', got {self.early_stopping!r}")
        if self.early_stopping is not False and self.beam_rules != "transformers":
            raise OptionError(Arg("early_stopping"), " applies to beam_rules='transformers' only; set ",
                              Arg("beam_rules"), "='transformers' or leave it False")
        if self.suppress_ids is not None:
            if isinstance(self.suppress_ids, (str, bytes)) or not isinstance(self.suppress_ids, (list, tuple)):
                raise OptionTypeError(Arg("suppress_ids"), f" must be a list of ids (int), got "
                                      f"{type(self.suppress_ids).__name__}")
            if len(self.suppress_ids) > MAX_SUPPRESS_IDS:
                raise OptionError(Arg("suppress_ids"), f" must hold at most {MAX_SUPPRESS_IDS} ids, "
                                  f"got {len(self.suppress_ids)}")
            for x in self.suppress_ids:
                if not isinstance(x, (int, np.integer)) or isinstance(x, bool) or x < 0:
                    raise OptionError(Arg("suppress_ids"), f" must hold ids (int >= 0), got {x!r}")
            object.__setattr__(self, "suppress_ids", tuple(int(x) for x in self.suppress_ids))
        if self.forced_bos_id is not None:
            _check_int("forced_bos_id", self.forced_bos_id, 0)
        for name in ("forced_eos", "renormalize"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(Arg(name), f" must be True or False, got {getattr(self, name)!r}")
        if self.sampling:
            if self.beam_size != 1:
                raise OptionError("sampling (", Arg("sampling_topk"), f"={self.sampling_topk}) needs ",
                                  Arg("beam_size"), "=1, got ", Arg("beam_size"), f"={self.beam_size}")
            _check_int("num_hypotheses", self.num_hypotheses, 1, MAX_BEAM_SIZE)
        else:
            _check_int("num_hypotheses", self.num_hypotheses, 1, self.beam_size)

    @property
    def sampling(self) -> bool:
        return samples(self.sampling_topk)

    def check_vocabulary(self, vocab_size: int) -> "DecodingOptions":
        """The token ids these options name (suppress_ids, forced_bos_id) checked against a model's vocabulary
        [0, vocab_size), which the constructor does not know: a one-line error naming the option, before any work
        (translate_batch, and the server before it queues a request: an id past the vocabulary would fail the
        decoder step of every sentence sharing it). -> self."""
        if self.suppress_ids and max(self.suppress_ids) >= vocab_size:
            raise OptionError(Arg("suppress_ids"), f" holds an id outside the vocabulary [0, {vocab_size}): "
                              f"{max(self.suppress_ids)}")
        if self.forced_bos_id is not None and self.forced_bos_id >= vocab_size:
            raise OptionError(Arg("forced_bos_id"), f" must be an id of the vocabulary [0, {vocab_size}), got "
                              f"{self.forced_bos_id}")
        return self

    @classmethod
    def from_kwargs(cls, accepts: Optional[Callable[..., Any]] = None, /, **kwargs: Any) -> "DecodingOptions":
        """Like the constructor, but an unknown option name is a ValueError listing the known ones: these options,
        then the keyword arguments of `accepts`, the API method whose **decoding these are, read from its
        signature (its parameters with a default), so that the list can drift from neither."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            own = [] if accepts is None else sorted(
                name for name, p in inspect.signature(accepts).parameters.items()
                if p.default is not p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
            also = f"; and {accepts.__name__}'s own: {', '.join(own)}" if own and accepts is not None else ""
            raise OptionError(f"unknown decoding option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
                              + also)
        return cls(**kwargs)

    def to_dict(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class TranslationOptions:
    """translate_batch's own keywords (CTranslate2's names), beside DecodingOptions: how the texts are cut, batched
    and answered, and what the model is told about them. The constructor checks what needs no model (the batching,
    return_alignment); the Translator checks the rest against its model (Translator.check_options: max_input_length
    against max_positions, the per-text lists against the texts, the languages against the package's)."""

    max_batch_size: int = DEFAULT_MAX_BATCH_SIZE    # examples (or padded source tokens) decoded at once; 0: one batch
    batch_type: BatchType = "examples"              # what max_batch_size counts
    max_input_length: Optional[int] = None          # source tokens kept, EOS included; None: the model's max_positions
    return_scores: bool = False                     # each hypothesis's score and normalized score
    return_alignment: bool = False                  # each hypothesis's word alignment (decodes with return_attention)
    target_prefix: Optional[TargetPrefixes] = None  # per text, the start of every translation of it (or None)
    constraints: Optional[Phrases] = None           # per text, phrases every translation of it holds (or None)
    source_lang: Optional[str] = None               # a multilingual model's languages (the package's codes)
    target_lang: Optional[str] = None

    def __post_init__(self) -> None:
        check_count("max_batch_size", self.max_batch_size, 0)
        check_choice("batch_type", self.batch_type, BATCH_TYPES)
        if not isinstance(self.return_alignment, bool):
            raise OptionError(Arg("return_alignment"), f" must be True or False, got {self.return_alignment!r}")

    @classmethod
    def split(cls, keywords: Mapping[str, Any]) -> Tuple["TranslationOptions", Dict[str, Any]]:
        """translate_batch's keyword arguments -> its own record (checked), and the rest: the decoding keywords as
        given, which the Translator turns into DecodingOptions over its package's defaults."""
        own = {f.name for f in fields(cls)}
        return (cls(**{k: v for k, v in keywords.items() if k in own}),
                {k: v for k, v in keywords.items() if k not in own})

    def to_dict(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def repeated(self, n: int) -> "TranslationOptions":
        """This call, made for one text (its per-text entries one each), for n texts that each get those entries:
        a command line's --target-prefix and --constraint, given to every line."""
        entries: Dict[str, Any] = {k: list(getattr(self, k)) * n for k in PER_TEXT if getattr(self, k) is not None}
        return replace(self, **entries)


def with_defaults(given: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """A call's decoding options over `defaults` (a package's generation defaults): the keywords DecodingOptions is
    made of, for translate_batch, a server request and the command line alike. Where they sample (sampling_topk
    other than 1) and the call gives no beam_size, the beam size is 1, whatever the defaults say: this runtime
    samples one row per hypothesis (CTranslate2 samples inside its beam search, beam_size 2 by default), so that
    `translate_batch(texts, sampling_topk=5)` samples as it does in CTranslate2 instead of failing on a default beam
    size. A beam_size above 1 given with sampling stays an error (DecodingOptions)."""
    options = {**(defaults or {}), **given}
    if "beam_size" not in given and samples(options.get("sampling_topk", DecodingOptions.sampling_topk)):
        options["beam_size"] = 1
    return options
