"""The command line's lines in and out, for `seq2onnx translate` and `seq2onnx score` (commands.py):
input read line by line with a byte bound, invalid UTF-8 replaced; --input and --output paths, file
descriptors and devices; an --output FILE replaced atomically; warnings and progress on stderr."""
from __future__ import annotations

import codecs
import itertools
import os
import re
import secrets
import stat
import sys
import time
from contextlib import contextmanager, suppress
from typing import BinaryIO, Callable, Iterator, List, Literal, Optional, TextIO, Tuple, Union

from ..errors import Seq2OnnxError, printable

UTF8_MAX_BYTES = 4                      # bytes of one character in UTF-8, at most

PROG = {"name": "seq2onnx translate"}     # the running subcommand (commands.py sets it), for warnings


class Progress:
    """Lines done so far and their rate, one stderr line rewritten in place, when stderr is a terminal and
    the input has taken more than a second; nothing otherwise (a pipe or a file gets no progress). When the
    input is a regular file (--input FILE, < FILE) the line also has a total: the share of its bytes read and
    the time left at the rate so far. Its size is known at once, whatever the file's length; counting its
    lines first would read it twice."""
    shown = False                                       # a progress line is on the terminal now
    after = 1.0                                         # seconds before the first progress line

    def __init__(self, source: Optional[BinaryIO] = None, stream: Optional[TextIO] = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.on = self.stream is not None and self.stream.isatty()
        self.start, self.lines = time.monotonic(), 0
        self.source, self.first, self.total = source, 0, 0      # total: the input's bytes, 0 when unknown
        with suppress(OSError, ValueError, AttributeError):     # a pipe, a socket, a stream with no descriptor
            if source is not None and stat.S_ISREG(os.fstat(source.fileno()).st_mode):
                self.first = source.tell()
                self.total = os.fstat(source.fileno()).st_size - self.first

    def add(self, lines: int) -> None:
        self.lines += lines
        elapsed = max(time.monotonic() - self.start, 1e-9)
        if self.on and elapsed >= self.after:
            self.stream.write(f"\r\x1b[K{PROG['name']}: {self.lines} lines{self._share(elapsed)}, "
                              f"{self.lines / elapsed:.1f} lines/s")
            self.stream.flush()
            Progress.shown = True

    def _share(self, elapsed: float) -> str:
        """", 42% of the input, 0:13 left" (bytes read of the input's total), or "" with no total."""
        try:
            done = (min(max(self.source.tell() - self.first, 0), self.total)
                    if self.total and self.source is not None else 0)
        except (OSError, ValueError):
            done = 0
        if not done:
            return ""
        left = round(elapsed * (self.total - done) / done)
        return f", {100 * done // self.total}% of the input, {left // 60}:{left % 60:02d} left"

    def close(self) -> None:
        if Progress.shown:
            self.stream.write("\n")
            self.stream.flush()
            Progress.shown = False


def warn(message: str) -> None:
    if Progress.shown:                                 # the warning takes the progress line's place
        sys.stderr.write("\r\x1b[K")
        Progress.shown = False
    print(f"{PROG['name']}: warning: {printable(message)}", file=sys.stderr, flush=True)


# what a cut names, per field of a line: a whole line (translate), or SOURCE<TAB>TARGET (score)
_PARTS = {1: [("", "--max-input-length")],
          2: [("the source is ", "--max-input-length"), ("the target is ", "the model's max_positions")]}


def read_lines(stream: BinaryIO, max_bytes: Optional[int] = None, target_bytes: Optional[int] = None,
               warn: Callable[[str], None] = warn) -> Iterator[Tuple[int, str]]:
    """(1-based line number, text) for each line; invalid UTF-8 becomes U+FFFD with a warning (to `warn`); a BOM
    that opens the stream is dropped. A line over max_bytes bytes is read up to that (at a character
    boundary) and the rest skipped, with a warning: one line never holds more memory than that.
    target_bytes: the line is SOURCE<TAB>TARGET (`seq2onnx score`): max_bytes bounds the SOURCE (what comes before
    its first TAB) and target_bytes the rest, each cut so on its own, so a long source loses neither TAB nor target."""
    for number in itertools.count(1):
        if max_bytes is None:
            raw = stream.readline()
            if not raw:
                return
            if number == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8):]
            raw = raw[:-1] if raw.endswith(b"\n") else raw
        else:
            bounds = (max_bytes,) if target_bytes is None else (max_bytes, target_bytes)
            fields = _read_fields(stream, bounds, number == 1)
            if fields is None:
                return
            for (_, size), bound, (what, fits) in zip(fields, bounds, _PARTS[len(bounds)]):
                if size > bound:
                    warn(f"line {number}: {what}longer than {bound} bytes; only those were read (more cannot fit {fits})")
            raw = b"\t".join(kept for kept, _ in fields)
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        yield number, decode_line(raw, number, warn)


def decode_line(raw: bytes, number: int, warn: Callable[[str], None] = warn) -> str:
    """A line's UTF-8, invalid bytes replaced with U+FFFD (a warning naming the line, to `warn`): one bad byte costs
    one character, not the run."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        warn(f"line {number}: invalid UTF-8 replaced with U+FFFD")
        return raw.decode("utf-8", errors="replace")


def _read_fields(stream: BinaryIO, bounds: Tuple[int, ...], first: bool) -> Optional[List[Tuple[bytes, int]]]:
    """One line, without its line break, read in chunks: per TAB-separated field (the last one takes the rest
    of the line, TABs included; a line without TAB has one field), its first bounds[f] bytes cut at a character
    boundary, and its size in bytes (more than bounds[f]: it was cut). None at the end of the stream."""
    chunk_size = max(bounds) + UTF8_MAX_BYTES
    kept: List[bytearray] = [bytearray()]
    sizes = [0]
    chunk = stream.readline(chunk_size)
    if not chunk:
        return None
    if first and chunk.startswith(codecs.BOM_UTF8):
        chunk = chunk[len(codecs.BOM_UTF8):]
    while True:
        ended = chunk.endswith(b"\n")
        data = chunk[:-1] if ended else chunk
        while len(kept) < len(bounds) and b"\t" in data:          # a field ends here: the next one starts
            head, data = data.split(b"\t", 1)
            _keep(kept[-1], sizes, head, bounds[len(kept) - 1])
            kept.append(bytearray())
            sizes.append(0)
        _keep(kept[-1], sizes, data, bounds[len(kept) - 1])
        if ended:
            break
        chunk = stream.readline(chunk_size)
        if not chunk:
            break
    return [(_cut_utf8(bytes(k), bound) if size > bound else bytes(k), size)
            for k, size, bound in zip(kept, sizes, bounds)]


def _keep(kept: bytearray, sizes: List[int], data: bytes, bound: int) -> None:
    """Add `data` to the last field: its size grows by all of it, what is kept by no more than a character past
    its bound (enough to cut it at a character boundary)."""
    sizes[-1] += len(data)
    room = bound + UTF8_MAX_BYTES - len(kept)
    if room > 0:
        kept += data[:room]


def _cut_utf8(raw: bytes, n: int) -> bytes:
    """raw[:n], less the start of a character that the cut would split (raw holds more than n bytes)."""
    for _ in range(UTF8_MAX_BYTES - 1):
        if raw[n] & 0xC0 != 0x80:                       # raw[n] starts a character: the cut is between two
            break
        n -= 1
    return raw[:n]


# /dev/stdin, /dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N: a file descriptor of this process,
# used as it is (as bash does): a socket, or a file opened with >>, is written to, not reopened
_DESCRIPTOR = re.compile(r"/dev/(?:std(?P<std>in|out|err)|fd/(?P<fd>\d+))|/proc/self/fd/(?P<self>\d+)")
_STD_NAMES = ("stdin", "stdout", "stderr")


def open_path(option: str, path: str, mode: Literal["rb", "wb"]) -> BinaryIO:
    """The file `path` given to `option`, opened with `mode` ("rb", "wb"), or a one-line error."""
    m = _DESCRIPTOR.fullmatch(os.path.abspath(path))
    try:
        if m is None:
            return open(path, mode)
        fd = _STD_NAMES.index(f"std{m['std']}") if m["std"] else int(m["fd"] or m["self"])
        if fd < 3 and (sys.stdin, sys.stdout, sys.stderr)[fd] is None:
            raise Seq2OnnxError(f"{option} {path}: {_STD_NAMES[fd]} is closed")
        return os.fdopen(os.dup(fd), mode)
    except FileNotFoundError:
        raise Seq2OnnxError(f"{option} {path}: no such file") from None
    except OSError as e:
        raise Seq2OnnxError(f"{option} {path}: cannot open it ({e.strerror})") from None


def stdin_bytes() -> BinaryIO:
    if sys.stdin is None:
        raise Seq2OnnxError("stdin is closed; redirect it from a file (< FILE), or give --input FILE")
    return sys.stdin.buffer


def stdout_text() -> TextIO:
    if sys.stdout is None:                              # e.g. `seq2onnx ... >&-`
        raise Seq2OnnxError("stdout is closed; redirect it to a file (> FILE), or give --output FILE")
    return sys.stdout


@contextmanager
def open_output(path: Optional[str], option: str = "--output", source: Optional[BinaryIO] = None,
                source_name: str = "") -> Iterator[BinaryIO]:
    """Where the translations go (TRANSLATE_FORMAT, "output"), checked before any work is done: given to `option`
    (named so in errors); never `source`, the input being read (source_name: how the command line names it)."""
    if path is None:
        out = stdout_text().buffer
        _refuse_the_input("stdout", out, source, source_name)
        yield out
        return
    target = os.path.realpath(path)                     # through symlinks: the link stays, its target changes
    try:
        st: Optional[os.stat_result] = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise Seq2OnnxError(f"{option} {path}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise Seq2OnnxError(f"{option} {path} is a folder; give the path of a file to write")
    _refuse_the_input(f"{option} {path}", path, source, source_name)
    if _DESCRIPTOR.fullmatch(os.path.abspath(path)) or (st is not None and not stat.S_ISREG(st.st_mode)):
        with open_path(option, path, "wb") as f:       # a device, FIFO, socket, /dev/stdout: no temporary file
            yield f
        return
    folder = os.path.dirname(target)
    if not os.path.isdir(folder):
        raise Seq2OnnxError(f"{option} {path}: the folder {folder} does not exist; create it first")
    if st is not None and not os.access(target, os.W_OK):
        raise Seq2OnnxError(f"{option} {path}: the file is not writable; make it writable or choose another")
    tmp = os.path.join(folder, f".tmp-{secrets.token_hex(6)}-{os.path.basename(target)}")
    try:                                                # created inside: whatever stops us removes it
        with _create(option, path, tmp, st) as f:
            yield f
        os.replace(tmp, target)
    except BaseException:                               # errors, KeyboardInterrupt, cli.Terminated
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _refuse_the_input(output: str, written: Union[str, BinaryIO], source: Optional[BinaryIO],
                      source_name: str) -> None:
    """An output (`written`: a path, or a stream) that is the regular file being read (`source`; by its path, a
    symlink, a hard link, /dev/stdout, or stdin and stdout redirected to it: the same device and inode, as
    os.path.samefile compares) would replace or grow the input while it is read: refused, as `cat` refuses "input
    file is output". A device or a FIFO may be both."""
    try:
        read = os.fstat(source.fileno())                               # type: ignore[union-attr]
        out = os.stat(written) if isinstance(written, str) else os.fstat(written.fileno())
    except (AttributeError, OSError, ValueError):      # no input file, no output file yet, no descriptor
        return
    if stat.S_ISREG(read.st_mode) and os.path.samestat(read, out):
        raise Seq2OnnxError(f"{output} is the input file ({source_name}): writing to it would destroy what is "
                            "being read; write somewhere else")


def _create(option: str, path: str, tmp: str, replaced: Optional[os.stat_result]) -> BinaryIO:
    """The temporary file for `option` `path` (--output FILE): mode 0666 less the umask, or the mode (and, where
    allowed, the owner) of the file it will replace."""
    try:
        f = open(tmp, "xb")
    except OSError as e:
        raise Seq2OnnxError(f"{option} {path}: cannot create a file in {os.path.dirname(tmp)} ({e.strerror}); "
                            f"choose a folder you can write to") from None
    if replaced is not None:
        with suppress(PermissionError):                 # only root may give a file to another owner
            os.fchown(f.fileno(), replaced.st_uid, replaced.st_gid)
        os.fchmod(f.fileno(), stat.S_IMODE(replaced.st_mode))
    return f
