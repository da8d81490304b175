"""HuggingFace Optimum (ORTModelForSeq2SeqLM) in its own process.

optimum-onnx 0.1.0, the newest release, needs transformers < 4.58 while the benchmark venv has
transformers 5 (and tokenizers 0.23, which transformers 4.57 refuses). So Optimum runs in a
subprocess whose PYTHONPATH puts a small overlay folder first (bench/.cache/optimum-site, made by
engines.ensure_optimum_overlay with pip --target --no-deps): transformers 4.57.6 and its pins come
from the overlay, torch / numpy / onnxruntime from the venv. Nothing in the venv changes.

    python bench/optimum_worker.py export MARIAN_DIR OUT_DIR   # OUT_DIR/fp32 and OUT_DIR/int8
    python bench/optimum_worker.py serve OUT_DIR THREADS [VARIANT ...]   # JSON lines on stdin -> stdout

serve loads the variants named (default fp32 and int8), reads one request per line, {"variant":
"fp32"|"int8", "sources": [[ids]], "beam": K, "length": N}, and answers {"tokens": [[ids]], "seconds": s},
s timed around generate() alone; {"variant": ..., "batches": [[[ids]]], "beam": K} decodes each batch (padded
with pad, masked) at the model's generation_config (no length forced; "forced_bos": ID, if given, is generate()'s
forced_bos_token_id: NLLB's target language) and answers the same, s the sum of the generate() calls; {"peak_rss": true} answers {"peak_rss_mib": m}, this process's own
peak resident memory (bench/memory.py).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ONNX_FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")


def _quantization_config():
    """Dynamic int8 (Optimum's recommended setup for CPU inference), for the best ISA this CPU has."""
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    flags = ""
    if os.path.exists("/proc/cpuinfo"):
        flags = Path("/proc/cpuinfo").read_text()
    if "avx512_vnni" in flags:
        return AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    if "avx512f" in flags:
        return AutoQuantizationConfig.avx512(is_static=False, per_channel=False)
    return AutoQuantizationConfig.avx2(is_static=False, per_channel=False)


def export(marian_dir: Path, out_dir: Path) -> None:
    """Optimum's own exporter (fp32), then ORTQuantizer on each graph (int8); atomic folder write."""
    from optimum.onnxruntime import ORTModelForSeq2SeqLM, ORTQuantizer

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=out_dir.name + ".tmp"))
    try:
        ORTModelForSeq2SeqLM.from_pretrained(str(marian_dir), export=True).save_pretrained(str(tmp / "fp32"))
        shutil.copytree(tmp / "fp32", tmp / "int8", ignore=shutil.ignore_patterns("*.onnx"))
        qconfig = _quantization_config()
        for name in ONNX_FILES:
            ORTQuantizer.from_pretrained(str(tmp / "fp32"), file_name=name).quantize(
                quantization_config=qconfig, save_dir=str(tmp / "int8"), file_suffix="")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def serve(model_dir: Path, threads: int, variants=("fp32", "int8")) -> None:
    import onnxruntime as ort
    import torch
    from optimum.onnxruntime import ORTModelForSeq2SeqLM

    answers, sys.stdout = sys.stdout, sys.stderr      # library prints must not corrupt the protocol
    torch.set_num_threads(threads)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    models = {variant: ORTModelForSeq2SeqLM.from_pretrained(str(model_dir / variant), session_options=options,
                                                            use_cache=True, use_merged=False)
              for variant in variants}
    config = next(iter(models.values())).config
    pad, bos = config.pad_token_id, config.decoder_start_token_id
    print(json.dumps({"ready": True}), file=answers, flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req.get("peak_rss"):
            from bench.memory import own_peak_rss_mib      # the repository is on PYTHONPATH (engines.optimum_env)
            print(json.dumps({"peak_rss_mib": own_peak_rss_mib()}), file=answers, flush=True)
            continue
        if "batches" in req:          # real sentences at the model's own generation_config (hf_marian_convert.py)
            tokens, seconds = [], 0.0
            extra = {"forced_bos_token_id": req["forced_bos"]} if req.get("forced_bos") is not None else {}
            for batch in req["batches"]:
                width = max(len(s) for s in batch)
                ids = torch.tensor([s + [pad] * (width - len(s)) for s in batch], dtype=torch.long)
                mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in batch], dtype=torch.long)
                start = time.perf_counter()
                out = models[req["variant"]].generate(input_ids=ids, attention_mask=mask, num_beams=req["beam"],
                                                      do_sample=False, **extra)
                seconds += time.perf_counter() - start
                tokens += out[:, 1:].tolist()         # drop the decoder start token
            print(json.dumps({"tokens": tokens, "seconds": seconds}), file=answers, flush=True)
            continue
        ids = torch.tensor(req["sources"], dtype=torch.long)
        start = time.perf_counter()
        out = models[req["variant"]].generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), num_beams=req["beam"], do_sample=False,
            max_new_tokens=req["length"], min_new_tokens=req["length"], suppress_tokens=[pad, bos])
        seconds = time.perf_counter() - start
        tokens = out[:, 1:].tolist()                      # drop the decoder start token
        print(json.dumps({"tokens": tokens, "seconds": seconds}), file=answers, flush=True)


def main(argv) -> int:
    if len(argv) == 3 and argv[0] == "export":
        export(Path(argv[1]), Path(argv[2]))
    elif len(argv) >= 3 and argv[0] == "serve":
        serve(Path(argv[1]), int(argv[2]), argv[3:] or ("fp32", "int8"))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
