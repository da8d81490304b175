"""Where the runtime runs: the device choice ("auto" | "cpu" | "cuda") and the CUDA provider's options.

"cuda" is an error when CUDA cannot be used, never a silent fallback; "auto" = CUDA when onnxruntime has the CUDA
provider AND a session really starts and runs on it, else CPU (probed once per process). onnxruntime-gpu finds the
CUDA and cuDNN libraries on the system library path; with the pip-installed nvidia-* libraries, call
`onnxruntime.preload_dlls()` before creating a Translator.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Dict, Optional, Tuple

import numpy as np
import onnxruntime as ort

from ..errors import Seq2OnnxError
from .gather_graph import gather_model_bytes

DEVICES = ("auto", "cpu", "cuda")


def cuda_provider_options(device_id: int) -> Dict[str, str]:
    """The CUDA provider's options. float32 means IEEE float32 on the GPU too: onnxruntime's default
    TF32 matmuls (Ampere and later) moved scores by ~2e-4 and flipped near-tied beam choices against
    the CPU on an H100, so TF32 is off; float16 is the fast GPU compute type. device_id is passed
    only when it is not 0: onnxruntime >= 1.26 logs a warning per session for an explicit device_id."""
    options = {"use_tf32": "0"}
    if device_id:
        options["device_id"] = str(device_id)
    return options


# --- device choice ---------------------------------------------------------------------------
_cuda_probe: Optional[Tuple[bool, str]] = None
_cuda_probe_lock = threading.Lock()


def cuda_status(device_id: int = 0) -> Tuple[bool, str]:
    """(usable, reason): can a session really start and run on the CUDA provider? Probed once."""
    global _cuda_probe
    with _cuda_probe_lock:
        if _cuda_probe is None:
            _cuda_probe = _probe_cuda(device_id)
        return _cuda_probe


@contextmanager
def onnxruntime_log_severity(level: int):
    """onnxruntime's process-wide default logger at `level` (3 errors, 4 fatal) for a block, then at its default
    again (2, warnings): for the lines we report ourselves or know to be false alarms."""
    ort.set_default_logger_severity(level)
    try:
        yield
    finally:
        ort.set_default_logger_severity(2)


def _probe_cuda(device_id: int) -> Tuple[bool, str]:
    available = ort.get_available_providers()
    if "CUDAExecutionProvider" not in available:
        # both packages install the module onnxruntime: onnxruntime-gpu beside onnxruntime leaves a mix of the two
        return False, f"this onnxruntime has no CUDAExecutionProvider (it has {', '.join(available)}); " \
                      f"onnxruntime-gpu has it, in place of onnxruntime: " \
                      f"pip uninstall -y onnxruntime && pip install onnxruntime-gpu"
    with onnxruntime_log_severity(4):      # a failed CUDA start logs errors; we report it ourselves
        return _try_cuda(device_id)


def _try_cuda(device_id: int) -> Tuple[bool, str]:
    try:
        sess = ort.InferenceSession(gather_model_bytes([(np.float32, 1)]), sess_options=ort.SessionOptions(),
                                    providers=[("CUDAExecutionProvider", cuda_provider_options(device_id))])
        if "CUDAExecutionProvider" not in sess.get_providers():
            return False, "the CUDA provider did not start (no GPU, or the CUDA/cuDNN libraries " \
                          "onnxruntime-gpu needs are missing)"
        io = sess.io_binding()
        io.bind_cpu_input("indices", np.array([0], dtype=np.int64))
        io.bind_cpu_input("x0", np.array([1.0], dtype=np.float32))
        io.bind_output("y0", "cuda", device_id)
        sess.run_with_iobinding(io)
        io.copy_outputs_to_cpu()
        return True, f"CUDA device {device_id}"
    except Exception as e:  # noqa: BLE001 - any failure means "not usable", with its reason
        return False, f"the CUDA provider failed: {type(e).__name__}: {e}".splitlines()[0]


def resolve_device(device: str, device_id: int = 0) -> str:
    """"auto" | "cpu" | "cuda" -> "cpu" | "cuda"; "cuda" raises when CUDA cannot be used."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return "cpu"
    usable, reason = cuda_status(device_id)
    if device == "cuda" and not usable:
        raise Seq2OnnxError(f"device 'cuda' cannot be used: {reason}; use device 'cpu' or 'auto'")
    return "cuda" if usable else "cpu"
