"""translate_batch's options, each written once: its name (the Python API's, a JSON field's), kind, default, one-line
help, range in words, command-line flag, and whether a server request may set it.

From this table come the command line's flags (commands.py), a request's keyword arguments for translate_batch
(`request_options` from a JSON object, `form_options` from form or query fields) and the schema a server publishes
(`json_schema`). The values are checked where they always are: DecodingOptions (options.py, the ranges' one place)
and translate_batch; here only how each is spelled. Adding a decoding option: its DecodingOptions field (default and
check), then one line in OPTIONS (tests/test_options_table.py fails until it is there).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Collection, Dict, List, Mapping, Optional, Tuple

from .options import (BATCH_TYPES, BEAM_RULES, DEFAULT_MAX_BATCH_SIZE, EARLY_STOPPING, LENGTH_PENALTY_RANGE,
                      MAX_BEAM_SIZE, MAX_LENGTH_A, MAX_LENGTH_B, MAX_SUPPRESS_IDS, MIN_TOPP, REPETITION_PENALTY_RANGE,
                      TEMPERATURE_RANGE, Arg, DecodingOptions, OptionError, OptionTypeError, shorten, with_defaults)


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
class Option:
    name: str                       # the Python API's keyword, a JSON field's name
    kind: Kind
    default: Any                    # DecodingOptions' (read from it) or translate_batch's (its signature's)
    help: str                       # one line
    range: str                      # the values allowed, in words ("" where the kind says it); DecodingOptions and
                                    #   translate_batch check them
    flag: Optional[str]             # the command line's (None: none of its own; commands.py says why)
    group: str                      # the command line's help section (commands.SECTIONS)
    served: bool                    # a server request may set it
    decoding: bool                  # a DecodingOptions field (else translate_batch's own keyword)


_DEFAULTS = {f.name: f.default for f in fields(DecodingOptions)}


def _decoding(name: str, kind: Kind, help: str, range: str, flag: Optional[str], group: str = "decoding",
              served: bool = True) -> Option:
    return Option(name, kind, _DEFAULTS[name], help, range, flag, group, served, True)


def _call(name: str, kind: Kind, default: Any, help: str, range: str, flag: Optional[str], group: str,
          served: bool = True) -> Option:
    return Option(name, kind, default, help, range, flag, group, served, False)


_LP, _T, _RP = LENGTH_PENALTY_RANGE, TEMPERATURE_RANGE, REPETITION_PENALTY_RANGE
OPTIONS: Tuple[Option, ...] = (
    # DecodingOptions' fields (a converted package's manifest "generation" may set other defaults: `seq2onnx info`)
    _decoding("beam_size", INT, "beams searched (1: greedy, or sampling)",
              f"1..{MAX_BEAM_SIZE} (unset, when sampling: 1)", "--beam-size"),
    _decoding("num_hypotheses", INT, "hypotheses per input, best first",
              f"1..beam size (1..{MAX_BEAM_SIZE} when sampling)", "--n-best"),
    _decoding("length_penalty", NUMBER, "hypotheses rank by score / length ** this", f"{_LP[0]:g}..{_LP[1]:g}",
              "--length-penalty"),
    _decoding("max_decoding_length", INT, "at most this many tokens per translation, EOS included",
              ">= 0 (0: every output empty; capped by max_positions)", "--max-decoding-length"),
    _decoding("min_decoding_length", INT, "EOS is forbidden before this many tokens", "0..max decoding length",
              "--min-decoding-length"),
    _decoding("max_length_a", NUMBER, "at most A * source tokens + B tokens per translation (A = 0 with B unset: off)",
              f"0..{MAX_LENGTH_A:g}", "--max-length-a"),
    _decoding("max_length_b", INT.or_null(), "B of that limit", f"0..{MAX_LENGTH_B}", "--max-length-b"),
    _decoding("sampling_topk", INT, "1: argmax; 0: sample from the whole vocabulary; k: from the best k", ">= 0",
              "--sampling-topk"),
    _decoding("sampling_topp", NUMBER, "sample from the smallest set of tokens of probability >= this",
              f"{MIN_TOPP:g}..1", "--sampling-topp"),
    _decoding("sampling_temperature", NUMBER, "logits are divided by this before sampling (0: argmax)",
              f"0 or {_T[0]:g}..{_T[1]:g}", "--sampling-temperature"),
    _decoding("repetition_penalty", NUMBER, "the log-probs of tokens already generated are multiplied by this",
              f"{_RP[0]:g}..{_RP[1]:g}", "--repetition-penalty"),
    _decoding("no_repeat_ngram_size", INT, "no n-gram of this many tokens appears twice (0: off)", ">= 0",
              "--no-repeat-ngram-size"),
    _decoding("seed", INT.or_null(), "the sampling seed (unset: fresh entropy)", ">= 0", "--seed"),
    _decoding("return_attention", BOOL, "each hypothesis's cross-attention (format-2 packages)", "", None),
    _decoding("beam_rules", choice(BEAM_RULES), "how beam search ranks finished hypotheses and stops: "
              "docs/CONTRACTS.md", "", "--beam-rules", "generation"),
    _decoding("early_stopping", EARLY, "transformers rules: stop a sentence once it has beam size finished "
              "hypotheses (true), by transformers' heuristic (false), or never early", "", "--early-stopping",
              "generation"),
    _decoding("suppress_ids", IDS.or_null(), "ids never generated (unset: PAD and BOS; empty: none)",
              f"at most {MAX_SUPPRESS_IDS} ids of the vocabulary", "--suppress-ids", "generation"),
    _decoding("forced_bos_id", INT.or_null(), "the first generated token (log-prob 0)", "an id of the vocabulary",
              "--forced-bos-id", "generation"),
    _decoding("forced_eos", BOOL, "the last step the length limit allows may only be EOS (log-prob 0)", "",
              "--forced-eos", "generation"),
    _decoding("renormalize", BOOL, "log-softmax again after the filters", "", "--renormalize", "generation"),
    # translate_batch's own keywords. max_batch_size and batch_type bound the memory of a call: a server's to set
    # (max_batch_size=0 is one batch of every text), not a request's
    _call("max_batch_size", INT, DEFAULT_MAX_BATCH_SIZE, "examples (or padded source tokens) decoded at once",
          ">= 0 (0: one batch)", "--max-batch-size", "batching", served=False),
    _call("batch_type", choice(BATCH_TYPES), BATCH_TYPES[0], "what max_batch_size counts", "", "--batch-type",
          "batching", served=False),
    _call("max_input_length", INT.or_null(), None, "each source is cut to this many tokens, EOS included "
          "(unset: the model's max_positions)", "1..max_positions", "--max-input-length", "batching"),
    _call("return_scores", BOOL, False, "each hypothesis's score and normalized score", "", None, "decoding"),
    _call("return_alignment", BOOL, False, "each hypothesis's word alignment (format-2 packages)", "",
          "--alignment", "attention"),
    _call("target_prefix", PREFIXES.or_null(), None, "per text, the start every translation of it has (or none)",
          "", "--target-prefix", "decoding"),
    _call("constraints", PHRASES.or_null(), None, "per text, phrases every translation of it holds (or none; "
          "beam search)", "", "--constraint", "decoding"),
    _call("source_lang", TEXT.or_null(), None, "the source language of a multilingual model (NLLB: eng_Latn); "
          "`seq2onnx info MODEL_DIR` lists its languages", "", "--source-lang", "decoding"),
    _call("target_lang", TEXT.or_null(), None, "the target language of a multilingual model (OPUS-MT en-ROMANCE: "
          "fra; NLLB: deu_Latn)", "", "--target-lang", "decoding"),
)
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
