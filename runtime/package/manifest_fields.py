"""The manifest's fields, each read with a one-line check (runtime/package/manifest.py reads the manifest through these):
a field of the kind it must be, an object of a bounded number of entries, and a value shown short in the message."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional

from ..errors import REEXPORT, ModelPackageError

REQUIRED = object()             # field's default: the field must be there
KIND_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true or false",
              (str, dict): "a file name or an object"}


def short(value: Any) -> str:
    """`value` as a message shows it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def field(obj: Dict[str, Any], key: str, kind: type, where: Path, name: Optional[str] = None,
          default: Any = REQUIRED) -> Any:
    """obj[key], which must be a `kind` (a bool is no integer here). name: the field in messages (default
    key). With a default, a missing or null field gives the default."""
    name = name or key
    value = obj.get(key)
    if value is None and default is not REQUIRED:
        return default
    if key not in obj:
        raise ModelPackageError(f"{where}: the field {name} is missing; {REEXPORT}")
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
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
