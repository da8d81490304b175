"""Documents against their sentences one request each, on LibreTranslate's POST /translate.

    python bench/serve_documents.py            # base model, int8: bench/results/serve-documents.{json,md}
    python bench/serve_documents.py --quick    # tiny model, 48 documents, 1 round: a smoke run (bench/.cache/results/)

One `seq2onnx serve --batching continuous` process (bench/serve.py's server_command and Server: 2 threads, the bench's
base model, int8 by default, served as the pair en:de), 16 closed-loop clients (--clients) in this process, two loads
in turn on the same server:
  documents  each request's q is a document: 2-4 paragraphs (blank lines between) of 1-4 sentences (line breaks and
             spaces between), which the server splits into sentences (runtime/documents/text.py) and decodes as the rows of
             one job;
  sentences  the same documents' sentences, as the server's own splitter finds them (documents.translate.layout), each sent
             alone as its own request's q.
Sentences: word counts drawn from the gettext msgids as bench/serve.py's (sample_word_counts), words from the model's
vocabulary, each ending with '.'; every request decodes at the package's own settings (LibreTranslate's /translate
takes no decoding options), so a sentence costs the same in both loads. Counted: the same work both ways, every
sentence of the pool once per round: the clients take the next request of the load's list as each answer comes
(a document is a request of several seconds, so a time window would cut off the documents running at its end),
sentences/s = the pool's sentences / the seconds from the first request to the last answer; a warm-up of one request
per client before each. The last documents run with fewer clients beside them, a tail the sentences' load hardly has:
a larger pool (--documents) shrinks its share. --rounds rounds, the two loads in turn, in the reverse order every
other round (the machine is shared: its speed drifts by more than the differences measured); the median round of each
load is reported, and the ratio is the median of the per-round ratios. Before the rounds, one pass compares the text:
each document's answer against documents.translate.layout(document).join(its sentences' answers, each sent alone). fp32 rows
do not depend on the rows beside them (in-process, Translator.translate_batch of a document's sentences gave the same
tokens as each alone: 49/49); int8 rows did in packages before per_row_activations, whose graphs quantize each
activation tensor with one scale for all its rows (DynamicQuantizeLinear + MatMulInteger), so a sentence's int8 answer
could change with the rows decoded beside it (24/49 the same there), and the int8 check counted differences that were
no error of the server's. Since export/int8_rows.py each row has its own scale.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

if __package__ in (None, ""):          # run as a script: python bench/serve_documents.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench import serve as S  # noqa: E402
from bench.base_model import SPECIALS, prepare  # noqa: E402
from bench.build import build_all  # noqa: E402

BENCH = Path(__file__).resolve().parent
LOADS = ("documents", "sentences")
PAIR = ("en", "de")


@dataclass(frozen=True)
class Settings:
    preset: str = "base"
    vocab_size: int = 8000
    seed: int = 0
    precision: str = "int8"
    threads: int = 2
    clients: int = 16
    documents: int = 64                 # the pool, shared by the clients in turn
    rounds: int = 3
    max_words: int = 40                 # longest sentence, words
    max_wait_ms: float = 5.0            # unused by continuous batching; server_command reads it


QUICK = replace(Settings(), preset="tiny", vocab_size=1000, documents=48, rounds=1)


def make_documents(tokens: Sequence[str], st: Settings) -> Tuple[List[str], str]:
    """st.documents documents (module doc), fixed by the seed; and where the sentence lengths come from."""
    rng = np.random.default_rng(st.seed)
    vocabulary = list(tokens[len(SPECIALS):])
    counts = [[int(rng.integers(1, 5)) for _ in range(int(rng.integers(2, 5)))] for _ in range(st.documents)]
    words, where = S.sample_word_counts(sum(map(sum, counts)), rng, st.max_words)
    k, docs = 0, []
    for doc in counts:
        paragraphs = []
        for n in doc:
            sents = []
            for _ in range(n):
                sents.append(" ".join(rng.choice(vocabulary, int(words[k]))) + ".")
                k += 1
            paragraphs.append("".join(s + ("\n" if rng.random() < 0.3 else " ") for s in sents).rstrip())
        docs.append("\n\n".join(paragraphs))
    return docs, where


def split(documents: Sequence[str]):
    """Each document's layout as the server splits it (runtime/documents/text.py, the pair's source language)."""
    from seq2onnx.runtime.documents.translate import layout
    return [layout(d, language=PAIR[0]) for d in documents]


@dataclass
class Done:
    start: float
    end: float
    status: int
    sentences: int
    text: str = ""


async def post(client, q: str):
    async with client.post("/translate", json={"q": q, "source": PAIR[0], "target": PAIR[1]}) as r:
        answer = await r.json()
        return r.status, answer.get("translatedText") if r.status == 200 else str(answer.get("error"))[:200]


async def closed_loop(url: str, items: List[Tuple[str, int]], clients: int) -> Tuple[List[Done], float]:
    """Every item once through `clients` closed-loop clients (each takes the next item as its answer comes), after a
    warm-up of one item per client -> (records, seconds from the first request to the last answer); items: (q, its
    sentences)."""
    import aiohttp

    records: List[Done] = []
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as client:
        await asyncio.gather(*(post(client, q) for q, _ in items[:clients]))
        queue = iter(items)

        async def one() -> None:
            for q, n in queue:
                start = time.perf_counter()
                try:
                    status, text = await post(client, q)
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                    records.append(Done(start, time.perf_counter(), -1, n, f"{type(e).__name__}: {e}"))
                    continue
                records.append(Done(start, time.perf_counter(), status, n, text if status != 200 else ""))

        begin = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(clients)))
    return records, time.perf_counter() - begin


def figures(rounds: List[Tuple[List[Done], float]]) -> Dict:
    """The median round's sentences/s and requests/s (every request answered, errors counted apart), latency of all
    rounds' requests (ms)."""
    per_round = [sum(r.sentences for r in records if r.status == 200) / seconds for records, seconds in rounds]
    k = int(np.argsort(per_round)[len(per_round) // 2])
    records, seconds = rounds[k]
    done = [r for records, _ in rounds for r in records if r.status == 200]
    errors = [r for records, _ in rounds for r in records if r.status != 200]
    latency = np.array([1000 * (r.end - r.start) for r in done]) if done else np.zeros(1)
    return {"sentences_per_s": round(per_round[k], 2), "sentences_per_s_rounds": [round(x, 2) for x in per_round],
            "requests_per_s": round(sum(r.status == 200 for r in records) / seconds, 2), "seconds": round(seconds, 2),
            "p50_ms": round(float(np.percentile(latency, 50)), 1),
            "p95_ms": round(float(np.percentile(latency, 95)), 1),
            "errors": len(errors), "first_error": f"{errors[0].status} {errors[0].text}" if errors else None}


def same_text(url: str, documents: Sequence[str], layouts) -> Dict:
    """One pass, not timed: each document's answer against the join of its sentences' answers, sent alone."""
    import aiohttp

    async def run():
        async with aiohttp.ClientSession(url, timeout=aiohttp.ClientTimeout(total=600)) as client:
            whole = await asyncio.gather(*(post(client, d) for d in documents))
            alone = [await asyncio.gather(*(post(client, s) for s in lay.sentences)) for lay in layouts]
            return whole, alone
    whole, alone = asyncio.run(run())
    bad = [i for i, ((status, text), parts, lay) in enumerate(zip(whole, alone, layouts))
           if status != 200 or any(s != 200 for s, _ in parts) or text != lay.join([t for _, t in parts])]
    return {"documents": len(documents), "same": len(documents) - len(bad), "first_different": bad[:5]}


def markdown(data: Dict) -> str:
    st, res = data["settings"], data["results"]
    lines = [f"# Documents against their sentences one request each: POST /translate, {st['clients']} clients", ""]
    if data.get("note"):
        lines += [f"**{data['note']}**", ""]
    lines += [f"`seq2onnx serve --batching continuous`, {st['threads']} threads, the bench's {st['preset']} model "
              f"(vocab {st['vocab_size']}, {st['precision']}); {data['pool']['documents']} documents of "
              f"{data['pool']['sentences']} sentences (sentence lengths: {data['sentence_lengths']}); "
              f"every sentence once per load and round, {st['rounds']} round(s), the loads in turn (median round). "
              f"Same text: {data['same_text']['same']}/{data['same_text']['documents']} documents' answers equal the "
              f"join of their sentences' answers, each sent alone ({st['precision']}: see the module doc).", "",
              "| load | sentences/s | requests/s | p50 ms | p95 ms | errors |", "|---|---:|---:|---:|---:|---:|"]
    for load in LOADS:
        r = res[load]
        lines.append(f"| {load} | {r['sentences_per_s']:.2f} | {r['requests_per_s']:.2f} | {r['p50_ms']:.0f} | "
                     f"{r['p95_ms']:.0f} | {r['errors']} |")
    lines += ["", f"Documents / sentences, sentences/s: **{data['ratio']:.2f}x** (median of the per-round ratios; "
              f"rounds: {', '.join(f'{r:.2f}' for r in data['ratios'])}).", "",
              "Machine: " + report.machine_text(data["machine"], f"load average {data['load_average_before']:.2f} "
                                                f"before, {data['load_average_after']:.2f} after")]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the tiny model, 2 s a load: a smoke run")
    ap.add_argument("--clients", type=int, help="closed-loop clients (default 16)")
    ap.add_argument("--precision", choices=list(S.PRECISIONS), help="default int8")
    ap.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    ap.add_argument("--documents", type=int, help="documents in the pool (default 64; quick 48)")
    ap.add_argument("--note", default="", help="a line the results lead with (e.g. 'busy machine, smoke run')")
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="model files (default bench/.cache)")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results, quick: CACHE/results)")
    args = ap.parse_args(argv)
    st = QUICK if args.quick else Settings()
    given = {"clients": args.clients, "precision": args.precision, "rounds": args.rounds, "documents": args.documents}
    st = replace(st, **{k: v for k, v in given.items() if v is not None})
    out_dir = args.out or (args.cache / "results" if args.quick else BENCH / "results")
    stem = "serve-documents" + ("-quick" if args.quick else "")
    folder = args.cache / ("quick" if args.quick else "base")       # run.py's and serve.py's folder of the model

    started, load_before = time.time(), os.getloadavg()
    bm = prepare(folder, st.preset, st.vocab_size, st.seed)
    art = build_all(folder, bm, args.cache / "optimum-site", ours=True, ct2=False, hf=False, optimum=False)
    documents, where = make_documents(bm.tokens, st)
    layouts = split(documents)
    items = {"documents": [(d, len(lay.sentences)) for d, lay in zip(documents, layouts)],
             "sentences": [(s, 1) for lay in layouts for s in lay.sentences]}
    port = S.free_port()
    cmd = S.server_command("continuous", st.precision, art.package, None, port, st) + \
        ["--languages", ":".join(PAIR)]
    server = S.Server(cmd, port, out_dir / "serve-logs" / f"documents-{st.precision}.log")
    windows: Dict[str, list] = {load: [] for load in LOADS}
    try:
        server.wait_ready()
        check = same_text(server.url, documents, layouts)
        for r in range(st.rounds):
            for load in (LOADS if r % 2 == 0 else LOADS[::-1]):
                records, seconds = asyncio.run(closed_loop(server.url, items[load], st.clients))
                windows[load].append((records, seconds))
                print(f"  round {r + 1}/{st.rounds}: {load} {seconds:.1f} s", file=sys.stderr, flush=True)
        peak = server.peak_rss_mib()
    finally:
        server.stop()
    results = {load: figures(windows[load]) for load in LOADS}
    ratios = [round(d / s, 3) for d, s in zip(results["documents"]["sentences_per_s_rounds"],
                                               results["sentences"]["sentences_per_s_rounds"])]
    load_after = os.getloadavg()
    cpus = len(os.sched_getaffinity(0))
    note = args.note
    if not note and max(load_before[0], load_after[0]) > cpus / 2:
        note = f"busy machine (load average above {cpus / 2:g} on {cpus} CPUs): compare the two loads of this run only"
    if args.quick and "smoke" not in note:
        note = "; ".join(filter(None, [note, "smoke run (--quick): not results"]))
    data = {"settings": asdict(st), "note": note, "sentence_lengths": where,
            "pool": {"documents": len(documents), "sentences": len(items["sentences"])}, "same_text": check,
            "results": results, "ratios": ratios, "ratio": float(np.median(ratios)), "server_peak_rss_mib": peak,
            "machine": report.machine(None), "load_average_before": load_before[0],
            "load_average_after": load_after[0], "elapsed_s": round(time.time() - started)}
    text = markdown(data)
    print(text)
    report.write(out_dir, stem, data, text)
    print(f"\nwrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}", file=sys.stderr)
    return 1 if sum(r["errors"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
