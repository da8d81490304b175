"""The files of a model package folder, read as untrusted input (docs/SECURITY.md): only regular files (no
symbolic link, FIFO or device), opened without following a link put there after the check, and never more
than the caller's limit. manifest.py checks what they hold. `seq2onnx convert` reads a transformers model
folder by the same rule (export/hf_tokenizers.py HF_FOLDER: its own messages, FolderRule)."""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict

from ..errors import REEXPORT, ModelPackageError

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, for the exporter's manifest and tests (the runtime hashes the bytes it read: read_file)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class FolderRule:
    """Whose folder check_regular / read_regular read, for their messages: who reads it, what the folder is, how
    to get a good copy (`again`, or "" where there is none) and how to make one anew (`remake`); the error class."""
    reader: str
    folder: str
    again: str
    remake: str
    error: type = ModelPackageError

    @property
    def fix(self) -> str:
        return f"{self.again} or {self.remake}" if self.again else self.remake


PACKAGE = FolderRule("the runtime", "the package folder", "copy the package again", REEXPORT)


def check_regular(path: Path, missing: str, rule: FolderRule = PACKAGE) -> os.stat_result:
    """lstat of a file of the folder, which must be a regular file: a symbolic link could point anywhere
    on the disk, a FIFO or device could block or never end. `missing`: the message when it is absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise rule.error(missing) from None
    except (OSError, ValueError) as e:
        raise rule.error(f"{path} cannot be read ({e}); {rule.fix}") from e
    if stat.S_ISLNK(st.st_mode):
        raise rule.error(f"{path} is a symbolic link: {rule.reader} reads nothing outside {rule.folder}; "
                         f"copy the files themselves into it (cp -L), or {rule.remake}")
    if not stat.S_ISREG(st.st_mode):
        raise rule.error(f"{path} is not a regular file; {rule.fix}")
    return st


def read_regular(path: Path, limit: int, missing: str, rule: FolderRule = PACKAGE) -> bytes:
    """At most limit + 1 bytes of `path`, a regular file (check_regular; `missing`: the message when it is
    absent). O_NOFOLLOW refuses a link put there after the check, O_NONBLOCK keeps a FIFO from blocking the
    open; fstat checks what was opened."""
    check_regular(path, missing, rule)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as e:
        raise rule.error(f"{path} cannot be read ({e.strerror}); {rule.fix}") from e
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise rule.error(f"{path} is not a regular file; {rule.fix}")
        return f.read(limit + 1)


# what a killed `seq2onnx export` leaves beside OUT_DIR (export/package.py): .OUT_DIR.partial-PID-XXXX (the
# unfinished staging folder) and .OUT_DIR.old-PID-XXXX (the previous package, renamed aside for --overwrite)
_EXPORT_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<kind>partial|old)-\d+-")


def interrupted_export(root: Path) -> str:
    """A sentence about what a killed export left at or beside `root`, or "" when nothing."""
    m = _EXPORT_LEFTOVER.match(root.name)
    if m and m.group("kind") == "partial":
        return (f"{root} is the unfinished staging folder of an interrupted `seq2onnx export` to "
                f"{root.parent / m.group('name')}: run that export again (it removes this folder)")
    if root.exists() or not root.parent.is_dir():
        return ""
    left: Dict[str, Path] = {}
    for p in sorted(root.parent.iterdir()):
        m = _EXPORT_LEFTOVER.match(p.name)
        if m and m.group("name") == root.name and p.is_dir():
            left.setdefault(m.group("kind"), p)
    if "old" in left:
        return (f"{root} does not exist: an export to it was interrupted and the previous package is left aside "
                f"at {left['old']}: run the export again with --overwrite (it puts the previous package back "
                f"first), or rename {left['old'].name} back to {root.name}")
    if "partial" in left:
        return (f"{root} does not exist: an export to it was interrupted (its unfinished staging folder "
                f"{left['partial'].name} is left): run the export again")
    return ""
