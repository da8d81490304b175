"""Terminology constraints (runtime/decode/constraints.py): do the translations hold the phrases, what does
it cost, and what does it do to chrF on real text.

    python bench/constraints.py --real PACKAGE --test TSV [--pairs 400]
        -> a table, and bench/results/constraints.json (without --real: parts 1 and 2 on the toy task only)

(1) Satisfaction, on the test suite's toy task (tests/fixtures_training.py: English digit words -> German, in
    reverse order) and its tiny model, trained and exported as the fixtures do (cached in
    bench/.cache/constraints/): SENTENCES toy sentences of 1..8 words, each with 1-3 phrases of 1-2 words, each a
    run of its reference translation or random German digit words; beam 4 and 5; at the default length limit
    and at max_decoding_length 4, too short for some phrase sets. A phrase set "fits" when the shortest token
    sequence holding every phrase fits the sentence's limit. "Held" is checked on the best hypothesis's tokens
    (each phrase a contiguous run), not read from the search's flag; the flag is checked against it.
(2) Speed: unconstrained and constrained beam search (beam 4) on the same batches, one after the other, ROUNDS
    rounds; the ratio is the median over rounds of constrained / unconstrained seconds. On the tiny model and
    on the real one (part 3's pairs and terms).
(3) chrF on real text: an en->de model trained on gettext UI messages (bench/train_quality.py's duel run),
    exported, and the first --pairs pairs of its test split. Each pair is translated (beam 4); its terms are
    the 1 or 2 (seeded coin) longest words of the reference (punctuation stripped, >= 3 characters, a letter,
    no character the tokenizer lacks) that the translation misses; the pairs that have some are translated
    again with them as constraints. Reported: corpus chrF and BLEU (sacrebleu, as training/evaluate.py) before
    and after, over all pairs and over the constrained ones, and how many hold their terms. The terms come
    from the reference, so this is the oracle-glossary setting: an upper bound of what a glossary gives.
"""
from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import string
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))                                   # the suite's toy task
from fixtures_training import (TINY_MAX_STEPS, TINY_STEPS, TINY_TARGET, TINY_VOCAB, holds,  # noqa: E402
                                toy_constraints, toy_pairs, write_tsv)

from seq2onnx.runtime.decode.decoding import step_limits  # noqa: E402
from seq2onnx.runtime.options import DecodingOptions  # noqa: E402
from seq2onnx.runtime.translator import Translator  # noqa: E402

WORK = ROOT / "bench" / ".cache" / "constraints"
RESULTS = ROOT / "bench" / "results" / "constraints.json"
SENTENCES = 600
ROUNDS = 5
PUNCTUATION = string.punctuation + "„“”«»‚‘’…–—"


def tiny_package() -> Path:
    """The fixtures' tiny model (tests/fixtures_training.py, fixtures_export.py), trained and exported once."""
    import dataclasses
    from seq2onnx.export.commands import ExportOptions, run_export
    from seq2onnx.training.train import TrainArgs, train
    package = WORK / "tiny" / "model"
    if (package / "manifest.json").exists():
        return package
    data = WORK / "tiny" / "data"
    data.mkdir(parents=True, exist_ok=True)
    args = TrainArgs(out=str(WORK / "tiny" / "run"), train=str(write_tsv(data / "train.tsv", toy_pairs(4000, seed=1))),
                     valid=str(write_tsv(data / "valid.tsv", toy_pairs(100, seed=2))), preset="tiny",
                     vocab_size=TINY_VOCAB, max_tokens=1024, lr_factor=0.4, warmup_steps=50, max_steps=TINY_STEPS,
                     valid_interval=200, keep_last=1, best_metric="exact_match", seed=1, threads=1, quiet=True)
    result = train(args)
    while result.best["value"] < TINY_TARGET and args.max_steps < TINY_MAX_STEPS:
        args = dataclasses.replace(args, max_steps=args.max_steps + TINY_STEPS, resume=True)
        result = train(args)
    run_export(ExportOptions(checkpoint=Path(args.out) / "best.pt", out_dir=package, parity_data=data / "valid.tsv"))
    return package


# --- (1) satisfaction ----------------------------------------------------------------------------------------
def shortest_holding(phrases: Sequence[Sequence[int]]) -> int:
    """The length of the shortest token sequence that holds every phrase (the shortest common superstring: the
    best order, each phrase overlapping the sequence so far as much as it can)."""
    distinct = {tuple(p) for p in phrases}
    outer = [p for p in distinct if not any(q != p and holds(q, p) for q in distinct)]
    best = 0 if not outer else min(len(merge(order)) for order in itertools.permutations(outer))
    return best


def merge(order: Sequence[Sequence[int]]) -> List[int]:
    out = list(order[0])
    for p in order[1:]:
        overlap = max(k for k in range(min(len(out), len(p)) + 1) if k == 0 or out[-k:] == list(p[:k]))
        out += list(p[overlap:])
    return out


def satisfaction(tr: Translator, sources: List[List[int]], phrases: List[List[List[int]]], **opts: Any) -> Dict:
    limits = step_limits(sources, DecodingOptions(**opts), tr.config)
    results = tr.translate_ids(sources, constraint_ids=phrases, **opts)
    rows = []
    for hyps, ph, limit in zip(results, phrases, limits):
        best = hyps[0]
        held = all(holds(best.tokens, p) for p in ph)
        assert held == (best.missing_constraints == 0), "the search's flag disagrees with the tokens"
        rows.append(dict(fits=shortest_holding(ph) <= limit, sum_fits=sum(len(p) for p in ph) <= limit, held=held,
                         finished=best.finished, missing=best.missing_constraints, length=len(best.tokens)))
    fits = [r for r in rows if r["fits"]]
    short = [r for r in rows if not r["fits"]]
    return {"options": opts, "sentences": len(rows), "fit": len(fits),
            "held_where_fit": sum(r["held"] for r in fits),
            "fit_only_with_overlaps": sum(not r["sum_fits"] for r in fits),
            "did_not_fit": len(short), "held_where_not_fit": sum(r["held"] for r in short),
            "unfinished_where_not_held": sum(not r["finished"] for r in rows if not r["held"]),
            "finished_where_held": sum(r["finished"] for r in rows if r["held"]),
            "mean_tokens": round(statistics.mean(r["length"] for r in rows), 2)}


# --- (2) speed -----------------------------------------------------------------------------------------------
class CountingEngine:
    """The translator's engine, counting decoder steps and the rows they ran."""

    def __init__(self, engine: Any):
        self.engine, self.steps, self.rows = engine, 0, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)

    def step(self, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        self.steps, self.rows = self.steps + 1, self.rows + len(input_ids)
        return self.engine.step(input_ids, *args, **kwargs)


def speed(tr: Translator, sources: List[List[int]], phrases: List[List[List[int]]], rounds: int = ROUNDS,
          **opts: Any) -> Dict:
    """Seconds of unconstrained and constrained translate_ids over the same sources, alternating; and the
    decoder steps each ran (constraints lengthen translations: more steps), and the seconds per row-step."""
    tr.translate_ids(sources[:8], constraint_ids=phrases[:8], **opts)                  # warm-up
    times: Dict[str, List[float]] = {"unconstrained": [], "constrained": []}
    work: Dict[str, CountingEngine] = {}
    engine = tr.engine
    try:
        for _ in range(rounds):
            for name, kw in (("unconstrained", {}), ("constrained", {"constraint_ids": phrases})):
                tr.engine = work[name] = CountingEngine(engine)
                t = time.perf_counter()
                tr.translate_ids(sources, **opts, **kw)
                times[name].append(time.perf_counter() - t)
    finally:
        tr.engine = engine
    out: Dict[str, Any] = {"options": opts, "sentences": len(sources), "rounds": rounds}
    for name, ts in times.items():
        seconds = statistics.median(ts)
        out[name] = {"seconds": round(seconds, 3), "decoder_steps": work[name].steps, "rows": work[name].rows,
                     "us_per_row_step": round(1e6 * seconds / work[name].rows, 1)}
    out["ratio"] = round(statistics.median(c / p for c, p in zip(times["constrained"], times["unconstrained"])), 2)
    out["ratio_per_row_step"] = round(out["ratio"] * work["unconstrained"].rows / work["constrained"].rows, 2)
    return out


# --- (3) chrF on real text -----------------------------------------------------------------------------------
def words(text: str) -> List[str]:
    return [w.strip(PUNCTUATION) for w in text.split() if w.strip(PUNCTUATION)]


def pick_terms(tr: Translator, reference: str, hypothesis: str, rng: random.Random) -> List[str]:
    """The 1 or 2 longest reference words the hypothesis misses (>= 3 characters, a letter, no <unk> piece)."""
    have = set(words(hypothesis))
    missing = []
    for w in sorted(dict.fromkeys(words(reference)), key=len, reverse=True):
        ok = len(w) >= 3 and any(c.isalpha() for c in w) and w not in have
        if ok and tr.config.unk_id not in tr.tokenizer.encode(w).ids:
            missing.append(w)
    return missing[:rng.choice([1, 2])]


def real_text(package: Path, test: Path, n_pairs: int, beam: int, rng: random.Random) -> Dict:
    from seq2onnx.training.data import read_tsv
    from seq2onnx.training.evaluate import translation_metrics
    tr = Translator(package, device="cpu", intra_threads=1)
    pairs, _ = read_tsv(str(test))
    pairs = pairs[:n_pairs]
    sources, refs = [s for s, _ in pairs], [t for _, t in pairs]
    before = [r.hypotheses[0] for r in tr.translate_batch(sources, beam_size=beam)]
    terms = [pick_terms(tr, r, h, rng) for r, h in zip(refs, before)]
    chosen = [i for i, t in enumerate(terms) if t]
    out = tr.translate_batch([sources[i] for i in chosen], beam_size=beam, constraints=[terms[i] for i in chosen])
    after = list(before)
    for i, r in zip(chosen, out):
        after[i] = r.hypotheses[0]
    held = sum(all(r.constraints_met) for r in out)
    visible = sum(all(t in words(r.hypotheses[0]) for t in terms[i]) for i, r in zip(chosen, out))
    sub = lambda xs: [xs[i] for i in chosen]  # noqa: E731
    metrics = {
        "all": {"before": translation_metrics(before, refs), "after": translation_metrics(after, refs)},
        "constrained": {"before": translation_metrics(sub(before), sub(refs)),
                        "after": translation_metrics(sub(after), sub(refs))}}
    ids = tr.constraint_ids([terms[i] for i in chosen], len(chosen))
    src_ids = [tr.source_ids(sources[i]) for i in chosen]
    trained = json.loads((package / "manifest.json").read_text())["source_checkpoint"]
    return {"package": str(package), "checkpoint": {"file": trained["file"], "step": trained["train_meta"]["step"]},
            "test": str(test), "pairs": len(pairs), "beam_size": beam,
            "constrained_pairs": len(chosen), "terms": sum(len(terms[i]) for i in chosen),
            "held_all_terms": held, "terms_visible_as_words": visible,
            "unfinished_after": sum(not r.finished[0] for r in out),
            "metrics": {k: {when: {m: round(v, 2) for m, v in d.items()} for when, d in v.items()}
                        for k, v in metrics.items()},
            "examples": [{"source": sources[i], "reference": refs[i], "before": before[i], "terms": terms[i],
                          "after": after[i]} for i in chosen[:8]],
            "speed": speed(tr, src_ids[:200], ids[:200], rounds=3, beam_size=beam)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", type=Path, help="the en->de gettext model package (part 3)")
    ap.add_argument("--test", type=Path, default=ROOT / "bench" / ".cache" / "train_quality" / "data" / "test.tsv")
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    rng = random.Random(18)
    tr = Translator(tiny_package(), device="cpu", intra_threads=1)
    pairs = toy_pairs(SENTENCES, seed=1818, min_words=1, max_words=8)
    sources = [tr.source_ids(s) for s, _ in pairs]
    phrases = tr.constraint_ids(toy_constraints(pairs, rng, most=3), len(pairs))
    result: Dict[str, Any] = {
        "command": " ".join(["python"] + sys.argv),
        "satisfaction": [satisfaction(tr, sources, phrases, beam_size=k, **limit)
                         for k in (4, 5) for limit in ({}, {"max_decoding_length": 4})],
        "speed": {"tiny": speed(tr, sources, phrases, beam_size=4)}}
    if args.real is not None:
        result["real"] = real_text(args.real, args.test, args.pairs, 4, rng)
        result["speed"]["real"] = result["real"].pop("speed")
    print("| beam | limit | sentences | fit | held where fit | did not fit | held there | not held: cut at the limit, "
          "flagged | mean tokens |\n|---|---|---|---|---|---|---|---|---|")
    for s in result["satisfaction"]:
        limit = s["options"].get("max_decoding_length", "default")
        print(f"| {s['options']['beam_size']} | {limit} | {s['sentences']} | {s['fit']} | {s['held_where_fit']} "
              f"({100 * s['held_where_fit'] / max(1, s['fit']):.1f}%) | {s['did_not_fit']} | "
              f"{s['held_where_not_fit']} | {s['unfinished_where_not_held']} | {s['mean_tokens']} |")
    print("\n| model | sentences | unconstrained s (row-steps) | constrained s (row-steps) | ratio | per row-step |"
          "\n|---|---|---|---|---|---|")
    for name, s in result["speed"].items():
        u, c = s["unconstrained"], s["constrained"]
        print(f"| {name} | {s['sentences']} | {u['seconds']} ({u['rows']}) | {c['seconds']} ({c['rows']}) | "
              f"{s['ratio']} | {s['ratio_per_row_step']} |")
    if "real" in result:
        r = result["real"]
        print(f"\nreal text: {r['pairs']} pairs, {r['constrained_pairs']} with terms ({r['terms']} terms), "
              f"{r['held_all_terms']} hold all their terms ({r['terms_visible_as_words']} as whole words)")
        print("| pairs | chrF before | chrF after | BLEU before | BLEU after |\n|---|---|---|---|---|")
        for k, v in r["metrics"].items():
            print(f"| {k} | {v['before']['chrf']} | {v['after']['chrf']} | {v['before']['bleu']} | "
                  f"{v['after']['bleu']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
