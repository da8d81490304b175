"""The JSON Schema (draft 2020-12) of manifest.json, emitted from the records of manifest_records.py: each field's
type, whether the manifest must have it, its enum, pattern and range. The records are the one source; the files
written from them are checked against them by tests/runtime/package/test_manifest.py:

    docs/manifest.schema.json     the schema, for people and other tools
    web/src/manifest_schema.js    the same schema as a JS module: the web runtime's reader validates each manifest
                                  against it (web/src/schema.js), in Node and in the browser

    python -m seq2onnx.runtime.package.schema [REPO_DIR]      (make schema) writes both

The schema accepts what the reader accepts, never less: a field the reader reads as its default when it is null
allows null, and one whose unknown fields the reader ignores allows them. The reader checks more than the schema says
(a variant's files are listed in 'files', each language has its token, a decoding option's range).
"""
from __future__ import annotations

import dataclasses
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any, Dict, Literal, Tuple, Union

from ..options import DecodingOptions
from .config import CHOICES, RANGES, ModelConfig
from .manifest_records import FORMAT_3_CONFIG, GENERATION_FIELDS, Manifest

SCHEMA_FILE = Path("docs") / "manifest.schema.json"
JS_FILE = Path("web") / "src" / "manifest_schema.js"
DRAFT = "https://json-schema.org/draft/2020-12/schema"
_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def anchored(pattern: str) -> str:
    """A Python pattern the reader fullmatches, as JSON Schema's pattern (which searches)."""
    return f"^(?:{pattern})$"


def _description(cls: type) -> str:
    doc = cls.__doc__ or ""
    return "" if doc.startswith(cls.__name__ + "(") else re.sub(r"\s+", " ", doc).strip()


def _type_schema(hint: Any, defs: Dict[str, Any]) -> Dict[str, Any]:
    """The schema of a value of type `hint` (Optional is the field's business: _field_schema)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return {}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    if origin is Literal:                      # the values a field allows (options.BeamRules, ...)
        simple = sorted({_SIMPLE[type(a)] for a in args})
        return {"type": simple[0] if len(simple) == 1 else simple, "enum": list(args)}
    if origin is Union:
        kinds = [_type_schema(a, defs) for a in args if a is not type(None)]
        out = {"type": [k["type"] for k in kinds]} if all(set(k) == {"type"} for k in kinds) else \
            kinds[0] if len(kinds) == 1 else {"anyOf": kinds}
        return _nullable(out) if type(None) in args else out
    if origin in (tuple, list):
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", **({} if args[1] is Any else {"additionalProperties": _type_schema(args[1], defs)})}
    if isinstance(hint, type):
        if hint.__name__ not in defs:
            defs[hint.__name__] = {}          # taken before its fields: a record may refer to itself
            defs[hint.__name__] = (config_schema() if hint is ModelConfig else hint.json_schema()
                                   if hasattr(hint, "json_schema") else record_schema(hint, defs))
        return {"$ref": f"#/$defs/{hint.__name__}"}
    raise TypeError(f"no JSON Schema for the type {hint!r}")


def _nullable(schema: Dict[str, Any]) -> Dict[str, Any]:
    """schema, or null: the reader reads a null optional field as absent."""
    if "type" in schema and "$ref" not in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        out = dict(schema, type=kinds + ["null"])
        if "enum" in out:
            out["enum"] = list(out["enum"]) + [None]
        return out
    return {"anyOf": [schema, {"type": "null"}]}


def _field_schema(cls: type, f: dataclasses.Field, hint: Any, defs: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """A record field's schema, and whether the manifest must have it."""
    required = (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING) \
        or f.metadata.get("must", False)
    optional = typing.get_origin(hint) is Union and type(None) in typing.get_args(hint)
    if optional:
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = rest[0] if len(rest) == 1 else Union[tuple(rest)]
    schema = _type_schema(hint, defs)
    if cls is Manifest and f.name == "generation":
        schema = generation_schema(defs)
    for key, value in f.metadata.get("schema", {}).items():
        if key == "pattern":
            value = anchored(value)
        elif key in ("items", "propertyNames") and "pattern" in value:
            value = dict(value, pattern=anchored(value["pattern"]))
        schema[key] = dict(schema[key], **value) if isinstance(value, dict) and isinstance(schema.get(key), dict) \
            else value
    return (_nullable(schema) if optional and not required else schema), required


def record_schema(cls: type, defs: Dict[str, Any]) -> Dict[str, Any]:
    """A record's schema: an object of its fields, in their order."""
    hints = typing.get_type_hints(cls)
    properties, required = {}, []
    for f in dataclasses.fields(cls):
        properties[f.name], must = _field_schema(cls, f, hints[f.name], defs)
        if must:
            required.append(f.name)
    out: Dict[str, Any] = {"type": "object"}
    if _description(cls):
        out["description"] = _description(cls)
    out["properties"] = properties
    if required:
        out["required"] = required
    if getattr(cls, "CLOSED", False):
        out["additionalProperties"] = False
    return out


def config_schema() -> Dict[str, Any]:
    """ModelConfig's fields: of their kinds, CHOICES and RANGES; each one required but those format 3 added (the
    reader requires them too from format_version 3); no other field."""
    hints = typing.get_type_hints(ModelConfig)
    properties = {}
    for f in dataclasses.fields(ModelConfig):
        schema: Dict[str, Any] = ({"enum": list(CHOICES[f.name])} if f.name in CHOICES
                                  else _type_schema(hints[f.name], {}))
        if f.name in RANGES:
            schema["minimum"], schema["maximum"] = RANGES[f.name]
        properties[f.name] = schema
    return {"type": "object", "description": _description(ModelConfig), "properties": properties,
            "required": [f.name for f in dataclasses.fields(ModelConfig) if f.name not in FORMAT_3_CONFIG],
            "additionalProperties": False}


def generation_schema(defs: Dict[str, Any]) -> Dict[str, Any]:
    """generation: the DecodingOptions fields of GENERATION_FIELDS, of their kinds (DecodingOptions checks their
    ranges when the package is read); no other field."""
    hints = typing.get_type_hints(DecodingOptions)
    return {"type": "object", "properties": {name: _type_schema(hints[name], defs) for name in GENERATION_FIELDS},
            "additionalProperties": False}


def manifest_schema() -> Dict[str, Any]:
    """The schema of manifest.json."""
    defs: Dict[str, Any] = {}
    root = record_schema(Manifest, defs)
    return {"$schema": DRAFT, "title": "seq2onnx model package: manifest.json", **root,
            "$defs": dict(sorted(defs.items()))}


def schema_text() -> str:
    return json.dumps(manifest_schema(), indent=2) + "\n"


def js_text() -> str:
    return ("// Generated by `make schema` (python -m seq2onnx.runtime.package.schema) from\n"
            "// runtime/package/manifest_records.py: the JSON Schema of manifest.json, as docs/manifest.schema.json.\n"
            "// Do not edit.\n"
            f"export const MANIFEST_SCHEMA = {json.dumps(manifest_schema(), indent=2)};\n")


def write(repo: Path) -> None:
    """docs/manifest.schema.json and web/src/manifest_schema.js of the checkout at `repo`."""
    (repo / SCHEMA_FILE).write_text(schema_text(), encoding="utf-8")
    (repo / JS_FILE).write_text(js_text(), encoding="utf-8")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
