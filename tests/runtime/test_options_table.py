"""translate_batch's options written once (runtime/option_table.py): the table cannot drift from
DecodingOptions' fields or translate_batch's signature; the command line's flags, a JSON request's keyword
arguments, a form's and the published schema all come from it. No trained model: the shipped one where a
request reaches translate_batch."""
from __future__ import annotations

import inspect
import json
from dataclasses import fields

import pytest

from seq2onnx.runtime.cli import commands
from seq2onnx.runtime.errors import Seq2OnnxError
from seq2onnx.runtime.option_table import (BY_NAME, OPTIONS, SERVED, form_options, json_schema, request_options)
from seq2onnx.runtime.options import (BATCH_TYPES, BEAM_RULES, DecodingOptions, OptionError, OptionTypeError,
                                      TranslationOptions)
from seq2onnx.runtime.serve.scheduler import TRANSLATE, Job, RequestScheduler, batch_key
from seq2onnx.runtime.translator import Translator

SHIPPED = "numbers-en-de"
CALL_OWN = {"texts"}                    # translate_batch's parameters that are not options: the texts themselves


def keywords(method) -> dict:
    """A method's keyword parameters with a default -> the default."""
    return {name: p.default for name, p in inspect.signature(method).parameters.items()
            if p.default is not p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


# --- the table cannot drift -------------------------------------------------------------------------------------
def test_the_table_holds_every_decoding_option_and_every_keyword_of_translate_batch_with_its_default():
    """A field added to DecodingOptions or a keyword to translate_batch without its line in OPTIONS fails here."""
    assert [o.name for o in OPTIONS if o.decoding] == [f.name for f in fields(DecodingOptions)]
    own = keywords(Translator.translate_batch)
    assert {o.name for o in OPTIONS if not o.decoding} == set(own)
    assert set(inspect.signature(Translator.translate_batch).parameters) - set(own) == {"self", *CALL_OWN, "decoding"}
    api = DecodingOptions().to_dict()
    for o in OPTIONS:
        assert o.default == (api[o.name] if o.decoding else own[o.name]), o.name
        assert o.kind.accepts(o.default) or isinstance(o.default, tuple), o.name     # a default is a value it spells
    for name, default in keywords(Translator.score_batch).items():   # `score` shares the batching flags
        assert BY_NAME[name].default == default, name


def test_the_table_is_read_from_the_two_records_and_translate_batch_keeps_their_keywords():
    """Names, kinds and defaults come from DecodingOptions' and TranslationOptions' fields; translate_batch's own
    keywords are TranslationOptions' fields, with its defaults (its signature cannot drift from the record)."""
    assert [o.name for o in OPTIONS] == [f.name for f in (*fields(DecodingOptions), *fields(TranslationOptions))]
    assert keywords(Translator.translate_batch) == TranslationOptions().to_dict()
    assert {o.name: o.default for o in OPTIONS if not o.decoding} == TranslationOptions().to_dict()
    assert BY_NAME["batch_type"].kind.choices == BATCH_TYPES and BY_NAME["beam_rules"].kind.choices == BEAM_RULES
    assert [BY_NAME[n].kind.nullable for n in ("seed", "max_input_length", "beam_size", "return_scores")] == \
        [True, True, False, False]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_batch_size": -1}, "max_batch_size must be an integer >= 0, got -1"),
    ({"max_batch_size": 2.0}, "max_batch_size must be an integer >= 0, got 2.0"),
    ({"batch_type": "rows"}, "batch_type must be one of examples, tokens, got 'rows'"),
    ({"return_alignment": "yes"}, "return_alignment must be True or False, got 'yes'"),
])
def test_translate_batchs_own_keywords_are_checked_by_their_record_in_translate_batchs_words(kwargs, message):
    with pytest.raises(OptionError) as e:
        TranslationOptions(**kwargs)
    assert str(e.value) == message
    with pytest.raises(OptionError) as e:
        Translator(SHIPPED, device="cpu").translate_batch(["three"], **kwargs)
    assert str(e.value) == message


def test_check_options_makes_the_records_that_translate_batch_decodes_with():
    """The one place that turns translate_batch's keywords into records: each record as its keywords say, over the
    package's defaults; the server's jobs hold them, and run_batch with them is translate_batch."""
    tr = Translator(SHIPPED, device="cpu")
    kwargs = dict(beam_size=2, num_hypotheses=2, return_scores=True, max_batch_size=1, target_prefix=[None, None])
    call, decoding = tr.check_options(2, **kwargs)
    assert call == TranslationOptions(max_batch_size=1, return_scores=True, target_prefix=[None, None])
    assert decoding == DecodingOptions.from_kwargs(**{**tr.package.generation, "beam_size": 2, "num_hypotheses": 2})
    assert tr.check_options(1, sampling_topk=5)[1].beam_size == 1              # options.with_defaults' rule
    texts = ["three hundred and one", "seven"]
    assert tr.run_batch(texts, call, decoding) == tr.translate_batch(texts, **kwargs)
    with pytest.raises(OptionError, match="^unknown decoding option.*; and translate_batch's own: batch_type, "):
        tr.check_options(1, beam=2)


def test_the_servers_jobs_hold_the_records_and_jobs_of_equal_records_share_a_batch():
    tr = Translator(SHIPPED, device="cpu")
    kwargs = {"beam_size": 2, "target_prefix": ["drei", None]}
    scheduler = RequestScheduler(tr).start()
    try:
        job = scheduler.submit(TRANSLATE, ["three", "seven"], kwargs)
        results = job.future.result(timeout=120)
    finally:
        scheduler.close()
    assert (job.call, job.decoding) == tr.check_options(2, **kwargs)
    assert results == tr.translate_batch(["three", "seven"], **kwargs)
    # the dynamic policy's groups: equal records, whatever a request spelled out (its per-text lists aside); a
    # sampling job alone
    jobs = [Job(TRANSLATE, ["three"], o) for o in ({}, {"beam_size": 4}, {"target_prefix": ["drei"]},
                                                   {"sampling_topk": 5}, {"beam_size": 2})]
    for j in jobs:
        j.call, j.decoding = tr.check_options(1, **j.options)
    keys = [batch_key(j) for j in jobs]
    assert keys[0] == keys[1] == keys[2] and keys[3] is None and keys[4] not in (keys[0], None)


def test_each_line_is_complete():
    for o in OPTIONS:
        assert o.help and "\n" not in o.help and o.group in commands.SECTIONS, o.name
        assert o.flag is None or o.flag.startswith("--"), o.name
    assert len({o.flag for o in OPTIONS if o.flag}) == len([o for o in OPTIONS if o.flag])
    # a request may not choose the server's memory: max_batch_size=0 is one batch of every text
    assert set(BY_NAME) - set(SERVED) == {"max_batch_size", "batch_type"}


# --- the command line's flags come from the table, and are today's -------------------------------------------
TODAYS_FLAGS = {
    "--max-batch-size", "--batch-type", "--max-input-length", "--beam-size", "--n-best", "--length-penalty",
    "--max-decoding-length", "--min-decoding-length", "--max-length-a", "--max-length-b", "--no-relative-length",
    "--sampling-topk", "--sampling-topp", "--sampling-temperature", "--repetition-penalty", "--no-repeat-ngram-size",
    "--seed", "--beam-rules", "--early-stopping", "--suppress-ids", "--forced-bos-id", "--forced-eos",
    "--renormalize", "--source-lang", "--target-lang", "--scores", "--target-prefix", "--constraint", "--alignment",
    "--plot-attention"}
MODEL_FLAGS = {"-h", "--help", "--input", "-i", "--output", "-o", "--device", "--compute-type", "--intra-threads",
               "--inter-threads", "--no-verify"}


def test_the_translate_flags_are_todays_each_setting_the_api_name_to_the_api_default():
    parser = commands.translate_parser()
    assert {s for a in parser._actions for s in a.option_strings} == TODAYS_FLAGS | MODEL_FLAGS
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for o in OPTIONS:
        if o.flag is not None:
            action = actions[o.flag]
            assert action.dest == o.name and commands._flags()[o.name] == o.flag
            assert action.default == (None if o.name == "beam_size" else o.default), o.name   # None: sampling's 1
    assert "--max-batch-size >= 1;" in commands.TRANSLATE_FORMAT      # each range in --help, the CLI's where it differs
    for o in OPTIONS:
        if o.flag is not None and o.range and o.name != "max_batch_size":
            assert f"{o.flag} {o.range}" in commands.TRANSLATE_FORMAT.replace("\n  ", " "), o.name


def test_the_flags_parse_to_the_api_values():
    args = commands.translate_parser().parse_args(
        ["m", "--n-best", "2", "--suppress-ids", "0,5", "--early-stopping", "never", "--forced-eos", "--alignment",
         "--constraint", "a", "--constraint", "b", "--max-length-a", "1.5", "--beam-rules", "transformers"])
    assert (args.num_hypotheses, args.suppress_ids, args.early_stopping, args.forced_eos) == (2, [0, 5], "never", True)
    assert (args.return_alignment, args.constraints, args.max_length_a) == (True, ["a", "b"], 1.5)
    assert commands.translate_parser().parse_args(["m", "--suppress-ids", ""]).suppress_ids == []


@pytest.mark.parametrize("argv, message", [
    (["--early-stopping", "maybe"], "argument --early-stopping: must be true, false or never, got 'maybe'"),
    (["--suppress-ids", "1,x"], "argument --suppress-ids: must be ids separated by commas, e.g. 0,58100, got '1,x'"),
    (["--beam-size", "2.0"], "argument --beam-size: invalid int value: '2.0'"),
])
def test_a_bad_flag_is_one_line_naming_it(argv, message):
    with pytest.raises(Seq2OnnxError) as e:                 # cli.main: one line, exit 2
        commands.translate_main(["m", *argv])
    assert str(e.value) == f"{message} (see seq2onnx translate --help)"


# --- a JSON request ---------------------------------------------------------------------------------------------
def test_a_json_request_gives_the_fields_given_of_their_json_types():
    body = json.loads('{"beam_size": 2, "num_hypotheses": 2, "length_penalty": 1, "suppress_ids": [0, 5], '
                      '"seed": null, "return_scores": true, "target_prefix": ["x", null], "constraints": [["a"], null],'
                      ' "early_stopping": "never", "beam_rules": "transformers", "max_input_length": 8, "q": "hi"}')
    kwargs = request_options(body, own={"q"})
    assert kwargs == {k: v for k, v in body.items() if k != "q"}           # only those given: package defaults apply
    assert request_options({}) == {}


@pytest.mark.parametrize("body, message", [
    ({"beam_size": 2.0}, "beam_size must be an integer, got 2.0"),
    ({"beam_size": True}, "beam_size must be an integer, got true"),
    ({"beam_size": None}, "beam_size must be an integer, got null"),
    ({"seed": "7"}, "seed must be an integer or null, got \"7\""),
    ({"forced_eos": 1}, "forced_eos must be true or false, got 1"),
    ({"return_scores": "yes"}, "return_scores must be true or false, got \"yes\""),
    ({"length_penalty": "1"}, "length_penalty must be a number, got \"1\""),
    ({"suppress_ids": "0,5"}, "suppress_ids must be a list of ids or null, got \"0,5\""),
    ({"target_prefix": "x"}, "target_prefix must be a list of one string (or null) per text or null, got \"x\""),
    ({"early_stopping": 1}, "early_stopping must be true, false or \"never\", got 1"),
])
def test_a_json_value_of_the_wrong_type_is_one_line_naming_it(body, message):
    with pytest.raises(OptionTypeError) as e:
        request_options(body)
    assert str(e.value) == message


def test_an_unknown_field_is_named_with_the_known_ones_and_the_servers_own_are_refused():
    with pytest.raises(OptionError) as e:
        request_options({"beam": 4, "q": "x"}, own={"q", "target"})
    known = str(e.value).split("; known: ")[1].split(", ")
    assert str(e.value).startswith("unknown option(s) 'beam'; known: ") and known == sorted([*SERVED, "q", "target"])
    with pytest.raises(OptionError, match=r"^unknown option\(s\) 'a0', 'a1', 'a10', 'a11', 'a12' and 95 more; known: "):
        request_options({f"a{i}": 0 for i in range(100)})             # a hostile body: a line, not a page
    with pytest.raises(OptionError, match="^max_batch_size: set by the server"):
        request_options({"max_batch_size": 0})


@pytest.mark.parametrize("body", [{"beam_size": 0}, {"num_hypotheses": 5}, {"sampling_topk": 5, "beam_size": 4},
                                  {"early_stopping": True}, {"suppress_ids": [1, 2.0]}, {"beam_rules": "marian"},
                                  {"sampling_temperature": 1e9}, {"length_penalty": 10 ** 400}])
def test_values_are_checked_by_decoding_options_in_its_words(body):
    with pytest.raises(OptionError) as expected:
        DecodingOptions(**body)
    with pytest.raises(OptionError) as e:
        request_options(body)
    assert str(e.value) == str(expected.value)


def test_the_packages_generation_defaults_count():
    """early_stopping needs beam_rules "transformers": a converted package's generation sets it."""
    assert request_options({"early_stopping": True}, {"beam_rules": "transformers", "beam_size": 4}) == \
        {"early_stopping": True}
    assert request_options({"sampling_topk": 5, "beam_size": 1}, {"beam_size": 5}) == {"sampling_topk": 5,
                                                                                        "beam_size": 1}


def test_every_served_option_at_its_published_default_is_taken_by_translate_batch():
    """The schema's defaults, sent back as a request, translate as no options do (the shipped model)."""
    schema = json_schema()
    body = json.loads(json.dumps({name: p["default"] for name, p in schema["properties"].items()}))
    kwargs = request_options(body)
    tr = Translator(SHIPPED, device="cpu")
    assert tr.translate_batch(["three hundred and one"], **kwargs)[0].hypotheses == \
        tr.translate_batch(["three hundred and one"])[0].hypotheses


# --- form fields and the published schema -------------------------------------------------------------------
def test_form_fields_read_as_the_flags_do():
    form = {"beam_size": "2", "length_penalty": "0.5", "forced_eos": "true", "suppress_ids": "0,5",
            "early_stopping": "never", "beam_rules": "transformers", "source": "en"}
    assert form_options(form, own={"source"}) == {"beam_size": 2, "length_penalty": 0.5, "forced_eos": True,
                                                  "suppress_ids": [0, 5], "early_stopping": "never",
                                                  "beam_rules": "transformers"}
    with pytest.raises(OptionTypeError, match="^beam_size must be an integer, got '2.5'$"):
        form_options({"beam_size": "2.5"})
    with pytest.raises(OptionTypeError, match="^forced_eos must be true or false, got 'yes'$"):
        form_options({"forced_eos": "yes"})
    with pytest.raises(OptionError, match="^target_prefix is a list of .* send it in a JSON body"):
        form_options({"target_prefix": "Die"})
    with pytest.raises(OptionError, match="^unknown option"):
        form_options({"beam": "2"})


def test_the_schema_is_json_with_each_served_option_its_type_default_and_help():
    schema = json.loads(json.dumps(json_schema()))
    assert list(schema["properties"]) == list(SERVED)
    for name, p in schema["properties"].items():
        o = BY_NAME[name]
        assert p["description"].startswith(o.help) and (o.range in p["description"])
        assert p["default"] == (list(o.default) if isinstance(o.default, tuple) else o.default)
    assert schema["properties"]["seed"]["type"] == ["integer", "null"]
    assert schema["properties"]["early_stopping"]["enum"] == [False, True, "never"]
    assert json_schema({"beam_size": 5, "suppress_ids": (1, 2)})["properties"]["beam_size"]["default"] == 5
    assert json_schema({"suppress_ids": (1, 2)})["properties"]["suppress_ids"]["default"] == [1, 2]
