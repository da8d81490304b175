"""How a numbers checkpoint does on 0..999, the inputs users try first: greedy decoding through the PyTorch
reference (training/evaluate.py), matches out of 1,000 per form (spaces ignored: a stray word boundary inside
the compound is not counted as a miss) and the first misses.

    python scripts/numbers_small_numbers.py build/numbers/run/step_6000.pt build/numbers/run/averaged.pt

The numbers model's figures in bench/results/maxi_batch.md came from this."""
from __future__ import annotations

import sys

import torch
from num2words import num2words

from seq2onnx.export.onnx_export import model_from_checkpoint
from seq2onnx.training.checkpoint import load_checkpoint
from seq2onnx.training.evaluate import greedy_translations
from seq2onnx.training.numbers import FORMS
from seq2onnx.training.tokenizer import encode_source, tokenizer_from_json


def main() -> None:
    torch.set_num_threads(2)
    for path in sys.argv[1:]:
        ckpt = load_checkpoint(path)
        model = model_from_checkpoint(ckpt).eval()
        tok = tokenizer_from_json(ckpt["tokenizer"])
        eos = ckpt["config"]["eos_id"]
        print(path)
        for form in ("canonical", "digits", "space for hyphen"):
            sources = [FORMS[form](n) for n in range(1000)]
            hyps = greedy_translations(model, tok, [encode_source(tok, s, eos) for s in sources], 64)
            wrong = [(s, h) for n, (s, h) in enumerate(zip(sources, hyps)) if h.replace(" ", "") != num2words(n, lang="de")]
            print(f"  {form}: {1000 - len(wrong)}/1000 right; first misses {wrong[:4]}")


if __name__ == "__main__":
    main()
