"""The `seq2onnx` command. Each subcommand lives beside the code it drives and is imported
only when it runs, so `seq2onnx translate` never loads torch and a missing extra is reported
in one line."""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, List, NoReturn, Optional, Protocol, Union

from ..errors import Seq2OnnxError, Terminated, printable


class WritesText(Protocol):
    """What argparse prints help to (typeshed's SupportsWrite[str], which is no module at run time)."""

    def write(self, text: str, /) -> object: ...


# name -> (module, function, one-line help, extra that provides its dependencies)
COMMANDS = {
    "data": ("seq2onnx.training.commands", "data_main", "write a parallel data set (numbers en->de, or the system's gettext catalogs)", "train"),
    "train": ("seq2onnx.training.commands", "train_main", "train a Transformer on parallel data", "train"),
    "average": ("seq2onnx.training.commands", "average_main", "average the last K checkpoints of a run", "train"),
    "export": ("seq2onnx.export.commands", "export_main", "export a checkpoint to an ONNX model package", "train"),
    "convert": ("seq2onnx.export.hf_convert", "convert_main",
                "convert a transformers MarianMT (OPUS-MT) / M2M100 / NLLB folder to a model package", "convert"),
    "translate": ("seq2onnx.runtime.cli.commands", "translate_main", "translate lines with a model package", None),
    "translate-file": ("seq2onnx.runtime.cli.translate_file", "translate_file_main",
                       "translate a file (.txt, .html, .srt, .docx) with a model package, keeping its format", None),
    "score": ("seq2onnx.runtime.cli.commands", "score_main", "score given translations (log-probs) with a model package",
              None),
    "info": ("seq2onnx.runtime.cli.info", "info_main", "describe a model package", None),
    "serve": ("seq2onnx.runtime.serve.cli", "serve_main",
              "serve translations over HTTP (LibreTranslate's API and /v1), batching requests", "serve"),
    "translate-dataset": ("seq2onnx.runtime.ray.cli", "translate_dataset_main",
                          "translate a dataset (text, JSONL, Parquet) on a Ray cluster", "ray"),
    "ray-serve": ("seq2onnx.runtime.ray.serve", "ray_serve_main",
                  "the server of `serve` in replicas on a Ray cluster, behind Ray Serve's HTTP proxy", "ray"),
}

# third-party modules an extra brings; importing one that is missing means the extra is missing
EXTRA_MODULES = {"torch", "onnx", "onnxscript", "sacrebleu", "tqdm", "num2words", "onnx_ir", "transformers",
                 "sentencepiece", "safetensors", "starlette", "uvicorn", "prometheus_client", "sse_starlette",
                 "multipart", "python_multipart", "ray", "pyarrow"}


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within it, SIGTERM and SIGHUP raise Terminated in the main thread (elsewhere: nothing changes),
    so that the clean-up that Ctrl-C runs (KeyboardInterrupt) runs for them too; `main` then exits with
    128 + the signal number."""
    signums = [getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)]
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> NoReturn:
        raise Terminated(signum)

    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one Seq2OnnxError line (printed by `main`, exit 2)
    instead of its usage block; --help still prints the full help."""

    def error(self, message: str) -> NoReturn:
        raise Seq2OnnxError(f"{message} (see {self.prog} --help)")

    def print_help(self, file: Optional[WritesText] = None) -> None:
        """argparse's, less its silence on a write error: `--help | head` ends as any output's closed pipe does
        (main), with the same exit status buffered or not."""
        file = file or sys.stdout
        if file is not None:                            # None: stdout closed (`>&-`), as argparse has it
            file.write(self.format_help())


def usage() -> str:
    lines = ["usage: seq2onnx COMMAND [options]   (seq2onnx COMMAND --help for its options)", "", "commands:"]
    width = max(map(len, COMMANDS))
    lines += [f"  {name:<{width}} {help_}" for name, (_, _, help_, _) in COMMANDS.items()]
    return "\n".join(lines)


# the exit status of a command whose reader went away (`seq2onnx ... | head`): a shell shows 128 + SIGPIPE for
# `cat` killed so; the command says nothing, as `cat` does (TRANSLATE_FORMAT, "exit status")
CLOSED_PIPE_EXIT = 128 + getattr(signal, "SIGPIPE", 13)


def main(argv: Optional[List[str]] = None) -> int:
    """Run one command; its exit status. Output still buffered is flushed here, so a reader that went away
    (`| head`) shows here, in argparse's --help and in the last lines alike, and ends the command quietly."""
    try:
        try:
            return _main(argv)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """Python's recipe for a closed stdout (docs, "Note on SIGPIPE"): what is still buffered goes to
    /dev/null, so that the flush at exit does not fail again and print a traceback-like message."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            for stream in (sys.stdout, sys.stderr):
                if stream is not None:
                    try:
                        stream.flush()
                    except OSError:
                        os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError):                       # no file descriptor (an embedding caller): nothing held
        pass
    return CLOSED_PIPE_EXIT


def _main(argv: Optional[List[str]]) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        from .. import __version__
        print(f"seq2onnx {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"seq2onnx: error: unknown command {name!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module, func, _, extra = COMMANDS[name]
    try:
        return getattr(importlib.import_module(module), func)(rest) or 0
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top in EXTRA_MODULES and extra:
            print(f"seq2onnx {name}: error: this command needs the '{top}' package: "
                  f"pip install '.[{extra}]' in the seq2onnx checkout (or pip install '/path/to/seq2onnx[{extra}]')", file=sys.stderr)
            return 2
        return _internal_error(name, e)
    except Seq2OnnxError as e:
        print(f"seq2onnx {name}: error: {printable(str(e))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Terminated) as e:
        return _stopped(name, e)
    except BrokenPipeError:                         # the reader of our output went away (`| head`): main
        raise
    except Exception as e:  # noqa: BLE001 - the CLI's promise: no tracebacks
        return _internal_error(name, e)


def _stopped(name: str, e: Union[KeyboardInterrupt, Terminated]) -> int:
    if isinstance(e, Terminated):
        print(f"seq2onnx {name}: terminated ({e})", file=sys.stderr)
        return 128 + e.signum
    print(f"seq2onnx {name}: interrupted", file=sys.stderr)
    return 128 + signal.SIGINT


def _signal_behind(e: Optional[BaseException]) -> Optional[Union[KeyboardInterrupt, Terminated]]:
    """The KeyboardInterrupt or Terminated an error came from: a library may turn one into an error of
    its own (onnxruntime's module, interrupted while it loads, raises ImportError from it)."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, (KeyboardInterrupt, Terminated)):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def _internal_error(name: str, e: BaseException) -> int:
    stop = _signal_behind(e)
    if stop is not None:
        return _stopped(name, stop)
    if os.environ.get("SEQ2ONNX_DEBUG"):
        raise e
    print(f"seq2onnx {name}: error: {type(e).__name__}: {printable(str(e))} (set SEQ2ONNX_DEBUG=1 to see the "
          f"traceback)", file=sys.stderr)
    return 1

