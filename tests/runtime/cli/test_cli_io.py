"""runtime/cli/cli_io.py: the command line's input and output against hostile inputs and paths: --output onto
anything (a file's mode, a symlink, a FIFO, a device, /dev/stdout, a folder, signals mid-write), lines of any length
(read up to a bound, so memory is bounded by --max-input-length; a score line's source and target each within its
own), and the small ones: a BOM, /dev/stdin and <(cmd), a closed stdout, Ctrl-C while loading, control characters
from a model folder. Real pipeline, real signals."""
from __future__ import annotations

import hashlib
import io
import json
import os
import pty
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures_training import toy_pairs
from seq2onnx.runtime.cli import main as cli
from seq2onnx.runtime.cli.main import main
from seq2onnx.runtime.cli.cli_io import read_lines
from seq2onnx.runtime.translator import Translator

CLI = [sys.executable, "-m", "seq2onnx.runtime.cli"]


def ctrl_c_as_at_a_terminal() -> None:
    """A job started in the background of a script (`cmd &`) inherits SIGINT ignored, and Python then leaves it
    ignored; the tests that send Ctrl-C run the CLI as a terminal would, with SIGINT's default action."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
SOURCES = [s for s, _ in toy_pairs(5, seed=14)]


@pytest.fixture(scope="module")
def tr(tiny_package):
    return Translator(tiny_package, device="cpu", intra_threads=1)


@pytest.fixture(scope="module")
def expected(tr):
    """What the CLI writes for SOURCES (its defaults: beam 4)."""
    return "".join(tr.translate(s) + "\n" for s in SOURCES)


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    return path


def run_cli(args, capsys):
    rc = main(args)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def translate(package, *args):
    return ["translate", str(package), "--device", "cpu", "--intra-threads", "1", *args]


def leftovers(folder):
    return [p.name for p in Path(folder).iterdir() if p.name.startswith(".tmp")]


# --- --output: what the path is decides how it is written -------------------------------------------
def test_output_file_is_replaced_keeping_its_mode(tiny_package, src, tmp_path, capsys, expected):
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    out.chmod(0o664)
    rc, _, _ = run_cli(translate(tiny_package, "-i", str(src), "-o", str(out)), capsys)
    assert rc == 0 and out.read_text(encoding="utf-8") == expected
    assert stat.S_IMODE(out.stat().st_mode) == 0o664
    assert leftovers(tmp_path) == []


def test_new_output_file_honours_the_umask(tiny_package, src, tmp_path, capsys, expected):
    out = tmp_path / "new.txt"
    old = os.umask(0o027)
    try:
        rc, _, _ = run_cli(translate(tiny_package, "-i", str(src), "-o", str(out)), capsys)
    finally:
        os.umask(old)
    assert rc == 0 and out.read_text(encoding="utf-8") == expected
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


def test_output_symlink_is_written_through_to_its_target(tiny_package, src, tmp_path, capsys, expected):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.txt"
    target.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(Path("real") / "out.txt")
    rc, _, _ = run_cli(translate(tiny_package, "-i", str(src), "-o", str(link)), capsys)
    assert rc == 0
    assert link.is_symlink() and os.readlink(link) == os.path.join("real", "out.txt")
    assert target.read_text(encoding="utf-8") == expected
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "real") == []


def test_output_fifo_is_written_to_directly(tiny_package, src, tmp_path, capsys, expected):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    rc, _, _ = run_cli(translate(tiny_package, "-i", str(src), "-o", str(fifo)), capsys)
    assert rc == 0 and stat.S_ISFIFO(fifo.lstat().st_mode)          # not replaced by a regular file
    reader.join(60)
    assert received == [expected.encode("utf-8")]
    assert leftovers(tmp_path) == []


def test_output_character_device_is_written_to_directly(tiny_package, src, tmp_path, capsys):
    if os.geteuid() == 0:                  # a null device of our own: /dev/null itself must not be at stake
        device = tmp_path / "null"
        os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    else:
        device = Path(os.devnull)
    rc, _, err = run_cli(translate(tiny_package, "-i", str(src), "-o", str(device)), capsys)
    assert rc == 0, err
    assert stat.S_ISCHR(device.lstat().st_mode)
    assert leftovers(device.parent) == []


def test_output_dev_stdout_is_this_process_stdout(tiny_package, src, tmp_path, expected):
    """-o /dev/stdout writes where stdout goes: a file opened with >> keeps what it held, a socket works."""
    appended = tmp_path / "appended.txt"
    appended.write_text("kept\n")
    with open(appended, "ab") as stdout:
        proc = subprocess.run(CLI + translate(tiny_package, "-i", str(src), "-o", "/dev/stdout"),
                              stdout=stdout, stderr=subprocess.PIPE, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    assert appended.read_text(encoding="utf-8") == "kept\n" + expected
    ours, theirs = socket.socketpair()
    with ours, theirs:
        proc = subprocess.run(CLI + translate(tiny_package, "-i", str(src), "-o", "/dev/stdout"),
                              stdout=theirs, stderr=subprocess.PIPE, timeout=120)
        theirs.shutdown(socket.SHUT_WR)
        assert proc.returncode == 0, proc.stderr.decode()
        assert ours.makefile("rb").read() == expected.encode("utf-8")


def unwritable_outputs(tmp_path):
    """(path, what the error says) for --output paths that cannot be written."""
    cases = [(tmp_path, "is a folder"), (tmp_path / "nope" / "out.txt", "does not exist")]
    if os.path.exists("/proc/version"):    # a file in a folder where no file can be created
        cases.append((Path("/proc/version"), ""))
    if os.geteuid() != 0:                  # root may write a read-only file
        read_only = tmp_path / "read-only.txt"
        read_only.write_text("keep\n")
        read_only.chmod(0o444)
        cases.append((read_only, "not writable"))
    return cases


def test_unwritable_output_is_refused_before_any_work(tmp_path, capsys):
    """Refused before the model folder is even looked at (it does not exist here)."""
    for path, message in unwritable_outputs(tmp_path):
        rc, _, err = run_cli(["translate", str(tmp_path / "no-model"), "-o", str(path)], capsys)
        assert rc == 2 and len(err.strip().splitlines()) == 1, err
        assert f"--output {path}" in err and message in err, err
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signal_mid_translation_leaves_no_temporary_file(tiny_package, tmp_path, signum):
    """Sent once the first translation is in the temporary file: it goes, the old file stays, exit 128+N."""
    out = tmp_path / "out.txt"
    out.write_text("old\n")
    proc = subprocess.Popen(CLI + translate(tiny_package, "-o", str(out), "--max-batch-size", "1"),
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_as_at_a_terminal)
    proc.stdin.write(f"{SOURCES[0]}\n".encode())
    proc.stdin.flush()
    deadline = time.monotonic() + 120
    while not any((tmp_path / name).stat().st_size for name in leftovers(tmp_path)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode()
        time.sleep(0.05)
    proc.send_signal(signum)
    err = proc.communicate(timeout=60)[1].decode()
    assert proc.returncode == 128 + signum, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert leftovers(tmp_path) == [] and out.read_text() == "old\n"


# --- a line of any length: read up to its bound ------------------------------------------------------
def test_a_huge_line_is_read_up_to_its_bound(tiny_package, tr):
    """A 20 MB line on stdin: read up to 256 x max_input_length bytes, the same translation as the
    line tokenized whole and cut, two warnings naming it, and the next line translated as usual."""
    line = "seven one " * 2_000_000
    data = (line + "\n" + SOURCES[0] + "\n").encode()
    proc = subprocess.Popen(CLI + translate(tiny_package, "--max-input-length", "20"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate(data, timeout=120)
    assert proc.returncode == 0, err.decode()
    eos = tr.config.eos_id
    ids = tr.tokenizer.encode(line[:1000]).ids[:19] + [eos]
    assert out.decode().splitlines() == [tr.detokenize(tr.translate_ids([ids])[0][0].tokens), tr.translate(SOURCES[0])]
    assert err.decode().splitlines() == [
        "seq2onnx translate: warning: line 1: longer than 5120 bytes; only those were read (more cannot fit "
        "--max-input-length)",
        "seq2onnx translate: warning: line 1: longer than 20 tokens, truncated (--max-input-length)"]


def test_a_huge_line_costs_no_more_memory_than_a_long_one(tiny_package, tmp_path):
    """The CLI's peak RSS for one 20 MB line (read whole, gigabytes) stays bounded, taken by a small process that
    starts it: a child's ru_maxrss counts its parent's peak too (pytest's, here), exec keeps it."""
    script = tmp_path / "measure.py"
    script.write_text(textwrap.dedent("""
        import os, subprocess, sys
        proc = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        proc.stdin.write(b"seven one " * 2_000_000 + b"\\n")
        proc.stdin.close()
        _, status, usage = os.wait4(proc.pid, 0)
        print(os.waitstatus_to_exitcode(status), usage.ru_maxrss // 1024)
    """))
    proc = subprocess.run([sys.executable, str(script), *CLI, *translate(tiny_package)], capture_output=True,
                          text=True, timeout=300)
    rc, mb = map(int, proc.stdout.split())
    assert rc == 0 and mb < 300, f"peak RSS {mb} MB"


def test_read_lines_cuts_a_long_line_at_a_character_boundary(capsys):
    data = "é" * 10 + "\n" + "ab\r\n" + "€€€€x\n" + "7 bytes\n" + "tail" * 30   # the last line: no line break
    lines = list(read_lines(io.BytesIO(data.encode()), max_bytes=7))
    assert lines == [(1, "ééé"), (2, "ab"), (3, "€€"), (4, "7 bytes"), (5, "tailtai")]
    err = capsys.readouterr().err
    assert [line.split(": ", 2)[2] for line in err.splitlines()] == [
        f"line {n}: longer than 7 bytes; only those were read (more cannot fit --max-input-length)"
        for n in (1, 3, 5)]


def test_score_reads_source_and_target_each_within_its_bound(capsys):
    """Each part is cut on its own at a character boundary (no U+FFFD from a split character), the TAB
    and the other part kept; a line without TAB is one part; a BOM and CR LF are dropped as before."""
    data = ("\ufeff" + "é" * 6 + "\tab\r\n" + "x\t" + "€" * 5 + "\n" + "no tab here\n" + "a\tb\tc").encode()
    lines = list(read_lines(io.BytesIO(data), max_bytes=7, target_bytes=8))
    assert lines == [(1, "ééé\tab"), (2, "x\t€€"), (3, "no tab "), (4, "a\tb\tc")]
    err = [line.split(": ", 2)[2] for line in capsys.readouterr().err.splitlines()]
    assert err == ["line 1: the source is longer than 7 bytes; only those were read (more cannot fit --max-input-length)",
                   "line 2: the target is longer than 8 bytes; only those were read (more cannot fit the model's "
                   "max_positions)",
                   "line 3: the source is longer than 7 bytes; only those were read (more cannot fit --max-input-length)"]


# --- the small ones -------------------------------------------------------------------------------
def test_bom_on_the_first_line_is_dropped(tiny_package, tmp_path, capsys, tr):
    src = tmp_path / "bom.txt"
    src.write_bytes(b"\xef\xbb\xbf" + f"{SOURCES[0]}\n{SOURCES[0]}\n".encode())
    rc, out, _ = run_cli(translate(tiny_package, "-i", str(src)), capsys)
    assert rc == 0 and out.splitlines() == [tr.translate(SOURCES[0])] * 2


def test_input_from_dev_stdin_a_fifo_and_process_substitution(tiny_package, tmp_path, expected):
    data = "".join(s + "\n" for s in SOURCES).encode()
    proc = subprocess.run(CLI + translate(tiny_package, "--input", "/dev/stdin"), input=data,
                          capture_output=True, timeout=120)
    assert (proc.returncode, proc.stdout.decode()) == (0, expected), proc.stderr.decode()
    read, write = os.pipe()                                              # what bash's <(cmd) passes
    os.write(write, data)
    os.close(write)
    proc = subprocess.run(CLI + translate(tiny_package, "--input", f"/dev/fd/{read}"), pass_fds=[read],
                          capture_output=True, timeout=120)
    os.close(read)
    assert (proc.returncode, proc.stdout.decode()) == (0, expected), proc.stderr.decode()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,), daemon=True)
    writer.start()
    proc = subprocess.run(CLI + translate(tiny_package, "--input", str(fifo)), capture_output=True, timeout=120)
    assert (proc.returncode, proc.stdout.decode()) == (0, expected), proc.stderr.decode()


@pytest.mark.parametrize("args", [["translate", "{pkg}"], ["info", "{pkg}"]])
def test_closed_stdout_is_one_line(tiny_package, args):
    command = CLI + [a.format(pkg=tiny_package) for a in args]
    proc = subprocess.run(["bash", "-c", 'exec "$@" >&-', "bash", *command], input=b"one two\n",
                          capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and err.count("\n") == 1 and "stdout is closed" in err, err


def interrupted_import(argv):
    """What onnxruntime's module does when Ctrl-C lands while it initialises: ImportError from it."""
    try:
        signal.raise_signal(signal.SIGINT)                  # Python's handler raises KeyboardInterrupt
    except KeyboardInterrupt as e:
        raise ImportError("initialization failed") from e


def test_ctrl_c_while_a_library_loads_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(cli.COMMANDS, "translate", (__name__, "interrupted_import", "", None))
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)     # see ctrl_c_as_at_a_terminal
    try:
        rc, _, err = run_cli(["translate"], capsys)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130 and err == "seq2onnx translate: interrupted\n"


def edited_copy(package, folder, tokenizer=None, manifest=None):
    """A copy of `package` whose tokenizer.json and manifest.json dicts went through the given edits;
    the manifest's checksums match."""
    copy = Path(shutil.copytree(package, folder / "edited"))
    tok = json.loads((copy / "tokenizer.json").read_text(encoding="utf-8"))
    (copy / "tokenizer.json").write_text(json.dumps(tokenizer(tok) if tokenizer else tok), encoding="utf-8")
    data = (copy / "tokenizer.json").read_bytes()
    man = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    man["files"]["tokenizer.json"] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    (copy / "manifest.json").write_text(json.dumps(manifest(man) if manifest else man), encoding="utf-8")
    return copy


def hostile_copy(package, folder):
    """The tiny package with an escape sequence in the manifest's `created` and a tokenizer that decodes
    every "e" as ESC[2J (clear the screen)."""
    def decoder(tok):
        tok["decoder"] = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "e"}, "content": "\x1b[2J"}, tok["decoder"]]}
        return tok
    return edited_copy(package, folder, tokenizer=decoder, manifest=lambda m: {**m, "created": CREATED})


CREATED = "\x1b]0;owned\x07\x9b2J"


def raw_controls(text):
    return [c for c in text if ord(c) < 0x20 and c not in "\n" or 0x7f <= ord(c) <= 0x9f]


def test_control_characters_from_a_package_never_reach_the_terminal(tiny_package, tmp_path, capsys, tr):
    hostile = hostile_copy(tiny_package, tmp_path)
    rc, _, err = run_cli(["translate", str(tmp_path / "\x1b[31mred")], capsys)       # an error naming a path
    assert rc == 2 and raw_controls(err) == [] and "\\x1b[31mred" in err
    rc, out, _ = run_cli(["info", str(hostile)], capsys)
    assert rc == 0 and raw_controls(out) == [] and "created \\x1b]0;owned\\x07\\x9b2J" in out
    rc, out, _ = run_cli(["info", str(hostile), "--json"], capsys)
    assert rc == 0 and raw_controls(out) == [] and json.loads(out)["created"] == CREATED
    text = tr.translate(SOURCES[0])
    assert "e" in text
    piped = subprocess.run(CLI + translate(hostile), input=f"{SOURCES[0]}\n".encode(), capture_output=True,
                           timeout=120)
    assert piped.stdout.decode() == text.replace("e", "\x1b[2J") + "\n"             # to a pipe: exact
    master, slave = pty.openpty()
    proc = subprocess.Popen(CLI + translate(hostile), stdin=subprocess.PIPE, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    proc.communicate(f"{SOURCES[0]}\n".encode(), timeout=120)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:                                                        # EIO: the terminal closed
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    assert proc.returncode == 0
    assert shown.decode().replace("\r\n", "\n") == text.replace("e", "\\x1b[2J") + "\n"   # on a terminal: escaped
