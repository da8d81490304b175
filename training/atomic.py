"""Atomic file writing: a temp file in the same folder, fsync, then os.replace.

A kill at any moment leaves either the old file or the new one, never a torn one.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Collection, Iterator, List

# the temp file of atomic_path(DIR/NAME): DIR/.NAME.XXXXXXXX.tmp (mkstemp's 8 random characters)
_TEMP = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp$")


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


def remove_stale_temps(folder: os.PathLike, owns: "Collection[str] | re.Pattern[str]") -> List[str]:
    """Delete the temp files that writes of `owns` (file names, or a pattern of them) left in `folder`
    when the process was killed mid-write. Only for a folder no other process is writing. -> names removed."""
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for p in sorted(folder.iterdir()):
        m = _TEMP.match(p.name)
        if m and p.is_file():
            name = m.group("name")
            if (owns.match(name) is not None) if isinstance(owns, re.Pattern) else name in owns:
                p.unlink()
                removed.append(p.name)
    return removed


def write_text_atomic(path: os.PathLike, text: str) -> None:
    with atomic_open(path, "w") as f:
        f.write(text)


def copy_atomic(src: os.PathLike, dst: os.PathLike) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)
