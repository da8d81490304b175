"""Measure a numbers-en-de package through the CLI and write its MODEL_CARD.md.

    python scripts/numbers_model_card.py --model models/numbers-en-de --data build/numbers/data \
        --run build/numbers/run --seq2onnx .venv/bin/seq2onnx --train-args "..."

Exact match = the hypothesis equals the reference string exactly, measured by running
`seq2onnx translate` (fp32 and int8, greedy and beam 4) on: every number 0..999 in every form people
type (training/numbers.py FORMS), the held-out test numbers (1,000..999,999, none in training) in every
form and once more each in a random form, the inputs people type first, and some that
lie outside the domain. All of it goes through one CLI run per case. Writes MODEL_CARD.md and
card.json beside it (the figures). Run by scripts/make_numbers_model.sh; needs torch only to count the
parameters of the run's checkpoint.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # the checkout, for bench/
from bench.report import cpu_model                              # noqa: E402
from seq2onnx.training.numbers import FORMS, TEST_NUMBERS_FILE, random_form  # noqa: E402

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


def measure(seq2onnx: str, model: Path, sets: Dict[str, List[Tuple[str, str]]], threads: int) -> List[Dict]:
    """One timed CLI run per case over all `sets` but OWN_RUN, each of which gets a run of its own (int8
    quantizes activations per call, so an input's batch mates can change its answer; alone, the test suite
    can reproduce them) -> per case {"compute_type", "beam_size", "seconds", "sets": {name: {"sentences",
    "exact", "exact_match", "errors", "hypotheses"}}}."""
    everything = [pair for name, pairs in sets.items() if name not in OWN_RUN for pair in pairs]
    rows = []
    for compute_type, beam in CASES:
        hyps, seconds = translate(seq2onnx, model, [s for s, _ in everything], compute_type, beam, threads)
        for name in OWN_RUN:
            hyps += translate(seq2onnx, model, [s for s, _ in sets[name]], compute_type, beam, threads)[0]
        order = [name for name in sets if name not in OWN_RUN] + list(OWN_RUN)
        row, start = {"compute_type": compute_type, "beam_size": beam, "seconds": seconds, "sets": {}}, 0
        for name in order:
            pairs = sets[name]
            got = hyps[start:start + len(pairs)]
            start += len(pairs)
            wrong = [(s, r, h) for (s, r), h in zip(pairs, got) if h != r]
            row["sets"][name] = {"sentences": len(pairs), "exact": len(pairs) - len(wrong),
                                 "exact_match": (len(pairs) - len(wrong)) / len(pairs), "errors": wrong,
                                 "hypotheses": got}
        rows.append(row)
        print(f"{compute_type:8s} beam {beam}: {len(everything)} sentences in {seconds:.1f}s; "
              + ", ".join(f"{n} {r['exact_match']:.2%}" for n, r in row["sets"].items()), flush=True)
    return rows


def load_meta_and_parameters(checkpoint: Path) -> Tuple[Dict, int]:
    """The averaged checkpoint's train_meta and its parameter count."""
    import torch
    from seq2onnx.runtime.package.config import ModelConfig
    from seq2onnx.training.model import Transformer
    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)
    model = Transformer(ModelConfig.from_dict(ckpt["config"]))      # parameters(): tied ones once, no buffers
    return ckpt["train_meta"], sum(p.numel() for p in model.parameters())


def train_wall_seconds(run: Path) -> float:
    """From the run folder's first file (config.json, written at start) to its last checkpoint (last.pt)."""
    return (run / "last.pt").stat().st_mtime - (run / "config.json").stat().st_mtime


def training_facts(card: Path) -> Tuple[str, str]:
    """(the training wall time, the validation curve) as an earlier MODEL_CARD.md of the run states them."""
    text = card.read_text(encoding="utf-8")
    wall = re.search(r"checkpoint\): (.+?), tokenizer training included", text, re.S)
    curve = re.search(r"by step: (.+?)\.\n", text)
    if not wall or not curve:
        sys.exit(f"{card}: no training wall time or validation curve found: pass --run or the card of that run")
    return wall.group(1), curve.group(1)


def int8_weights(variants: Dict) -> str:
    """How the int8 variant's weights were made, from its manifest record (export/quantize.py)."""
    q = variants.get("int8", {}).get("quantization") or {}
    reduced = ", reduce_range: the same integers on AVX2, AVX512 and VNNI CPUs" if q.get("reduce_range") else ""
    return f"{'per-channel ' if q.get('per_channel') else ''}{'7-bit' if reduced else 'int8'} weights{reduced}"


def recovered_note(meta: Dict, manifest: Dict) -> str:
    """A paragraph when the exported checkpoint was recovered from an earlier package's fp32 graphs."""
    source = meta.get("recovered_from")
    if not source:
        return ""
    return (f"\nThis package was re-exported ({manifest.get('created')}) from the checkpoint "
            "recovered from the fp32 graphs of the package exported on "
            f"{source.get('package_created')} from `{source.get('source_checkpoint')}` "
            "(scripts/checkpoint_from_package.py: every weight read back from those graphs, the recovered model "
            "held to the fp32 parity gate against them); the training facts above are that run's, as its card "
            "stated them.\n")


def case_name(row: Dict) -> str:
    return f"{row['compute_type']} {'greedy' if row['beam_size'] == 1 else 'beam ' + str(row['beam_size'])}"


def table(rows: List[Dict], names: List[str], label: str) -> str:
    """Exact match of each set (a line) in each case (a column)."""
    out = [f"| {label} | " + " | ".join(case_name(r) for r in rows) + " |", "|---|" + "---:|" * len(rows)]
    for name in names:
        cells = [f"{r['sets'][name]['exact_match']:.2%} ({r['sets'][name]['exact']}/{r['sets'][name]['sentences']})"
                 for r in rows]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def error_lines(rows: List[Dict], names: List[str], limit: int) -> List[str]:
    return [f"- {case_name(r)}, {name}: `{s}` -> `{h[:120]}` (reference `{ref}`)"
            for r in rows for name in names for s, ref, h in r["sets"][name]["errors"][:limit]]


# what people type first (the reference is num2words' German), and what lies outside the domain
FIRST_TYPED = [("one", 1), ("zero", 0), ("sixty-six", 66), ("Forty-Two", 42), ("twenty one", 21),
               ("a hundred", 100), ("42", 42), ("1,234", 1234), ("SEVENTEEN", 17)]
OUT_OF_DOMAIN = ["one million", "1000000", "minus five", "two point five", "hello world", "the cat"]
OWN_RUN = ("outside the domain",)        # translated in a CLI run of their own (tests/test_shipped_model.py)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--run", type=Path, help="the training run folder (metrics.jsonl, config.json, last.pt)")
    p.add_argument("--earlier-card", type=Path, metavar="MODEL_CARD.md",
                   help="without --run (a checkpoint recovered from a package: scripts/checkpoint_from_package.py): "
                        "the training wall time and validation curve are copied from this card of that run")
    p.add_argument("--checkpoint", type=Path, required=True, help="the checkpoint that was exported")
    p.add_argument("--seq2onnx", default="seq2onnx")
    p.add_argument("--data-args", required=True, help="the arguments given to seq2onnx data numbers")
    p.add_argument("--train-args", required=True, help="the arguments given to seq2onnx train")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--figures", type=Path, required=True, help="the measured figures as JSON (outside the package)")
    a = p.parse_args()
    if (a.run is None) == (a.earlier_card is None):
        p.error("pass --run (the training run folder) or --earlier-card (a card of the run), one of them")

    manifest = json.loads((a.model / "manifest.json").read_text(encoding="utf-8"))
    cfg = manifest["config"]
    from num2words import num2words
    german = lambda n: num2words(n, lang="de")                                      # noqa: E731
    test_numbers = [int(n) for n in (a.data / TEST_NUMBERS_FILE).read_text().split()]
    rng = np.random.default_rng(16)                                                 # the random forms: fixed
    sets: Dict[str, List[Tuple[str, str]]] = {}
    for form, render in FORMS.items():
        sets[f"0..999, {form}"] = [(render(n), german(n)) for n in range(1000)]
    for form, render in FORMS.items():
        sets[f"test, {form}"] = [(render(n), german(n)) for n in test_numbers]
    sets["test, random forms"] = [(random_form(n, rng), german(n)) for n in test_numbers]
    sets["first typed"] = [(text, german(n)) for text, n in FIRST_TYPED]
    sets["outside the domain"] = [(text, "") for text in OUT_OF_DOMAIN]
    print(f"{sum(map(len, sets.values()))} sentences in {len(sets)} sets", flush=True)
    rows = measure(a.seq2onnx, a.model, sets, a.threads)
    small_names = [f"0..999, {form}" for form in FORMS]
    test_names = [f"test, {form}" for form in FORMS] + ["test, random forms"]

    meta, n_params = load_meta_and_parameters(a.checkpoint)
    if a.run is not None:
        valid = [json.loads(line) for line in (a.run / "metrics.jsonl").read_text().splitlines()]
        valid = [v for v in valid if v.get("kind") == "valid" and v["step"] <= meta["step"]]
        curve = ", ".join(f"{v['step']}: {100 * v['exact_match']:.1f}%" for v in valid)
        wall = (f"{train_wall_seconds(a.run) / 60:.1f} minutes on {os.cpu_count()} cores, no GPU\n"
                f"({cpu_model()}, Python {platform.python_version()})")
    else:
        wall, curve = training_facts(a.earlier_card)
    files = manifest["files"]
    size = lambda names: sum(files[n]["bytes"] for n in names) / 1e6            # noqa: E731
    data_files = lambda name: sorted(set(manifest["variants"].get(name, {}).get("external_data", {}).values()))  # noqa: E731
    fp32_files = ["encoder.onnx", "decoder_step.onnx"] + data_files("fp32")
    int8_files = [n for n in ("encoder.int8.onnx", "decoder_step.int8.onnx", "decoder_step.int8.few_rows.onnx")
                  if n in files] + data_files("int8")
    all_files = [n for n in files]
    averaged = sorted(int(Path(name).stem.split("_")[1]) for name in meta.get("averaged_from", []))
    shipped = (f"the average of the last {len(averaged)} checkpoints (steps {', '.join(f'{k:,}' for k in averaged)})"
               if averaged else f"those of step {meta['step']:,}, the run's best.pt (best validation exact match)")
    export_lines = "\n".join(
        ([f"seq2onnx average RUN --last {len(averaged)} --out RUN/averaged.pt"] if averaged else []) +
        [f"seq2onnx export RUN/{'averaged' if averaged else 'best'}.pt models/numbers-en-de --int8 "
         "--parity-data DATA/valid.tsv --source-lang en --target-lang de --overwrite"])
    small_errors = error_lines(rows, small_names, SHOWN_ERRORS)
    test_errors = error_lines(rows, test_names, SHOWN_ERRORS)
    variants = manifest["variants"]
    int8_parity = variants.get("int8", {}).get("parity") or {}
    by_case = {case_name(r): r["sets"] for r in rows}
    typed = ["| typed | " + " | ".join(by_case) + " | right |", "|---|" + "---|" * (len(by_case) + 1)]
    for i, (text, n) in enumerate(FIRST_TYPED):
        typed.append(f"| `{text}` | " + " | ".join(f"`{c['first typed']['hypotheses'][i]}`" for c in by_case.values())
                     + f" | `{german(n)}` |")
    outside = ["| typed | " + " | ".join(by_case) + " |", "|---|" + "---|" * len(by_case)]
    for i, text in enumerate(OUT_OF_DOMAIN):
        outside.append(f"| `{text}` | " + " | ".join(f"`{c['outside the domain']['hypotheses'][i][:60]}`"
                                                    for c in by_case.values()) + " |")
    figures = [{"case": case_name(r), "seconds": r["seconds"],
                "sets": {n: {k: v for k, v in x.items() if k not in ("errors", "hypotheses")} for n, x in r["sets"].items()}}
               for r in rows]
    a.figures.write_text(json.dumps({"threads": a.threads, "cases": figures}, indent=1) + "\n", encoding="utf-8")

    card = f"""# numbers-en-de

Numbers typed in English -> the same number written out in German, e.g.
`four hundred and ninety-five thousand, five hundred and seventeen`, `495,517` or `Four Hundred Ninety Five
Thousand Five Hundred Seventeen` -> `vierhundertfünfundneunzigtausendfünfhundertsiebzehn`. German puts units
before tens (`fünfundneunzig` = five-and-ninety) and writes one long compound, so the model has to attend,
reorder and spell sub-words; from digits it must also read place values. Made end to end by seq2onnx's own
pipeline; reproduce it with `make numbers-model` (scripts/make_numbers_model.sh).

## Use
```sh
echo "two thousand and twenty-six" | seq2onnx translate numbers-en-de
```
```python
from seq2onnx.runtime import Translator
print(Translator("numbers-en-de").translate("2,026"))   # zweitausendsechsundzwanzig
```

## The domain
Integers 0..999,999 in the forms people type: words in lower, Title or UPPER case (the tokenizer lower-cases
its input, so case cannot change a translation), a hyphen or a space between tens and units, with or
without "and", with or without the comma after the thousands, "a hundred" / "a thousand" for one hundred /
one thousand; or digits, with or without thousands separators. The output is German as `num2words` writes
it (`lang="de"`). Text outside that (a million, negatives, fractions, other words) is outside the domain,
and the model cannot tell: it answers with a German-looking string or a wrong number, scored about as well
as a right answer, as the table at the end shows. A character its tokenizer never saw (the `m` of
"million", the `p` of "point", `.`, another script) becomes the `<unk>` piece, which
`TranslationResult.source_unknown_tokens` counts and `seq2onnx translate` warns about, naming the line;
words spelled from characters it knows (`hello world`, `the cat`, `-5`) pass unflagged, so check inputs
first if that matters.

## Exact match by form, measured through `seq2onnx translate`
Every number 0..999 (all in the training split, in random forms; the inputs a user tries first):

{table(rows, small_names, "0..999, form")}

{len(test_numbers):,} held-out numbers from 1,000..999,999 (none in training or validation), each in every form,
and once more each in a form drawn at random:

{table(rows, test_names, "held out, form")}

{a.threads} intra-op threads; whole CLI runs of {sum(len(v) for k, v in sets.items() if k not in OWN_RUN):,} sentences took
{", ".join(f"{r['seconds']:.0f} s ({case_name(r)})" for r in rows)}.

{"Errors (up to " + str(SHOWN_ERRORS) + " per set and case):" if small_errors or test_errors else "No errors."}
{chr(10).join(small_errors + test_errors)}

## What people type first, and what lies outside the domain
{chr(10).join(typed)}

Outside the domain (no right answer; what the model does):

{chr(10).join(outside)}

## Data
`seq2onnx data numbers --out DIR {a.data_args}`: integers 0..999,999 split by number (no number in two splits).
Train: every number below 1,000 forty times (short inputs are few, and users try them first) and those
below 20 two hundred times (each is a word no larger number teaches: with forty, "zero" -> "null", spelled
from four pieces found in no other target, was never learned), then numbers spread evenly over the 4-, 5-
and 6-digit bands; each line's English in a form drawn at random (digits 30%: half with separators; else
words with case, hyphen or space, "and", comma and "a hundred" each drawn). Valid: 1,000 numbers in random
forms; test: 1,000 numbers, canonical (the tables above render them in every form).

## Model
The Transformer of "Attention Is All You Need" (post-norm, sinusoidal positions, shared
source/target embedding tied to the output projection), the `small` preset:
d_model {cfg['d_model']}, {cfg['n_heads']} heads, {cfg['encoder_layers']}+{cfg['decoder_layers']} layers,
FFN {cfg['d_ff']}, dropout {cfg['dropout']}; a {cfg['vocab_size']}-piece joint BPE (HuggingFace tokenizers) that
lower-cases (`--lowercase`), makes every digit (`--split-digits`) and punctuation character
(`--split-punctuation`) its own piece; {n_params:,} parameters.

Package: {size(all_files):.1f} MB in all; fp32 variant {size(fp32_files):.1f} MB, int8 variant
{size(int8_files):.1f} MB (graphs and shared weights; {int8_weights(variants)}). Export parity vs PyTorch: fp32 max abs
log-prob diff {variants['fp32']['parity']['decoder_max_abs_diff']:.1e}; int8 top-1 agreement
{int8_parity.get('top1_agreement', float('nan')):.3f}, greedy token match {int8_parity.get('greedy_token_match', float('nan')):.3f}.

## Training
```sh
seq2onnx train {a.train_args}
{export_lines}
```
Adam (0.9, 0.98, 1e-9), the paper's warm-up then inverse square root schedule, label smoothing 0.1,
batches of up to 4,096 padded tokens. Training wall time (from the run folder's first file to its last
checkpoint): {wall}, tokenizer training included. The shipped weights
are {shipped}. `--maxi-batch 10` sorts by length within pools of 10 batches' worth of shuffled pairs, not
the whole epoch: sorted whole, every copy of "two" fell into one batch of ~960 an epoch, and the model
answered "two" with "zweihundertzwei". The average of the last checkpoints, the paper's, is shipped because
single checkpoints each miss a different small number: the learning rate is still 1.2e-3 at the end.

Validation exact match (greedy, 1,000 numbers in random forms) by step: {curve}.
{recovered_note(meta, manifest)}"""
    tmp = a.model / ".MODEL_CARD.md.tmp"
    tmp.write_text(card, encoding="utf-8")
    os.replace(tmp, a.model / "MODEL_CARD.md")
    print(f"wrote {a.model / 'MODEL_CARD.md'}")


if __name__ == "__main__":
    main()
