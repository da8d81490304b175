"""One small adapter per benchmarked system, all with the same interface.

    engine.run(sources, beam, length) -> (tokens, seconds)

sources: id lists (each ending with EOS, CONTRACTS.md); beam: 1 = greedy; length: the exact number of
tokens to generate (EOS forbidden until then: min length = max length = length everywhere).
tokens: the best hypothesis of each source, ids without BOS/EOS. seconds: wall time of the
decoding call itself (encoder included, model loading excluded). Every system is told to use
`threads` intra-op threads and never generates PAD or BOS (as training/reference.py).
"""
from __future__ import annotations

import abc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

Tokens = List[List[int]]


class Engine(abc.ABC):
    name = "?"           # row label in the tables
    precision = "fp32"

    @abc.abstractmethod
    def run(self, sources: Sequence[Sequence[int]], beam: int, length: int) -> Tuple[Tokens, float]:
        """-> (best hypothesis of each source, seconds of the decoding call)"""

    def close(self) -> None:
        pass


def synchronize(device: str) -> None:
    """Wait for the GPU's queued work, so that a timer read after it counts that work."""
    if device == "cuda":
        import torch
        torch.cuda.synchronize()


class Seq2OnnxRuntime(Engine):
    """Our runtime: seq2onnx.runtime.Translator on the exported package, fed token ids (translate_ids).
    Its decoding call is synchronous on CUDA too: every step's log-probs come back to numpy."""

    COMPUTE_TYPES = {"fp32": "float32", "fp16": "float16", "int8": "int8"}   # package variant -> compute_type

    def __init__(self, package_dir: Path, variant: str, threads: int, device: str = "cpu"):
        from seq2onnx.runtime.translator import Translator

        self.name, self.precision = f"seq2onnx {variant}", variant
        self.translator = Translator(str(package_dir), device=device, compute_type=self.COMPUTE_TYPES[variant],
                                     intra_threads=threads, inter_threads=1)

    def run(self, sources, beam, length):
        start = time.perf_counter()
        # exactly `length` tokens: the relative limit (3 x source + 10 by default) is off, as in the other engines
        results = self.translator.translate_ids([list(s) for s in sources], beam_size=beam,
                                                min_decoding_length=length, max_decoding_length=length,
                                                max_length_a=0.0, max_length_b=None)
        seconds = time.perf_counter() - start
        return [hyps[0].tokens for hyps in results], seconds


class Seq2OnnxTorch(Engine):
    """Our PyTorch reference: training/reference.py incremental decoding (KV cache) on the checkpoint."""

    name = "seq2onnx PyTorch ref"

    def __init__(self, checkpoint: Path, threads: int, device: str = "cpu"):
        import torch

        from bench.base_model import load_model

        torch.set_num_threads(threads)
        self.device = device
        self.model = load_model(checkpoint).to(device)

    def run(self, sources, beam, length):
        from seq2onnx.training.reference import beam_search, greedy_search

        start = time.perf_counter()
        if beam == 1:
            hyps = greedy_search(self.model, sources, max_length=length, min_length=length)
        else:
            hyps = [h[0] for h in beam_search(self.model, sources, beam_size=beam,
                                              max_length=length, min_length=length)]
        synchronize(self.device)
        return [h.tokens for h in hyps], time.perf_counter() - start


class CTranslate2(Engine):
    """CTranslate2 on the model written by bench/ct2_convert.py (float32 weights, int8 at load)."""

    PRECISIONS = {"float32": "fp32", "float16": "fp16", "int8": "int8", "int8_float16": "int8_float16"}

    def __init__(self, model_dir: Path, compute_type: str, tokens: List[str], never: Sequence[int], threads: int,
                 device: str = "cpu"):
        """tokens: id -> token string (CTranslate2 speaks strings); never: ids never generated (PAD, BOS)."""
        import ctranslate2

        self.name = f"CTranslate2 {compute_type}"
        self.precision = self.PRECISIONS[compute_type]
        self.translator = ctranslate2.Translator(str(model_dir), device=device, compute_type=compute_type,
                                                 inter_threads=1, intra_threads=threads)
        self.tokens = tokens
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.suppress = [[tokens[i]] for i in never]

    def run(self, sources, beam, length):
        batch = [[self.tokens[i] for i in s] for s in sources]
        start = time.perf_counter()
        results = self.translator.translate_batch(
            batch, beam_size=beam, min_decoding_length=length, max_decoding_length=length,
            suppress_sequences=self.suppress)
        seconds = time.perf_counter() - start
        return [[self.ids[t] for t in r.hypotheses[0]] for r in results], seconds


class HFTorch(Engine):
    """HuggingFace transformers MarianMTModel.generate (PyTorch), our weights mapped by hf_marian.py."""

    def __init__(self, checkpoint: Path, threads: int, device: str = "cpu", precision: str = "fp32"):
        import torch

        from bench.base_model import load_model
        from bench.hf_marian import marian_from_transformer

        torch.set_num_threads(threads)
        model = load_model(checkpoint)
        self.pad, self.bos = model.cfg.pad_id, model.cfg.bos_id
        self.device, self.precision = device, precision
        self.name = "HF transformers (torch)" + (" fp16" if precision == "fp16" else "")
        self.model = marian_from_transformer(model).to(device)
        if precision == "fp16":
            self.model = self.model.half()

    def run(self, sources, beam, length):
        import torch

        ids = torch.tensor([list(s) for s in sources], dtype=torch.long, device=self.device)   # equal lengths
        start = time.perf_counter()
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=beam,
                                      do_sample=False, max_new_tokens=length, min_new_tokens=length,
                                      suppress_tokens=[self.pad, self.bos])
        synchronize(self.device)
        seconds = time.perf_counter() - start
        return out[:, 1:].tolist(), seconds                                 # drop the decoder start token


# --- HuggingFace Optimum, in a subprocess with its own transformers (see optimum_worker.py) -----------
BENCH = Path(__file__).resolve().parent
OPTIMUM_OVERLAY_PACKAGES = [   # optimum-onnx 0.1.0 needs transformers < 4.58, which needs tokenizers <= 0.23.0
    "optimum==2.1.0", "optimum-onnx==0.1.0", "transformers==4.57.6", "huggingface_hub==0.36.2",
    "tokenizers==0.22.2", "requests", "urllib3", "idna", "charset_normalizer", "certifi",
]


def ensure_optimum_overlay(folder: Path) -> Path:
    """pip install --target folder --no-deps the packages above, once; the venv itself is untouched."""
    stamp = folder / "packages.json"
    if stamp.exists() and json.loads(stamp.read_text()) == OPTIMUM_OVERLAY_PACKAGES:
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--target", str(tmp), *OPTIMUM_OVERLAY_PACKAGES], check=True)
    (tmp / "packages.json").write_text(json.dumps(OPTIMUM_OVERLAY_PACKAGES))
    if folder.exists():
        import shutil
        shutil.rmtree(folder)
    os.rename(tmp, folder)
    return folder


def optimum_env(overlay: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(overlay), str(BENCH.parent)]),
                TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")


class OptimumWorker:
    """The serving subprocess; one per benchmark, shared by the fp32 and int8 engines. memory.py starts one
    per variant, so that each variant's peak memory is its own (`variants`: the models it loads)."""

    def __init__(self, overlay: Path, model_dir: Path, threads: int, variants: Sequence[str] = ("fp32", "int8")):
        self.proc = subprocess.Popen(
            [sys.executable, str(BENCH / "optimum_worker.py"), "serve", str(model_dir), str(threads), *variants],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=optimum_env(overlay))
        first = self.proc.stdout.readline()
        if not first or not json.loads(first).get("ready"):
            raise RuntimeError(f"the Optimum worker did not start (exit code {self.proc.poll()}); "
                               "its error is printed above")

    def request(self, **req) -> dict:
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Optimum worker exited (code {self.proc.wait()}); its error is printed above")
        return json.loads(line)

    def peak_rss_mib(self) -> float:
        """The worker process's own peak resident memory (memory.own_peak_rss_mib, run there)."""
        return self.request(peak_rss=True)["peak_rss_mib"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)


class OptimumORT(Engine):
    """Optimum ORTModelForSeq2SeqLM.generate on Optimum's own export of the mapped Marian model."""

    def __init__(self, worker: OptimumWorker, variant: str):
        self.worker, self.variant = worker, variant
        self.name, self.precision = f"Optimum ORT {variant}", variant

    def run(self, sources, beam, length):
        ans = self.worker.request(variant=self.variant, sources=[list(s) for s in sources], beam=beam, length=length)
        return ans["tokens"], ans["seconds"]


def make_engine(system: str, variant: str, files: Dict[str, Optional[str]], threads: int, device: str = "cpu",
                tokens: Sequence[str] = (), never: Sequence[int] = (),
                worker: Optional[OptimumWorker] = None) -> Engine:
    """One system (run.py's --systems: ours torch ct2 hf optimum) at one precision (its variant / compute type).

    files: paths of "package", "checkpoint", "ct2" (plain strings: memory.py's children get them as JSON);
    tokens, never: CTranslate2's id -> token strings and the ids no system generates; worker: Optimum's process.
    """
    if system == "ours":
        return Seq2OnnxRuntime(Path(files["package"]), variant, threads, device)
    if system == "torch":
        return Seq2OnnxTorch(Path(files["checkpoint"]), threads, device)
    if system == "ct2":
        return CTranslate2(Path(files["ct2"]), variant, list(tokens), never, threads, device)
    if system == "hf":
        return HFTorch(Path(files["checkpoint"]), threads, device, variant)
    if system == "optimum":
        return OptimumORT(worker, variant)
    raise ValueError(f"unknown system {system!r}")
