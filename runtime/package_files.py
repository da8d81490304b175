"""The files of a model package folder, read as untrusted input (docs/SECURITY.md): only regular files (no
symbolic link, FIFO or device), opened without following a link put there after the check, and never more
than the caller's limit. manifest.py checks what they hold."""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from .errors import REEXPORT, ModelPackageError

OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 of a file, for the exporter's manifest and tests (the runtime hashes the bytes it read: read_file)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def check_regular(path: Path, missing: str) -> os.stat_result:
    """lstat of a file of the package, which must be a regular file: a symbolic link could point anywhere
    on the disk, a FIFO or device could block or never end. `missing`: the message when it is absent."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ModelPackageError(missing) from None
    except (OSError, ValueError) as e:
        raise ModelPackageError(f"{path} cannot be read ({e}); copy the package again or {REEXPORT}") from e
    if stat.S_ISLNK(st.st_mode):
        raise ModelPackageError(f"{path} is a symbolic link: the runtime reads nothing outside the package folder; "
                                f"copy the files themselves into it (cp -L), or {REEXPORT}")
    if not stat.S_ISREG(st.st_mode):
        raise ModelPackageError(f"{path} is not a regular file; copy the package again or {REEXPORT}")
    return st


def read_regular(path: Path, limit: int, missing: str) -> bytes:
    """At most limit + 1 bytes of `path`, a regular file (check_regular; `missing`: the message when it is
    absent). O_NOFOLLOW refuses a link put there after the check, O_NONBLOCK keeps a FIFO from blocking the
    open; fstat checks what was opened."""
    check_regular(path, missing)
    try:
        fd = os.open(path, OPEN_FLAGS)
    except OSError as e:
        raise ModelPackageError(f"{path} cannot be read ({e.strerror}); copy the package again or {REEXPORT}") from e
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ModelPackageError(f"{path} is not a regular file; copy the package again or {REEXPORT}")
        return f.read(limit + 1)
