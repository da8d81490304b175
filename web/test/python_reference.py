"""The Python side of the web package's equality tests and benchmark: what the Python runtime says.

Run by the JS tests (test/python.js) with the interpreter named by SEQ2ONNX_PYTHON (a venv with the repository's
dependencies: `make install-dev`). The package `seq2onnx` is imported from the checkout that holds this web/
folder (or from SEQ2ONNX_REPO), not from the venv's site-packages: the JS code is compared with the Python
runtime of the same commit, even when the venv holds an older install. Reads one JSON request on stdin, {"jobs": [JOB, ...]}, and writes {"results": [RESULT, ...]} on
stdout, one result per job, so that a test pays for one interpreter start. Jobs:

  {"op": "corpus", "langs": [..], "per_lang": N}
      -> {"texts": [...]}: real text from the gettext catalogs installed under /usr/share/locale, read by the
         project's own reader (training/gettext_data.py): English msgids and msgstrs of each language, every
         k-th of the sorted pairs, at most N per language
  {"op": "numbers", "numbers": [..], "forms": [..]}
      -> {"texts": [...]}: each number in each form of training/numbers.py FORMS ("canonical", "digits", ...)
  {"op": "train_tokenizer", "texts": [..], "vocab_size": N, "out": PATH, "lowercase": .., "split_digits": ..,
   "split_punctuation": .., "group_digits": ..}
      -> {"path": PATH}: a tokenizer.json trained by seq2onnx.training.tokenizer.train_tokenizer
  {"op": "tokenize", "tokenizer": PATH, "texts": [..]}
      -> {"ids": [[..]], "decoded": [..], "vocab_size": N}: ids as the runtime encodes text (specials_as_text), and
         decode(ids) (special tokens skipped) as the runtime turns ids into text
  {"op": "translate", "model": DIR, "compute_type": "float32" | "int8", "texts": [..], "options": {..}}
      -> {"results": [{hypotheses, token_ids, scores, normalized_scores, finished, truncated, attention}], "warnings": [..],
          "seconds": S}: Translator.translate_batch(texts, return_scores=True, **options)
  {"op": "generate_tokens", "model": DIR, "compute_type": .., "text": T, "options": {..}}
      -> {"pieces": [..]}: list(Translator.generate_tokens(T, **options))
  {"op": "export_random", "out": DIR, "format_version": 2, "few_rows": false}
      -> {"path": DIR}: a model package (fp32 and int8, with its few-rows step if "few_rows": --few-rows) exported
         by `seq2onnx export`'s own pipeline (run_export)
         from a checkpoint of random weights (seed 0) with the shipped tokenizer: a small model that decodes
         until its length limit, so its cache fills and grows; needs torch (the dev venv has it)
  {"op": "check_options", "cases": [{..}, ..]}
      -> {"errors": [null | "message", ..]}: does DecodingOptions.from_kwargs(**case) refuse each case?
  {"op": "load", "model": DIR, "compute_type": ..}
      -> {"error": null | "the Seq2OnnxError's message"}: does the Python runtime load this folder?
  {"op": "tokenizer_rules"}
      -> {"allowed_regexes": [..], "regex_components": [..]}: runtime/package/tokenizer.py's rule on the regular
         expressions of a tokenizer.json (src/tokenizer_json.js must hold the same)
  {"op": "compare", "model": DIR, "compute_type": .., "texts": [..], "options": {..}, "js": [RESULT, ..],
   "python": [RESULT, ..]}
      -> {"error": null | "message", "max_diff": D}: the JS results (Python's key names) against Python's "translate"
         results for the same texts and options, by tests/agreement.py's rule: hypothesis for hypothesis, equal ids
         with scores within the float32 bound derived from the package's weights (int8: plus its quantization
         step), or a tie judged by this runtime teacher-forced. The rule lives there; test/compare.js asks here.
         D: the largest score difference where the ids agree
  {"op": "bounds", "model": DIR, "compute_type": ..}
      -> {"log_prob": B}: tests/agreement.py's bound on how far two float32 computations of one log-prob of this
         package's decoder step may lie apart (Float32Bounds.of_graph; int8: plus its quantization step)
  {"op": "convert_hf", "kind": "marian" | "marian_separate" | "marian_multilingual" | "m2m100" | "nllb", "work": DIR,
   "texts": N}
      -> {"path": DIR/<kind>-package, "texts": [..]}: a tiny HF folder of that kind (tests/hf_folders.py) built in
         DIR/<kind>, converted by `seq2onnx convert`'s own pipeline (export/hf_convert.py run_convert), and N English
         source lines of the text its tokenizers were trained on
  {"op": "external_data", "model": DIR, "out": DIR2, "point": {GRAPH: {KEY: VALUE}}}
      -> {"path": DIR2}: a copy of the package DIR with every graph written by the exporter's own writer with its
         weights in a data file beside it (export/graph_files.py save_graph(external=True), as `seq2onnx export
         --external-data` writes them), each variant's external_data and every file listed anew; "point" (optional):
         then every external initializer of GRAPH gets those external_data entries (e.g. location "../x"), the
         graph listed anew: a consistent, hostile package
  {"op": "share_weights", "model": DIR, "out": DIR2}
      -> {"path": DIR2}: a copy of the package DIR whose variants keep each weight that several of their graphs
         hold once, in VARIANT.shared.data (export/graph_files.py share_weights, as every export writes them),
         every file listed anew
  {"op": "schema"}
      -> the package rules the JS reader must hold as Python holds them (test/schema.test.js): runtime/package/manifest.py's
         format versions and limits, ModelConfig's fields (kinds, CHOICES, RANGES, the format-3 fields' defaults),
         runtime/package/manifest_records.py's language rules and GENERATION_FIELDS, DecodingOptions' fields and defaults,
         and the JSON Schema of manifest.json (runtime/package/schema.py manifest_schema)
  {"op": "bench", "model": DIR, "compute_type": .., "texts": [..], "options": {..}, "repeats": N, "warmups": W}
      -> {"seconds": [..], "tokens": T}: wall time of translate_batch over the texts, N times (after W warm-up
         calls, default 1), and the tokens it generated (EOS counted), for tokens/s
"""
from __future__ import annotations

import json
import os
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any, Dict, List

REPO = Path(os.environ.get("SEQ2ONNX_REPO") or Path(__file__).resolve().parents[2])


def _import_checkout() -> None:
    """Make `import seq2onnx.X` read REPO/X (the layout pyproject.toml's package-dir installs)."""
    package = types.ModuleType("seq2onnx")
    package.__path__ = [str(REPO)]
    sys.modules["seq2onnx"] = package


_translators: Dict[Any, Any] = {}


def _translator(model: str, compute_type: str) -> Any:
    from seq2onnx.runtime.translator import Translator

    key = (model, compute_type)
    if key not in _translators:
        _translators[key] = Translator(model, device="cpu", compute_type=compute_type)
    return _translators[key]


# The catalogs of Debian's essential packages: every machine of one release has the same ones, while the rest come
# and go with what is installed (installing Chromium added 533 catalogs and changed the trained test tokenizers)
CORPUS_DOMAINS = ("bash", "coreutils", "diffutils", "dpkg", "findutils", "grep", "sed", "tar")


def corpus(job: Dict[str, Any]) -> Dict[str, Any]:
    from seq2onnx.training.gettext_data import catalog_files, read_catalogs

    texts: List[str] = []
    for lang in job["langs"]:
        files = [f for f in catalog_files(lang) if Path(f).stem in CORPUS_DOMAINS]
        if not files:
            continue
        pairs, _ = read_catalogs(files)
        step = max(1, len(pairs) // job["per_lang"])
        chosen = pairs[::step][:job["per_lang"]]
        texts += [source for source, _ in chosen] + [target for _, target in chosen]
    return {"texts": texts}


def numbers(job: Dict[str, Any]) -> Dict[str, Any]:
    from seq2onnx.training.numbers import FORMS

    return {"texts": [FORMS[form](n) for form in job["forms"] for n in job["numbers"]]}


def train_tokenizer(job: Dict[str, Any]) -> Dict[str, Any]:
    from seq2onnx.training.tokenizer import train_tokenizer as train

    flags = {k: job.get(k, False) for k in ("lowercase", "split_digits", "split_punctuation", "group_digits")}
    tok = train(job["texts"], job["vocab_size"], **flags)
    tok.save(job["out"])
    return {"path": job["out"]}


def tokenize(job: Dict[str, Any]) -> Dict[str, Any]:
    from tokenizers import Tokenizer

    from seq2onnx.runtime.package.tokenizer import specials_as_text

    tok = specials_as_text(Tokenizer.from_file(job["tokenizer"]))
    ids = [e.ids for e in tok.encode_batch(job["texts"])]
    return {"ids": ids, "decoded": tok.decode_batch(ids), "vocab_size": tok.get_vocab_size(with_added_tokens=True)}


def translate(job: Dict[str, Any]) -> Dict[str, Any]:
    tr = _translator(job["model"], job["compute_type"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        out = tr.translate_batch(job["texts"], return_scores=True, **job.get("options", {}))
        seconds = time.perf_counter() - start
    results = [{"hypotheses": r.hypotheses, "token_ids": r.token_ids, "scores": r.scores,
                "normalized_scores": r.normalized_scores, "finished": r.finished, "truncated": r.truncated,
                "source_unknown_tokens": r.source_unknown_tokens,
                "attention": r.attention}
               for r in out]
    return {"results": results, "warnings": [str(w.message) for w in caught], "seconds": seconds}


def generate_tokens(job: Dict[str, Any]) -> Dict[str, Any]:
    tr = _translator(job["model"], job["compute_type"])
    return {"pieces": list(tr.generate_tokens(job["text"], **job.get("options", {})))}


def export_random(job: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    from seq2onnx.export.commands import ExportOptions, run_export
    from seq2onnx.runtime.package.config import ModelConfig
    from seq2onnx.training.checkpoint import make_checkpoint, save_checkpoint
    from seq2onnx.training.model import Transformer

    torch.manual_seed(0)
    out = Path(job["out"])
    tokenizer = (REPO / "models" / "numbers-en-de" / "tokenizer.json").read_text(encoding="utf-8")
    config = ModelConfig(vocab_size=200, d_model=64, n_heads=4, d_ff=128, encoder_layers=2, decoder_layers=2,
                         dropout=0.0, max_positions=64)
    checkpoint = out.parent / f"{out.name}.pt"
    save_checkpoint(make_checkpoint(config, Transformer(config).state_dict(), tokenizer, 0, 0, {}, {}), checkpoint)
    run_export(ExportOptions(checkpoint=checkpoint, out_dir=out, int8=True, int8_validation=False,
                             decoder_format=job.get("decoder_format", 2), few_rows=job.get("few_rows", False)))
    return {"path": str(out)}


def check_options(job: Dict[str, Any]) -> Dict[str, Any]:
    from seq2onnx.runtime.options import DecodingOptions

    errors = []
    for case in job["cases"]:
        try:
            DecodingOptions.from_kwargs(**case)
            errors.append(None)
        except (TypeError, ValueError) as e:
            errors.append(str(e))
    return {"errors": errors}


def load(job: Dict[str, Any]) -> Dict[str, Any]:
    from seq2onnx.runtime.errors import Seq2OnnxError
    from seq2onnx.runtime.translator import Translator

    try:
        Translator(job["model"], device="cpu", compute_type=job.get("compute_type", "float32"))
    except Seq2OnnxError as e:        # a ModelPackageError, or a variant this onnxruntime cannot run
        return {"error": str(e)}
    return {"error": None}


def tokenizer_rules(job: Dict[str, Any]) -> Dict[str, Any]:
    from seq2onnx.runtime.package import tokenizer as package_tokenizer

    return {"allowed_regexes": list(package_tokenizer.ALLOWED_REGEXES),
            "regex_components": list(package_tokenizer.REGEX_COMPONENTS)}


def compare(job: Dict[str, Any]) -> Dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests"))
    from agreement import Float32Bounds, assert_same_decodes, engine_judge, hypotheses

    from dataclasses import fields

    from seq2onnx.runtime.options import DecodingOptions

    tr = _translator(job["model"], job["compute_type"])
    options = dict(job.get("options", {}))
    # the sources and decoding options translate_batch decodes: language tokens first, the package's generation defaults
    prefix, lang_options = tr._languages(options.get("source_lang"), options.get("target_lang"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sources, _ = tr._sources(job["texts"], options.get("max_input_length"), prefix=prefix)
    known = {f.name for f in fields(DecodingOptions)}          # the rest are translate_batch's own (batching, prefixes)
    decoding = DecodingOptions.from_kwargs(**tr._decoding({**lang_options, **{k: v for k, v in options.items()
                                                                              if k in known}}))
    bounds = Float32Bounds.of_graph(Path(job["model"]) / "decoder_step.onnx", int8=tr.variant == "int8")

    def hyps(r):
        return hypotheses(r["token_ids"], r["scores"], r["normalized_scores"], r["finished"])

    got, expected = [hyps(r) for r in job["js"]], [hyps(r) for r in job["python"]]
    max_diff = max((abs(a.score - b.score) for g, e in zip(got, expected) for a, b in zip(g, e)
                    if a.tokens == b.tokens), default=0.0)
    try:
        assert_same_decodes(bounds, engine_judge(tr.engine, tr.config), sources, got, expected,
                            greedy=decoding.beam_size == 1, eos_id=tr.config.eos_id,
                            length_penalty=decoding.length_penalty, what=f"{job['compute_type']} {options}")
    except AssertionError as e:
        return {"error": " ".join(str(e).split()) or "assertion failed", "max_diff": max_diff}
    return {"error": None, "max_diff": max_diff}


def bounds(job: Dict[str, Any]) -> Dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests"))
    from agreement import Float32Bounds

    int8 = job.get("compute_type", "float32") == "int8"
    return {"log_prob": Float32Bounds.of_graph(Path(job["model"]) / "decoder_step.onnx", int8=int8).log_prob}


def convert_hf(job: Dict[str, Any]) -> Dict[str, Any]:
    sys.path.insert(0, str(REPO / "tests"))
    from hf_folders import BUILDERS, gettext_pairs

    from seq2onnx.export.hf_convert import ConvertOptions, run_convert

    work = Path(job["work"])
    folder = BUILDERS[job["kind"]](work / job["kind"])
    out = work / f"{job['kind']}-package"
    run_convert(ConvertOptions(folder, out))
    pairs = gettext_pairs("de")
    step = max(1, len(pairs) // job["texts"])
    return {"path": str(out), "texts": [source for source, _ in pairs[::step][:job["texts"]]]}


def external_data(job: Dict[str, Any]) -> Dict[str, Any]:
    import shutil

    import onnx

    from seq2onnx.export.graph_files import add_external_data_fields, data_file, save_graph
    from seq2onnx.runtime.package.manifest import MANIFEST, sha256_of

    out = Path(job["out"])
    shutil.copytree(job["model"], out)
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    graphs = sorted({g for v in manifest["variants"].values()
                     for g in [v["encoder"], v["decoder_step"]] + ([v["few_rows"]["decoder_step"]] if v.get("few_rows") else [])})
    for graph in graphs:
        save_graph(onnx.load(str(out / graph)), out / graph, external=True)
    for graph, entries in job.get("point", {}).items():
        model = onnx.load(str(out / graph), load_external_data=False)
        for tensor in model.graph.initializer:
            for entry in tensor.external_data:
                if entry.key in entries:
                    entry.value = entries[entry.key]
        onnx.save_model(model, str(out / graph))
    variants = add_external_data_fields(out, _variant_records(manifest))
    manifest["variants"] = {name: v.to_manifest() for name, v in variants.items()}
    for name in list(manifest["files"]) + [data_file(out / g).name for g in graphs]:
        manifest["files"][name] = {"sha256": sha256_of(out / name), "bytes": (out / name).stat().st_size}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return {"path": str(out)}


def _variant_records(manifest: Dict[str, Any]) -> Dict[str, Any]:
    """A parsed manifest.json's variants as the exporter's records (manifest_records.VariantRecord)."""
    from seq2onnx.runtime.package.manifest_records import MANIFEST, VariantRecord

    data_files: Dict[str, str] = {}
    return {name: VariantRecord.from_manifest(v, Path(MANIFEST), name, manifest["files"], data_files)
            for name, v in manifest["variants"].items()}


def share_weights(job: Dict[str, Any]) -> Dict[str, Any]:
    import shutil

    from seq2onnx.export.graph_files import share_weights as share
    from seq2onnx.runtime.package.manifest import MANIFEST, sha256_of

    out = Path(job["out"])
    shutil.copytree(job["model"], out)
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    manifest["variants"] = {name: v.to_manifest() for name, v in share(out, _variant_records(manifest)).items()}
    written = {d for v in manifest["variants"].values() for d in v.get("external_data", {}).values()}
    for name in sorted(set(manifest["files"]) | written):
        manifest["files"][name] = {"sha256": sha256_of(out / name), "bytes": (out / name).stat().st_size}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return {"path": str(out)}


def schema(job: Dict[str, Any]) -> Dict[str, Any]:
    import dataclasses

    import numpy as np

    from seq2onnx.runtime import errors, options
    from seq2onnx.runtime.package import config, external_data, manifest, manifest_records
    from seq2onnx.runtime.package.schema import manifest_schema

    dataclass_fields = {f.name: f for f in dataclasses.fields(config.ModelConfig)}
    return {
        "format": manifest.FORMAT, "manifest": manifest.MANIFEST, "reexport": errors.REEXPORT,
        "read_format_versions": list(manifest.READ_FORMAT_VERSIONS),
        "decoder_format": {v: manifest.decoder_format(v) for v in manifest.READ_FORMAT_VERSIONS},
        "limits": {name: getattr(manifest, name) for name in (
            "MAX_MANIFEST_BYTES", "MAX_JSON_DEPTH", "MAX_STRING_CHARS", "MAX_FILES", "MAX_VARIANTS", "MAX_FILE_BYTES",
            "MAX_TOKENIZER_BYTES", "MAX_FEW_ROWS", "MAX_DATA_BYTES")},
        "external_data": {"field": external_data.FIELD, "keys": list(external_data.KEYS),
                          "dtypes": {k: [np.dtype(v).name, np.dtype(v).itemsize] for k, v in external_data.DTYPES.items()},
                          "number": external_data._NUMBER.pattern},
        "patterns": {"SHA256": manifest.SHA256.pattern, "FILE_NAME": manifest.FILE_NAME.pattern,
                     "VERSION": manifest.VERSION.pattern, "LANGUAGE_CODE": manifest_records.LANGUAGE_CODE.pattern},
        "unchecked": manifest.UNCHECKED, "statuses": list(manifest.STATUSES),
        "special_roles": list(manifest.SPECIAL_ROLES),
        "config_fields": {name: f.type for name, f in dataclass_fields.items()},
        "format_3_defaults": {name: dataclass_fields[name].default for name in manifest.FORMAT_3_CONFIG},
        "choices": {k: list(v) for k, v in config.CHOICES.items()},
        "ranges": {k: list(v) for k, v in config.RANGES.items()},
        "max_languages": manifest_records.MAX_LANGUAGES, "target_token": list(manifest_records.TARGET_TOKEN),
        "language_fields": [f.name for f in dataclasses.fields(manifest_records.Languages)],
        "generation_fields": list(manifest_records.GENERATION_FIELDS),
        "float_options": [f.name for f in dataclasses.fields(options.DecodingOptions) if f.type == "float"],
        "decoding_defaults": {f.name: list(f.default) if isinstance(f.default, tuple) else f.default
                              for f in dataclasses.fields(options.DecodingOptions)},
        "manifest_schema": manifest_schema(),
    }


def bench(job: Dict[str, Any]) -> Dict[str, Any]:
    tr = _translator(job["model"], job["compute_type"])
    options = job.get("options", {})
    out = tr.translate_batch(job["texts"], **options)                      # warm-up calls
    for _ in range(job.get("warmups", 1) - 1):
        tr.translate_batch(job["texts"], **options)
    tokens = sum(len(ids) + 1 for r in out for ids in r.token_ids[:1])      # best hypothesis, EOS counted
    seconds = []
    for _ in range(job["repeats"]):
        start = time.perf_counter()
        tr.translate_batch(job["texts"], **options)
        seconds.append(time.perf_counter() - start)
    return {"seconds": seconds, "tokens": tokens}


OPS = {"corpus": corpus, "numbers": numbers, "train_tokenizer": train_tokenizer, "tokenize": tokenize, "translate": translate,
       "generate_tokens": generate_tokens, "compare": compare, "check_options": check_options, "export_random": export_random, "load": load, "bench": bench,
       "tokenizer_rules": tokenizer_rules, "schema": schema, "convert_hf": convert_hf, "external_data": external_data,
       "share_weights": share_weights, "bounds": bounds}


def main() -> None:
    _import_checkout()
    request = json.load(sys.stdin)
    results = [OPS[job["op"]](job) for job in request["jobs"]]
    sys.stdout.write(json.dumps({"results": results, "python": sys.version.split()[0], "pid": os.getpid()}))


if __name__ == "__main__":
    main()
