"""The manifest's fields, each read with a one-line check (the records of manifest_records.py read the manifest through
these): a field of the kind it must be, an object of a bounded number of entries, and a value shown short in the
message; and Record, the base of those records: a frozen dataclass whose fields are the manifest's, in the order
manifest.json writes them, with the JSON Schema keywords its type does not say (schema.py emits the schema from them)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from ..errors import REEXPORT, ModelPackageError

REQUIRED = object()             # field's default: the field must be there
KIND_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false",
              float: "a number", (str, dict): "a file name or an object"}


def short(value: Any) -> str:
    """`value` as a message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field(obj: Dict[str, Any], key: str, kind: Union[type, Tuple[type, ...]], where: Path, name: Optional[str] = None,
          default: Any = REQUIRED) -> Any:
    """obj[key], which must be a `kind` (a bool is no integer here; an integer is a fine float). name: the field in messages (default
    key). With a default, a missing or null field gives the default."""
    name = name or key
    value = obj.get(key)
    if value is None and default is not REQUIRED:
        return default
    if key not in obj:
        raise ModelPackageError(f"{where}: the field {name} is missing; {REEXPORT}")
    if not isinstance(value, (int, float) if kind is float else kind) or isinstance(value, bool) and kind is not bool:
        raise ModelPackageError(f"{where}: the field {name} should be {KIND_NAMES[kind]}, got {short(value)}; "
                                f"{REEXPORT}")
    return value


def count_entries(obj: Dict[str, Any], key: str, limit: int, where: Path) -> Dict[str, Any]:
    """obj[key], an object of at most `limit` entries."""
    entries = field(obj, key, dict, where)
    if len(entries) > limit:
        raise ModelPackageError(f"{where}: '{key}' has {len(entries)} entries, more than a package holds ({limit}): "
                                f"this is not a seq2onnx model package; {REEXPORT}")
    return entries


def entry(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, null: bool = False,
          must: bool = False, **schema: Any) -> Any:
    """A record's field (factory: its default_factory). No default, or must: the manifest must have it (JSON Schema's required; must: a field the
    record gives a default only because a field with a default comes before it). null: None is written as null (else
    a None field is left out of manifest.json). schema: the JSON Schema keywords its type does not say (enum,
    pattern, minimum, maximum, maxItems, maxProperties, propertyNames)."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"null": null, "must": must, "schema": schema})


def as_json(value: Any) -> Any:
    """A record's field value as manifest.json holds it: records by their to_manifest(), tuples as lists."""
    if hasattr(value, "to_manifest"):
        return value.to_manifest()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: as_json(v) for k, v in value.items()}
    return value


class Record:
    """The base of the manifest's records (frozen dataclasses): to_manifest() writes the fields in their order,
    leaving out a None field unless it is entry(null=True); from_manifest(value, where, ...) is each record's own:
    it checks every field and raises one ModelPackageError line naming it. CLOSED: the reader refuses fields it does
    not know (JSON Schema's additionalProperties false); else it ignores them."""
    CLOSED = False

    def to_manifest(self) -> Dict[str, Any]:
        out = {}
        for f in dataclasses.fields(self):     # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is not None or f.metadata.get("null"):
                out[f.name] = as_json(value)
        return out
