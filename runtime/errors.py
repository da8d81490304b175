"""Errors meant for the user: the CLI prints them as one line, without a traceback."""
import os
import signal
from typing import List

REEXPORT = "re-export the model with `seq2onnx export`"     # the fix that package errors name


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (at most 200 characters): what one-line errors quote."""
    return (str(e).splitlines() or [""])[0][:200]


def checkpoints_in(folder: "os.PathLike[str] | str", shown: int = 4, scanned: int = 10_000) -> List[str]:
    """The names of the `.pt` checkpoints in `folder` (a run folder of `seq2onnx train`), best.pt first, at most
    `shown` of them and "N more": what an error names when a run folder is passed where a checkpoint or a model
    package belongs. Reads no more than `scanned` entries of the folder, nothing outside it."""
    names = []
    try:
        with os.scandir(folder) as entries:
            for n, entry in enumerate(entries):
                if n >= scanned:
                    break
                if entry.name.endswith(".pt") and entry.is_file():
                    names.append(entry.name)
    except OSError:
        return []
    names.sort(key=lambda name: (name != "best.pt", name != "last.pt", name))
    return names[:shown] + ([f"{len(names) - shown} more"] if len(names) > shown else [])


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
