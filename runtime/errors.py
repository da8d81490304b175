"""Errors meant for the user: the CLI prints them as one line, without a traceback."""
import signal

REEXPORT = "re-export the model with `seq2onnx export`"     # the fix that package errors name


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters): what one-line errors quote."""
    return (str(e).splitlines() or [""])[0][:200]


class Seq2OnnxError(Exception):
    """Bad input, a bad model folder, a bad option: the message names the problem and the fix."""


class ModelPackageError(Seq2OnnxError):
    """A model folder that cannot be loaded (missing file, bad checksum, unknown format...)."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is (cli.terminate_raises), as SIGINT raises
    KeyboardInterrupt: not an error, so `except Exception` lets it through to the clean-up."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
