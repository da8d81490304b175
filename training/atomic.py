"""Atomic file writing: a temp file in the same folder, fsync, then os.replace.

A kill at any moment leaves either the old file or the new one, never a torn one.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: os.PathLike) -> Iterator[Path]:
    """Yield a temp path beside `path`; when the block succeeds it becomes `path` (else it is removed).
    The file gets the usual permissions (0666 minus umask), not mkstemp's 0600."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_umask())
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@contextmanager
def atomic_open(path: os.PathLike, mode: str = "w") -> Iterator[IO]:
    """open() for writing, atomically: `with atomic_open(p, "wb") as f: f.write(...)`."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    with atomic_path(path) as tmp:
        with open(tmp, mode, **({"encoding": "utf-8"} if mode == "w" else {})) as f:
            yield f


def write_text_atomic(path: os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def copy_atomic(src: os.PathLike, dst: os.PathLike) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
