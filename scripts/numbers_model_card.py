"""Measure a numbers-en-de package through the CLI and write its MODEL_CARD.md.

    python scripts/numbers_model_card.py --model models/numbers-en-de --data build/numbers/data \
        --run build/numbers/run --seq2onnx .venv/bin/seq2onnx --train-args "..."

Exact match = the hypothesis equals the reference string exactly, measured by running
`seq2onnx translate` on the test split (fp32 and int8, greedy and beam 4). Run by
scripts/make_numbers_model.sh; needs torch only to count the parameters of the run's checkpoint.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the checkout, for bench/
from bench.report import cpu_model                              # noqa: E402

CASES = [("float32", 1), ("float32", 4), ("int8", 1), ("int8", 4)]
SHOWN_ERRORS = 5


def read_pairs(path: Path) -> List[Tuple[str, str]]:
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


def translate(seq2onnx: str, model: Path, sources: List[str], compute_type: str, beam: int,
              threads: int) -> Tuple[List[str], float]:
    """`seq2onnx translate` over `sources` -> (hypotheses, wall seconds of the command)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, hyp = Path(tmp) / "src.txt", Path(tmp) / "hyp.txt"
        src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
        cmd = [seq2onnx, "translate", str(model), "--input", str(src), "--output", str(hyp),
               "--compute-type", compute_type, "--beam-size", str(beam), "--intra-threads", str(threads)]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.perf_counter() - t
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        return hyp.read_text(encoding="utf-8").splitlines(), seconds


def measure(seq2onnx: str, model: Path, pairs: List[Tuple[str, str]], threads: int) -> List[Dict]:
    rows = []
    for compute_type, beam in CASES:
        hyps, seconds = translate(seq2onnx, model, [s for s, _ in pairs], compute_type, beam, threads)
        wrong = [(s, r, h) for (s, r), h in zip(pairs, hyps) if h != r]
        rows.append({"compute_type": compute_type, "beam_size": beam, "sentences": len(pairs),
                     "exact": len(pairs) - len(wrong), "exact_match": (len(pairs) - len(wrong)) / len(pairs),
                     "seconds": seconds, "errors": wrong})
        print(f"{compute_type:8s} beam {beam}: exact match {rows[-1]['exact_match']:.2%} "
              f"({rows[-1]['exact']}/{len(pairs)}) in {seconds:.1f}s", flush=True)
    return rows


def load_meta_and_parameters(checkpoint: Path) -> Tuple[Dict, int]:
    """The averaged checkpoint's train_meta and its parameter count."""
    import torch
    from seq2onnx.runtime.config import ModelConfig
    from seq2onnx.training.model import Transformer
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
    model = Transformer(ModelConfig.from_dict(ckpt["config"]))      # parameters(): tied ones once, no buffers
    return ckpt["train_meta"], sum(p.numel() for p in model.parameters())


def train_wall_seconds(run: Path, step: int) -> float:
    """From the run folder's first file (config.json, written at start) to its checkpoint of `step`."""
    return (run / f"step_{step}.pt").stat().st_mtime - (run / "config.json").stat().st_mtime


def table(rows: List[Dict]) -> str:
    out = ["| precision | decoding | exact match | sentences/s (whole CLI run) |", "|---|---|---:|---:|"]
    for r in rows:
        decoding = "greedy" if r["beam_size"] == 1 else f"beam {r['beam_size']}"
        out.append(f"| {r['compute_type']} | {decoding} | {r['exact_match']:.2%} ({r['exact']}/{r['sentences']}) "
                   f"| {r['sentences'] / r['seconds']:.0f} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--run", type=Path, required=True)
    p.add_argument("--checkpoint", type=Path, required=True, help="the averaged checkpoint that was exported")
    p.add_argument("--seq2onnx", default="seq2onnx")
    p.add_argument("--train-args", required=True, help="the arguments given to seq2onnx train")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()

    manifest = json.loads((a.model / "manifest.json").read_text(encoding="utf-8"))
    cfg = manifest["config"]
    test = read_pairs(a.data / "test.tsv")
    from num2words import num2words
    atoms = [(num2words(n, lang="en"), num2words(n, lang="de")) for n in range(1000)]   # as in the data
    print(f"test split: {len(test)} sentences; numbers 0..999 (all in train): {len(atoms)}", flush=True)
    rows = measure(a.seq2onnx, a.model, test, a.threads)
    atom_rows = measure(a.seq2onnx, a.model, atoms, a.threads)

    valid = [json.loads(line) for line in (a.run / "metrics.jsonl").read_text().splitlines()]
    meta, n_params = load_meta_and_parameters(a.checkpoint)
    valid = [v for v in valid if v.get("kind") == "valid" and v["step"] <= meta["step"]]
    curve = ", ".join(f"{v['step']}: {100 * v['exact_match']:.1f}%" for v in valid)
    files = manifest["files"]
    size = lambda names: sum(files[n]["bytes"] for n in names) / 1e6            # noqa: E731
    fp32_files = ["encoder.onnx", "decoder_step.onnx"]
    int8_files = ["encoder.int8.onnx", "decoder_step.int8.onnx"]
    all_files = [n for n in files]
    minutes = train_wall_seconds(a.run, meta["step"]) / 60
    kept = sorted(int(Path(name).stem.split("_")[1]) for name in meta.get("averaged_from", [f"step_{meta['step']}"]))
    errors = [f"- {r['compute_type']} beam {r['beam_size']}: `{s}` -> `{h[:120]}` (reference `{ref}`)"
              for r in rows for s, ref, h in r["errors"][:SHOWN_ERRORS]]
    atom_errors = [f"- {r['compute_type']} beam {r['beam_size']}: `{s}` -> `{h[:120]}` (reference `{ref}`)"
                   for r in atom_rows for s, ref, h in r["errors"][:2 * SHOWN_ERRORS]]
    variants = manifest["variants"]
    int8_parity = variants.get("int8", {}).get("parity") or {}

    card = f"""# numbers-en-de

Numbers written out in English -> the same number written out in German, e.g.
`four hundred and ninety-five thousand, five hundred and seventeen` ->
`vierhundertfünfundneunzigtausendfünfhundertsiebzehn`. German puts units before tens
(`fünfundneunzig` = five-and-ninety) and writes one long compound, so the model has to attend,
reorder and spell sub-words. Made end to end by seq2onnx's own pipeline; reproduce it with
`make numbers-model` (scripts/make_numbers_model.sh).

## Use
```sh
echo "two thousand and twenty-six" | seq2onnx translate numbers-en-de
```
```python
from seq2onnx.runtime import Translator
print(Translator("numbers-en-de").translate("two thousand and twenty-six"))   # zweitausendsechsundzwanzig
```

## Test-set exact match, measured through `seq2onnx translate`
{len(test)} held-out numbers from 1,000..999,999 (none in training), {a.threads} intra-op threads:

{table(rows)}

Numbers 0..999 (all of them in the training split, the inputs a user tries first):

{table(atom_rows)}

{"Errors on 0..999 (up to " + str(2 * SHOWN_ERRORS) + " per case):" if atom_errors else "No errors on 0..999."}
{chr(10).join(atom_errors)}

{"Errors on the test split (up to " + str(SHOWN_ERRORS) + " per case):" if errors else "No errors on the test split."}
{chr(10).join(errors)}

## Data
`seq2onnx data numbers --out DIR --size 200000 --repeat-small 20 --seed 1`: pairs generated with `num2words`
(`lang="en"` -> `lang="de"`) for integers 0..999,999, split by number (no number in two splits).
Train: every number below 1,000 twenty times (20,000 lines: short inputs are few, and users try them
first), then 180,000 numbers spread evenly over the 4-, 5- and 6-digit bands;
valid and test: 1,000 numbers each from 1,000..999,999, evenly over the same bands.

## Model
The Transformer of "Attention Is All You Need" (post-norm, sinusoidal positions, shared
source/target embedding tied to the output projection), the `small` preset:
d_model {cfg['d_model']}, {cfg['n_heads']} heads, {cfg['encoder_layers']}+{cfg['decoder_layers']} layers,
FFN {cfg['d_ff']}, dropout {cfg['dropout']}, a {cfg['vocab_size']}-piece joint BPE (HuggingFace tokenizers, Metaspace);
{n_params:,} parameters.

Package: {size(all_files):.1f} MB in all; fp32 graphs {size(fp32_files):.1f} MB, int8 graphs
{size(int8_files):.1f} MB (per-channel int8 weights). Export parity vs PyTorch: fp32 max abs
log-prob diff {variants['fp32']['parity']['decoder_max_abs_diff']:.1e}; int8 top-1 agreement
{int8_parity.get('top1_agreement', float('nan')):.3f}, greedy token match {int8_parity.get('greedy_token_match', float('nan')):.3f}.

## Training
```sh
seq2onnx train {a.train_args}
seq2onnx average RUN --last 5 --out averaged.pt
seq2onnx export averaged.pt models/numbers-en-de --int8 --parity-data DATA/valid.tsv --overwrite
```
Adam (0.9, 0.98, 1e-9), lr = d_model^-0.5 * min(step^-0.5, step * 800^-1.5), label smoothing 0.1,
batches of up to 4,096 padded tokens. Training wall time (from the run folder's first file to its last
checkpoint): {minutes:.1f} minutes on {os.cpu_count()} cores
({cpu_model()}, Python {platform.python_version()}), tokenizer training included. The shipped weights
are the average of the last {len(kept)} checkpoints (steps {', '.join(f'{k:,}' for k in kept)}).

Validation exact match (greedy, 1,000 numbers) by step: {curve}.

## Limits
Only what the data holds: integers 0..999,999 written the way `num2words` writes them
(British "and", hyphenated tens, a comma after thousands). Other spellings, larger numbers,
digits and anything that is not a number give arbitrary output.
"""
    tmp = a.model / ".MODEL_CARD.md.tmp"
    tmp.write_text(card, encoding="utf-8")
    os.replace(tmp, a.model / "MODEL_CARD.md")
    print(f"wrote {a.model / 'MODEL_CARD.md'}")


if __name__ == "__main__":
    main()
