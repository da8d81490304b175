"""translate_batch's options, each written once. Their names, types and defaults are the records' (options.py:
DecodingOptions' fields, then TranslationOptions', translate_batch's own keywords); this table adds only their words:
one-line help, range in words, command-line flag (and where the flag differs from the keyword: its help, value name,
range, default), and whether a server request may set it.

From this table come the command line's flags (commands.py), a request's keyword arguments for translate_batch
(`request_options` from a JSON object, `form_options` from form or query fields) and the schema a server publishes
(`json_schema`). The values are checked where they always are: the records (options.py, the ranges' one place) and the
Translator; here only how each is spelled. Adding an option: its field in DecodingOptions or TranslationOptions
(type, default and check), then its line in TEXTS (importing this module fails until it is there).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import (Any, Callable, Collection, Dict, List, Literal, Mapping, Optional, Tuple, Union, get_args,
                    get_origin, get_type_hints)

from .options import (EARLY_STOPPING, LENGTH_PENALTY_RANGE, MAX_BEAM_SIZE, MAX_LENGTH_A, MAX_LENGTH_B,
                      MAX_SUPPRESS_IDS, MIN_TOPP, REPETITION_PENALTY_RANGE, TEMPERATURE_RANGE, Arg, DecodingOptions,
                      EarlyStopping, OptionError, OptionTypeError, Phrases, TargetPrefixes, TranslationOptions, shorten,
                      with_defaults)


# --- kinds: how a value is spelled in JSON, in text (a flag, a form field) and in a JSON Schema -----------------
def parse_bool(text: str) -> bool:
    value = {"true": True, "false": False}.get(text.strip().lower())
    if value is None:
        raise ValueError(f"must be true or false, got {shorten(text)!r}")
    return value


def parse_early_stopping(text: str) -> Any:
    value = {"true": True, "false": False, "never": "never"}.get(text.strip().lower())
    if value is None:
        raise ValueError(f"must be true, false or never, got {shorten(text)!r}")
    return value


def parse_ids(text: str) -> List[int]:
    """'0,58100' -> [0, 58100]; '' -> [] (none)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"must be ids separated by commas, e.g. 0,58100, got {shorten(text)!r}") from None


@dataclass(frozen=True)
class Kind:
    """How one option's value is spelled. Only the spelling: the values allowed are DecodingOptions' to check."""
    word: str                                       # what a value must be, in messages: "an integer"
    json_types: Tuple[type, ...]                    # the types json.loads makes of one (exact: a bool is no int)
    schema: Mapping[str, Any]                       # its JSON Schema
    parse: Optional[Callable[[str], Any]] = None    # text -> value: a flag's, a form field's (None: JSON only);
                                                    #   int and float raise their own ValueError, the rest "must be ..."
    choices: Optional[Tuple[str, ...]] = None       # the words allowed, where they are a few (a flag's choices)
    nullable: bool = False                          # null (None) too

    def or_null(self) -> "Kind":
        return replace(self, word=f"{self.word} or null", nullable=True)

    def accepts(self, value: Any) -> bool:
        """Whether a value json.loads made has this kind's JSON type (2.0 is not an integer, 1 not a bool)."""
        return (value is None and self.nullable) or type(value) in self.json_types

    def from_text(self, text: str) -> Any:
        """A value from its text, as the command line's flag reads it; a ValueError "must be ..., got ..."."""
        assert self.parse is not None              # its callers read a JSON-only kind's text otherwise
        try:
            return self.parse(text)
        except ValueError as e:
            raise ValueError(f"must be {self.word}, got {shorten(text)!r}" if self.parse in (int, float)
                             else str(e)) from None

    def json_schema(self) -> Dict[str, Any]:
        schema = dict(self.schema)
        if self.nullable:                               # {"type": "integer"} -> {"type": ["integer", "null"]}
            if "enum" in schema:
                schema["enum"] = [*schema["enum"], None]
            else:
                schema["type"] = [schema["type"], "null"]
        return schema


def choice(values: Tuple[str, ...]) -> Kind:
    return Kind(f"one of {', '.join(values)}", (str,), {"enum": list(values)}, str, values)


INT = Kind("an integer", (int,), {"type": "integer"}, int)
NUMBER = Kind("a number", (int, float), {"type": "number"}, float)
BOOL = Kind("true or false", (bool,), {"type": "boolean"}, parse_bool)
TEXT = Kind("a string", (str,), {"type": "string"}, str)
EARLY = Kind("true, false or \"never\"", (bool, str), {"enum": list(EARLY_STOPPING)}, parse_early_stopping)
IDS = Kind("a list of ids", (list,), {"type": "array", "items": {"type": "integer", "minimum": 0}}, parse_ids)
# one entry per text (no text form: a form field or a flag cannot say which text it is for)
PREFIXES = Kind("a list of one string (or null) per text", (list,),
                {"type": "array", "items": {"type": ["string", "null"]}})
PHRASES = Kind("a list of one list of phrases (or null) per text", (list,),
               {"type": "array", "items": {"type": ["array", "null"], "items": {"type": "string"}}})


# --- the table --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Text:
    """What the table adds to a field of DecodingOptions or TranslationOptions (their names, types and defaults are
    read from the records): its words, and how the command line and a server spell it."""
    help: str                       # one line
    range: str = ""                 # the values allowed, in words ("" where the kind says it); the records check them
    flag: Optional[str] = None      # the command line's (None: none of its own)
    group: str = "decoding"         # the command line's help section (commands.SECTIONS)
    served: bool = True             # a server request may set it
    # where the command line's flag differs from the API's keyword
    flag_help: Optional[str] = None     # its --help line, instead of help and the default
    metavar: Optional[str] = None       # its value's name in --help
    flag_range: Optional[str] = None    # its range in --help, where the command line allows less
    flag_unset: bool = False            # unset by default (None): the API's rule picks the value
    repeated: bool = False              # given once per value, the values a list (--constraint)


@dataclass(frozen=True)
class Option(Text):
    """An option as the table has it: its Text, and what the record's field says (_options sets every one; they have
    defaults only because a dataclass's fields after Text's must)."""
    name: str = ""                  # the Python API's keyword, a JSON field's name: the record's field
    kind: Kind = TEXT               # from the field's type (kind_of)
    default: Any = None             # the field's
    decoding: bool = True           # a DecodingOptions field (else translate_batch's own keyword: TranslationOptions)


# the kinds of the records' field types (Optional[X]: X's or null; Literal[...]: a choice of its words)
KINDS: Dict[Any, Kind] = {int: INT, float: NUMBER, bool: BOOL, str: TEXT, EarlyStopping: EARLY, Tuple[int, ...]: IDS,
                          TargetPrefixes: PREFIXES, Phrases: PHRASES}


def kind_of(hint: Any) -> Kind:
    """How a value of a record field's type is spelled."""
    args = get_args(hint)
    if get_origin(hint) is Union and type(None) in args:
        (rest,) = [a for a in args if a is not type(None)]
        return kind_of(rest).or_null()
    if get_origin(hint) is Literal:
        return choice(args)
    return KINDS[hint]


_LP, _T, _RP = LENGTH_PENALTY_RANGE, TEMPERATURE_RANGE, REPETITION_PENALTY_RANGE
TEXTS: Dict[str, Text] = {
    # DecodingOptions' fields (a converted package's manifest "generation" may set other defaults: `seq2onnx info`)
    "beam_size": Text("beams searched (1: greedy, or sampling)", f"1..{MAX_BEAM_SIZE} (unset, when sampling: 1)",
                      "--beam-size", flag_unset=True,
                      flag_help=f"default {DecodingOptions.beam_size}; 1 when sampling (--sampling-topk other than 1), "
                      "which draws each hypothesis on a row of its own"),
    "num_hypotheses": Text("hypotheses per input, best first", f"1..beam size (1..{MAX_BEAM_SIZE} when sampling)",
                           "--n-best"),
    "length_penalty": Text("hypotheses rank by score / length ** this", f"{_LP[0]:g}..{_LP[1]:g}", "--length-penalty"),
    "max_decoding_length": Text("at most this many tokens per translation, EOS included",
                                ">= 0 (0: every output empty; capped by max_positions)", "--max-decoding-length"),
    "min_decoding_length": Text("EOS is forbidden before this many tokens", "0..max decoding length",
                                "--min-decoding-length"),
    "max_length_a": Text("at most A * source tokens + B tokens per translation (A = 0 with B unset: off)",
                         f"0..{MAX_LENGTH_A:g}", "--max-length-a"),
    "max_length_b": Text("B of that limit", f"0..{MAX_LENGTH_B}", "--max-length-b"),
    "sampling_topk": Text("1: argmax; 0: sample from the whole vocabulary; k: from the best k", ">= 0",
                          "--sampling-topk"),
    "sampling_topp": Text("sample from the smallest set of tokens of probability >= this", f"{MIN_TOPP:g}..1",
                          "--sampling-topp"),
    "sampling_temperature": Text("logits are divided by this before sampling (0: argmax)",
                                 f"0 or {_T[0]:g}..{_T[1]:g}", "--sampling-temperature"),
    "repetition_penalty": Text("the log-probs of tokens already generated are multiplied by this",
                               f"{_RP[0]:g}..{_RP[1]:g}", "--repetition-penalty"),
    "no_repeat_ngram_size": Text("no n-gram of this many tokens appears twice (0: off)", ">= 0",
                                 "--no-repeat-ngram-size"),
    "seed": Text("the sampling seed (unset: fresh entropy)", ">= 0", "--seed"),
    # --plot-attention asks for it (commands.translate_texts)
    "return_attention": Text("each hypothesis's cross-attention (format-2 packages)"),
    "beam_rules": Text("how beam search ranks finished hypotheses and stops: docs/CONTRACTS.md", "", "--beam-rules",
                       "generation"),
    "early_stopping": Text("transformers rules: stop a sentence once it has beam size finished hypotheses (true), by "
                           "transformers' heuristic (false), or never early", "", "--early-stopping", "generation",
                           metavar="true|false|never"),
    "suppress_ids": Text("ids never generated (unset: PAD and BOS; empty: none)",
                         f"at most {MAX_SUPPRESS_IDS} ids of the vocabulary", "--suppress-ids", "generation",
                         metavar="ID,ID,...", flag_help="ids never generated (default: PAD and BOS; '' none)"),
    "forced_bos_id": Text("the first generated token (log-prob 0)", "an id of the vocabulary", "--forced-bos-id",
                          "generation", metavar="ID"),
    "forced_eos": Text("the last step the length limit allows may only be EOS (log-prob 0)", "", "--forced-eos",
                       "generation"),
    "renormalize": Text("log-softmax again after the filters", "", "--renormalize", "generation"),
    # translate_batch's own keywords (TranslationOptions). max_batch_size and batch_type bound the memory of a call:
    # a server's to set (max_batch_size=0 is one batch of every text), not a request's
    "max_batch_size": Text("examples (or padded source tokens) decoded at once", ">= 0 (0: one batch)",
                           "--max-batch-size", "batching", served=False,
                           flag_help="examples (or tokens) per batch; lines are read in chunks of this many",
                           flag_range=">= 1"),          # 0 (the API's one batch) would read no line
    "batch_type": Text("what max_batch_size counts", "", "--batch-type", "batching", served=False),
    "max_input_length": Text("each source is cut to this many tokens, EOS included (unset: the model's "
                             "max_positions)", "1..max_positions", "--max-input-length", "batching",
                             flag_help="default: the model's max_positions"),
    # the command line asks for them (commands.translate_texts: every line's scores; --scores prints them)
    "return_scores": Text("each hypothesis's score and normalized score"),
    "return_alignment": Text("each hypothesis's word alignment (format-2 packages)", "", "--alignment", "attention",
                             flag_help="append ' ||| ' and the word alignment to each translation (return_alignment)"),
    "target_prefix": Text("per text, the start every translation of it has (or none)", "", "--target-prefix",
                          metavar="TEXT", flag_help="every translation starts with TEXT (the API's target_prefix), "
                          "e.g. a term to force"),
    "constraints": Text("per text, phrases every translation of it holds (or none; beam search)", "", "--constraint",
                        metavar="TEXT", repeated=True,
                        flag_help="every translation holds TEXT, a term (repeatable: all of them; beam search; the "
                        "API's constraints); a line where none within the length limit does gets the closest, with a "
                        "warning"),
    "source_lang": Text("the source language of a multilingual model (NLLB: eng_Latn); `seq2onnx info MODEL_DIR` "
                        "lists its languages", "", "--source-lang", metavar="CODE"),
    "target_lang": Text("the target language of a multilingual model (OPUS-MT en-ROMANCE: fra; NLLB: deu_Latn)", "",
                        "--target-lang", metavar="CODE"),
}


def _options() -> Tuple[Option, ...]:
    """One Option per field of DecodingOptions, then of TranslationOptions, in their order: the name, kind and
    default the record's, the rest TEXTS'."""
    out = []
    for record in (DecodingOptions, TranslationOptions):
        hints = get_type_hints(record)
        for f in fields(record):
            text = TEXTS[f.name]                        # a field without its line: a KeyError at import
            out.append(Option(**{t.name: getattr(text, t.name) for t in fields(Text)}, name=f.name,
                              kind=kind_of(hints[f.name]), default=f.default, decoding=record is DecodingOptions))
    if len(out) != len(TEXTS):
        raise KeyError(f"lines for no option: {sorted(set(TEXTS) - {o.name for o in out})}")
    return tuple(out)


OPTIONS: Tuple[Option, ...] = _options()
BY_NAME: Dict[str, Option] = {o.name: o for o in OPTIONS}
SERVED: Tuple[str, ...] = tuple(o.name for o in OPTIONS if o.served)


# --- a request's options ----------------------------------------------------------------------------------
def _shown(value: Any) -> str:
    """A JSON value as JSON spells it (2.0, true, null), shortened."""
    try:
        return shorten(json.dumps(value, ensure_ascii=True))
    except (TypeError, ValueError):                     # not made by json.loads
        return shorten(repr(value))


def request_options(body: Mapping[str, Any], generation: Optional[Mapping[str, Any]] = None,
                    own: Collection[str] = ()) -> Dict[str, Any]:
    """A request's options -> translate_batch's keyword arguments: `body` a JSON object's fields (json.loads'
    types, the Python API's names), of which those in `own` (the server's own fields, e.g. "q") are skipped.
    Only the options given come back, so a package's generation defaults apply to the others as in the API.
    Each must have its kind's JSON type (an integer is not 2.0, a bool only true/false, a list for a tuple); the
    decoding options are then checked by DecodingOptions over `generation` (the package's defaults,
    Translator.package.generation: early_stopping needs beam_rules "transformers", which a converted package may
    set); per-text lists and max_input_length are checked by translate_batch. An unknown field, one a request may
    not set, or a bad value: an OptionError naming it (a server answers 400 with its str())."""
    bad = sorted(str(k) for k in body if k not in own and k not in SERVED)
    if bad:
        theirs = [k for k in bad if k in BY_NAME]
        if theirs:
            raise OptionError(f"{', '.join(theirs)}: set by the server (it bounds the server's memory), not by a "
                              "request")
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        raise OptionError(f"unknown option(s) {', '.join(repr(shorten(k)) for k in bad[:5])}{more}; known: "
                          f"{', '.join(sorted([*own, *SERVED]))}")
    options = {name: value for name, value in body.items() if name not in own}
    for name, value in options.items():
        kind = BY_NAME[name].kind
        if not kind.accepts(value):
            raise OptionTypeError(Arg(name), f" must be {kind.word}, got {_shown(value)}")
    DecodingOptions.from_kwargs(**with_defaults({k: v for k, v in options.items() if BY_NAME[k].decoding}, generation))
    return options


def form_options(form: Mapping[str, str], generation: Optional[Mapping[str, Any]] = None,
                 own: Collection[str] = ()) -> Dict[str, Any]:
    """request_options for form or query fields (every value text): each read as its command-line flag reads it
    ("4", "0.6", "true", "never", ids "0,58100"). The per-text lists (target_prefix, constraints) have no text
    form: an OptionError asks for a JSON body."""
    values: Dict[str, Any] = {}
    for name, text in form.items():
        option = BY_NAME.get(name)
        if name in own or option is None or not option.served:
            values[name] = text                         # request_options names what is wrong with it
        elif option.kind.parse is None:
            raise OptionError(Arg(name), f" is {option.kind.word}: send it in a JSON body, not a form field")
        else:
            try:
                values[name] = option.kind.from_text(text)
            except ValueError as e:
                raise OptionTypeError(Arg(name), f" {e}") from None
    return request_options(values, generation, own)


def json_schema(generation: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The options a request may set as a JSON Schema (draft 2020-12) object, e.g. for GET /v1/options: per option
    its type, default (the package's where `generation`, its manifest's generation defaults, has one; else the
    API's) and description (help; the range in words: DecodingOptions checks it)."""
    defaults = {**{o.name: o.default for o in OPTIONS}, **(generation or {})}
    properties = {}
    for o in OPTIONS:
        if o.served:
            default = defaults[o.name]
            properties[o.name] = {**o.kind.json_schema(),
                                  "default": list(default) if isinstance(default, tuple) else default,
                                  "description": o.help + (f"; {o.range}" if o.range else "")}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "translate_batch options",
            "type": "object", "properties": properties}
