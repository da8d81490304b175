"""Errors meant for the user: the CLI prints them as one line, without a traceback."""
import os
import re
import signal
from typing import List

REEXPORT = "re-export the model with `seq2onnx export`"     # the fix that package errors name
# C0, DEL and C1: the characters a terminal acts on (escape sequences, bell, carriage return, line breaks)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character written as \\xNN: an error stays one line, and what comes from
    a model folder or an input (a path, a manifest field, a token) cannot drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


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


# onnxruntime's error messages, as raised by its Python binding: "[ONNXRuntimeError] : 1 : FAIL : Non-zero status code
# returned while running Reshape node. Name:'r' Status Message: /onnxruntime_src/.../reshape_helper.h:84
# onnxruntime::ReshapeHelper::ReshapeHelper(const ...&, bool) size != 0 && ... was false. The input tensor ..."
_ORT_CODE = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_ORT_NODE = re.compile(r"running (\S+) node\. Name:'(.*?)' Status Message: ")
_ORT_SOURCE = re.compile(r"^/\S+:\d+ [^)]*\)\s*")          # a C++ source location and the function's signature
_OUT_OF_MEMORY = re.compile(r"bad.alloc|failed to allocate|out of memory", re.IGNORECASE)
_DEVICE_FAILURE = re.compile(r"CUDA failure|CUDNN failure|CUBLAS failure|cudaError", re.IGNORECASE)


def onnxruntime_problem(e: BaseException, limit: int = 300) -> str:
    """onnxruntime's error message as one short line for a one-line error: its error code, C++ source locations
    and function signatures dropped, the failing node (a name from the graph, quoted as repr) in front."""
    text = " ".join(str(e)[:4000].split()).removeprefix("Error in execution: ")
    node = _ORT_NODE.search(text)
    where = ""
    if node:
        op, name = node.group(1)[:40], node.group(2) if len(node.group(2)) <= 60 else node.group(2)[:57] + "..."
        where = f"its {op} node {name!r}: " if name else f"its {op} node: "
        text = text[node.end():]
    text = _ORT_SOURCE.sub("", _ORT_CODE.split(text)[-1])
    text = where + text
    return text if len(text) <= limit else text[:limit - 3] + "..."


def graph_run_error(path: object, e: BaseException) -> "Seq2OnnxError":
    """The one-line error for onnxruntime failing to run the graph `path` (e: what it raised). Out of memory and a
    failing GPU are not the package's fault (Seq2OnnxError, with the fix); anything else is: a graph that passed
    the load checks and fails on the runtime's inputs does not follow the contract (ModelPackageError)."""
    problem = onnxruntime_problem(e)
    if _OUT_OF_MEMORY.search(problem):
        return Seq2OnnxError(f"{path}: onnxruntime ran out of memory running it ({problem}); translate fewer or "
                             f"shorter texts at a time (a lower max_batch_size or beam_size)")
    if _DEVICE_FAILURE.search(problem):
        return Seq2OnnxError(f"{path}: the GPU failed running it ({problem}); use device 'cpu'")
    return ModelPackageError(f"{path}: onnxruntime failed running this graph ({problem}): the graph does not do "
                             f"what the package's contract says; {REEXPORT}")


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is (cli.terminate_raises), as SIGINT raises
    KeyboardInterrupt: not an error, so `except Exception` lets it through to the clean-up."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
