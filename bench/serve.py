"""The serving benchmark: `seq2onnx serve`'s batching policies and CTranslate2 behind the same HTTP front.

    python bench/serve.py                  # the full run: writes bench/results/serve.{json,md}
    python bench/serve.py --quick          # a smoke run on the tiny model: bench/.cache/results/serve-quick.*
    python bench/serve.py --systems continuous ct2-2x1 ct2-1x2 --precisions int8 --beams 1 --clients 16

Systems, each a server process of its own on 127.0.0.1 with 2 threads, all started together per precision and
measured in turn (uvicorn + runtime/serve/app.py's create_app for all):
  continuous   seq2onnx serve --batching continuous (rows join the running batch at each decoder step), one
               scheduler of 2 onnxruntime threads;
  continuous-2x1  the same with --instances 2 --intra-threads 1: two schedulers of one thread over the one model;
               "ours continuous" in the ratios is the better of the two in each cell, as CTranslate2's below
  dynamic      seq2onnx serve --batching dynamic --max-wait-ms N (Triton's dynamic batcher), one scheduler of 2 threads;
  dynamic-2x1  the same with --instances 2 --intra-threads 1; "ours dynamic" in the ratios is the better of the two
               in each cell, so that continuous batching is measured against the dynamic batcher's best too
  request      seq2onnx serve --batching request (one translate_batch per request)
  ct2-2x1      CTranslate2, asynchronous translate_batch behind a dynamic batcher (bench/serve_ct2.py),
  ct2-1x2      inter_threads x intra_threads = 2 x 1 or 1 x 2; "CTranslate2's best" in the ratios is the
               better of the two in each cell (the best configuration a user could build on 2 cores)
The model is the bench's base model (bench/base_model.py; our package and the CTranslate2 model built and cached
by bench/build.py), int8 and fp32.

Load: an async aiohttp client in this process (closed_loop: why not httpx), N closed-loop clients (each sends its
next request as soon as the previous one is answered), single-sentence POST /v1/translate requests. A cell's
--duration seconds are split into --rounds rounds; in each round every system in turn gets --warmup seconds of load
and then its share of the counted seconds (what completes in them is counted), in the reverse order every other
round: the machine is shared, and its speed drifts from minute to minute by more than the differences measured,
so every system's seconds fall across the same minutes. Sentences: word counts drawn from the
English msgids of the gettext catalogs under /usr/share/locale (training/gettext_data.py; a fixed distribution of
the same shape when none is installed), words drawn from the model's WordLevel vocabulary. The random model rarely
ends a sentence on its own, so every request's output length L is fixed (--lengths, below: min_decoding_length =
max_decoding_length = L, or one rule for every request), the same in every system, so every system does the same work
(checked: each answer's token count must be L).

L and batching: a static batcher (dynamic, CTranslate2) batches only requests of equal options. With a trained model,
the sentences of one batch end at different steps under the same options: the batch runs to its longest row, and the
requests that arrive meanwhile wait. --lengths buckets (default) and exact make L an option: buckets rounds L =
round(1.1 x source words) up to a power of 2, so the requests fall into a few option sets that static batchers batch
apart (within a set the rows all run L steps: no static batch waits on a longer row, the static batchers' best case
short of one L for all); exact keeps L = round(1.1 x words), which splits the static batches more finely (every
distinct L is its own batch); fixed gives every request one L (the mean's bucket). --lengths source makes L a
property of the sentence, as with a trained model: every request has the same options, max_length_a = 1.1 and
max_length_b = 0 (L = int(1.1 x source tokens), EOS included: fairseq's max_len_a, read per sentence by step_limits)
with PAD, BOS and EOS suppressed, so that our batchers cannot see a request's length and a static batch runs to its
longest row. CTranslate2 has no per-sentence length limit: its bench server (serve_ct2.py) splits each batch into one
translate_batch per distinct step limit, many small batches where a trained model would give it one: its figures in
this mode are not comparable (CT2_NOT_COMPARABLE). Results of a mode other than buckets go to serve-<mode>.{json,md}.

Reported per cell (precision, beam, clients, system): sentences/s, generated tokens/s, latency p50/p95/p99 (ms), the
server's peak RSS (VmHWM of its process, since it started: read after the cell), errors. Plus, per precision and
beam, 1 client two ways in turn (paired_p50): each of client 0's sentences sent to ours continuous, then given to
Translator.translate_batch([it]) called directly in this process; their p50s.
"""
from __future__ import annotations

import argparse
import asyncio
import math
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

if __package__ in (None, ""):          # run as a script: python bench/serve.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench.base_model import SPECIALS, prepare  # noqa: E402
from bench.build import build_all  # noqa: E402
from bench.memory import peak_rss_mib_of  # noqa: E402

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# ours continuous batching as CTranslate2 below: 1 scheduler of 2 onnxruntime threads, or 2 of 1 (--instances)
CONTINUOUS = {"continuous": (1, 2), "continuous-2x1": (2, 1)}     # system -> (instances, intra_threads)
DYNAMIC = {"dynamic": (1, 2), "dynamic-2x1": (2, 1)}               # the same for the dynamic batcher
OURS = tuple(CONTINUOUS) + tuple(DYNAMIC) + ("request",)
CT2_CONFIGS = {"ct2-2x1": (2, 1), "ct2-1x2": (1, 2)}       # system -> (inter_threads, intra_threads)
SYSTEMS = OURS + tuple(CT2_CONFIGS)
PRECISIONS = {"int8": "int8", "fp32": "float32"}        # precision -> compute_type (ours and CTranslate2 alike)
LENGTHS = ("buckets", "exact", "fixed", "source")
SOURCE_RATIO = 1.1                  # --lengths source: max_length_a, L = int(SOURCE_RATIO x source tokens)
CT2_NOT_COMPARABLE = ("Under --lengths source, CTranslate2's server makes one translate_batch per distinct L (it has no "
                      "per-sentence length limit): many small batches where a trained model would give it one, so "
                      "the ratios to it are not comparable.")
# word counts of English gettext msgids (de catalogs of a Debian system, 50,244 distinct): P(words <= n), for
# machines without catalogs
FALLBACK_CDF = ((1, .24), (2, .39), (3, .49), (4, .58), (5, .67), (6, .75), (8, .88), (10, .94), (12, .97),
                (16, .99), (24, 1.0))


@dataclass
class Settings:
    preset: str = "base"
    vocab_size: int = 8000
    seed: int = 0
    threads: int = 2                    # intra-op threads of every server (inter x intra = 2 for CTranslate2)
    duration: float = 6.0               # seconds counted per cell, over its rounds
    warmup: float = 1.0                 # seconds of load before each round's counted seconds
    rounds: int = 2                     # a cell's seconds split into rounds, the systems in turn within each
    clients: List[int] = field(default_factory=lambda: [1, 4, 16, 64])
    precisions: List[str] = field(default_factory=lambda: ["int8", "fp32"])
    beams: List[int] = field(default_factory=lambda: [1, 4])
    # both CTranslate2 configurations: "CTranslate2's best" is the better of the two in each cell
    systems: List[str] = field(default_factory=lambda: list(SYSTEMS))
    max_wait_ms: float = 5.0            # dynamic batchers (ours and CTranslate2's)
    lengths: str = "buckets"
    max_words: int = 64                 # longest source, words
    pool: int = 4096                    # sentences, shared by the clients in turn


QUICK = Settings(preset="tiny", vocab_size=1000, duration=2.0, warmup=0.5, rounds=1)


# --- the sentences ---------------------------------------------------------------------------------------------
def gettext_word_counts() -> Tuple[Optional[np.ndarray], str]:
    """Word counts of the distinct English msgids of this machine's gettext catalogs; None when there are none."""
    from seq2onnx.training.gettext_data import LOCALE_DIR, catalog_files, read_catalogs

    pairs, report_ = read_catalogs(catalog_files("de"))
    sources = sorted({source for source, _ in pairs})
    if not sources:
        return None, "a fixed distribution (no gettext catalogs here)"
    return (np.array([len(s.split()) for s in sources]),
            f"the {len(sources)} distinct English msgids of {len(report_.files)} de catalogs under {LOCALE_DIR}")


def sample_word_counts(n: int, rng: np.random.Generator, max_words: int) -> Tuple[np.ndarray, str]:
    counts, where = gettext_word_counts()
    if counts is not None:
        drawn = rng.choice(counts, n)
    else:                                           # uniform within each bracket of FALLBACK_CDF
        u = rng.random(n)
        drawn = np.empty(n, dtype=np.int64)
        low, p_low = 0, 0.0
        for high, p in FALLBACK_CDF:
            pick = (u >= p_low) & (u < p) if p < 1 else u >= p_low
            drawn[pick] = rng.integers(low + 1, high + 1, pick.sum())
            low, p_low = high, p
    return np.clip(drawn, 1, max_words), where


def output_length(words: int, rule: str, fixed: int) -> int:
    """L: the generated tokens of a request of `words` source words (module doc, --lengths)."""
    exact = max(1, round(1.1 * words))
    if rule == "exact":
        return exact
    if rule == "source":                 # the runtime's rule (decoding.step_limits) over the words and EOS
        return int(SOURCE_RATIO * (words + 1))
    if rule == "fixed":
        return fixed
    return 1 << math.ceil(math.log2(exact))         # buckets: the next power of 2


def sentences(tokens: Sequence[str], st: Settings) -> Tuple[List[Tuple[str, int]], str]:
    """st.pool (text, L) pairs of vocabulary words, fixed by the seed."""
    rng = np.random.default_rng(st.seed)
    words, where = sample_word_counts(st.pool, rng, st.max_words)
    fixed = output_length(round(float(words.mean())), "buckets", 0)
    vocabulary = list(tokens[len(SPECIALS):])
    return [(" ".join(rng.choice(vocabulary, w)), output_length(int(w), st.lengths, fixed)) for w in words], where


def decoding_options(length: int, beam: int, rule: str) -> Dict:
    """A request's decoding options (module doc, --lengths): L as its min and max decoding length, or (source) the
    one rule every request shares, under which a sentence runs L steps."""
    if rule == "source":
        return {"beam_size": beam, "max_length_a": SOURCE_RATIO, "max_length_b": 0,
                "suppress_ids": [SPECIALS.index(t) for t in ("<pad>", "<s>", "</s>")]}
    return {"beam_size": beam, "min_decoding_length": length, "max_decoding_length": length}


def request_body(text: str, length: int, beam: int, rule: str) -> Dict:
    return {"texts": [text], **decoding_options(length, beam, rule)}


# --- the servers -----------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(system: str, precision: str, package: Path, ct2: Optional[Path], port: int,
                   st: Settings) -> List[str]:
    compute_type = PRECISIONS[precision]
    if system in CT2_CONFIGS:
        inter, intra = CT2_CONFIGS[system]
        return [sys.executable, "-m", "bench.serve_ct2", str(package), "--ct2", str(ct2), "--compute-type",
                compute_type, "--inter-threads", str(inter), "--intra-threads", str(intra), "--max-wait-ms",
                str(st.max_wait_ms), "--port", str(port)]
    instances, intra = {**CONTINUOUS, **DYNAMIC}.get(system, (1, st.threads))
    batching = "continuous" if system in CONTINUOUS else "dynamic" if system in DYNAMIC else system
    cmd = [sys.executable, "-m", "seq2onnx.runtime.cli", "serve", str(package), "--port", str(port), "--batching",
           batching, "--device", "cpu", "--compute-type", compute_type,
           "--intra-threads", str(intra), "--instances", str(instances), "--inter-threads", "1", "--log-level",
           "warning"]
    return cmd + (["--max-wait-ms", str(st.max_wait_ms)] if system in DYNAMIC else [])


class Server:
    """One server process: started, ready (GET /ready 200), its peak RSS, stopped with SIGTERM."""

    def __init__(self, cmd: List[str], port: int, log_path: Path):
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 600.0) -> None:
        import httpx

        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}) before it was ready; its log: "
                                   f"{self.log_path}:\n{self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the server was not ready after {timeout:.0f} s; its log: {self.log_path}")

    def peak_rss_mib(self) -> float:
        return peak_rss_mib_of(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# --- the load --------------------------------------------------------------------------------------------------
@dataclass
class Record:
    start: float
    end: float
    status: int
    tokens: int            # generated tokens of the answer (best hypothesis)
    length: int            # L asked for
    error: str = ""


async def closed_loop(url: str, items: List[Tuple[str, int]], clients: int, beam: int, seconds: float,
                      rule: str) -> List[Record]:
    """`clients` clients, each sending its next request when the last is answered, for `seconds`; client c sends
    items c, c + clients, c + 2 clients, ... Requests still running at the end are awaited (and recorded).
    aiohttp's client: the load generator shares the machine's two cores with the server, and httpx's costs many times
    aiohttp's CPU a request (bench/results/shared-machine.md), which the server would then lack."""
    import aiohttp

    records: List[Record] = []
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(url, connector=connector, timeout=aiohttp.ClientTimeout(total=300)) as client:
        end = time.perf_counter() + seconds

        async def one(c: int) -> None:
            k = c
            while time.perf_counter() < end:
                text, length = items[k % len(items)]
                k += clients
                start = time.perf_counter()
                try:
                    async with client.post("/v1/translate", json=request_body(text, length, beam, rule)) as r:
                        status = r.status
                        answer = await r.json()
                except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
                    records.append(Record(start, time.perf_counter(), -1, 0, length, f"{type(e).__name__}: {e}"))
                    continue
                stop = time.perf_counter()
                if status == 200:
                    records.append(Record(start, stop, status, len(answer["results"][0]["token_ids"][0]), length))
                else:
                    records.append(Record(start, stop, status, 0, length, str(answer.get("error"))[:200]))

        await asyncio.gather(*(one(c) for c in range(clients)))
    return records


def cell_figures(rounds: List[Tuple[List[Record], Tuple[float, float]]]) -> Dict:
    """What completed inside the counted windows of a cell's rounds (records, (begin, end)): sentences/s, tokens/s,
    latency percentiles (ms)."""
    seconds = sum(end - begin for _, (begin, end) in rounds)
    done = [r for records, (begin, end) in rounds for r in records if r.status == 200 and begin <= r.end <= end]
    records = [r for records, _ in rounds for r in records]
    latency = np.array([1000 * (r.end - r.start) for r in done]) if done else np.zeros(1)
    errors = [r for r in records if r.status != 200]
    return {"sentences": len(done), "sentences_per_s": round(len(done) / seconds, 2),
            "tokens_per_s": round(sum(r.tokens for r in done) / seconds, 1),
            "p50_ms": round(float(np.percentile(latency, 50)), 2), "p95_ms": round(float(np.percentile(latency, 95)), 2),
            "p99_ms": round(float(np.percentile(latency, 99)), 2), "mean_ms": round(float(latency.mean()), 2),
            "errors": len(errors), "first_error": f"{errors[0].status} {errors[0].error}" if errors else None,
            "wrong_length": sum(r.tokens != r.length for r in records if r.status == 200)}


def run_round(url: str, items, clients: int, beam: int, st: Settings, seconds: float):
    """One round of a cell: warm-up, then `seconds` counted -> (records, counted window)."""
    started = time.perf_counter()
    records = asyncio.run(closed_loop(url, items, clients, beam, st.warmup + seconds, st.lengths))
    return records, (started + st.warmup, started + st.warmup + seconds)


def run_cell(url: str, items, clients: int, beam: int, st: Settings) -> Dict:
    """A cell of one server alone, its rounds back to back (bench/serve_ab.py)."""
    return cell_figures([run_round(url, items, clients, beam, st, st.duration / st.rounds)
                         for _ in range(st.rounds)])


def direct_translator(package: Path, precision: str, st: Settings):
    """Our Translator in this process, as the servers load it (paired_p50's direct side)."""
    from seq2onnx.runtime.translator import Translator

    with warnings.catch_warnings():             # the int8 variant's "--skip-int8-validation" (bench/build.py)
        warnings.simplefilter("ignore", UserWarning)
        return Translator(str(package), device="cpu", compute_type=PRECISIONS[precision], intra_threads=st.threads,
                          inter_threads=1)


def paired_p50(url: str, translator, precision: str, items, beam: int, st: Settings) -> Dict:
    """1 client, two ways in turn, client 0's sentences one after another: each sentence a POST /v1/translate to the
    server (the cells' aiohttp client), then translator.translate_batch([it]) called directly in this process while
    the server idles. Both in the same seconds: a shared machine's slow and fast minutes fall on both alike. -> their
    p50s (ms)."""
    import aiohttp

    async def pairs() -> Tuple[List[float], List[float]]:
        served, direct = [], []
        async with aiohttp.ClientSession(url) as client:
            started, k = time.perf_counter(), 0
            while time.perf_counter() < started + st.warmup + st.duration:
                text, length = items[k % len(items)]
                k += 1
                counted = time.perf_counter() >= started + st.warmup
                t0 = time.perf_counter()
                async with client.post("/v1/translate", json=request_body(text, length, beam, st.lengths)) as r:
                    await r.json()
                t1 = time.perf_counter()
                translator.translate_batch([text], **decoding_options(length, beam, st.lengths))
                if counted:
                    served.append(1000 * (t1 - t0))
                    direct.append(1000 * (time.perf_counter() - t1))
        return served, direct
    served, direct = asyncio.run(pairs())
    return {"precision": precision, "beam": beam, "sentences": len(direct),
            "p50_ms": round(float(np.median(direct)), 2) if direct else None,
            "continuous_p50_ms": round(float(np.median(served)), 2) if served else None}


def measure_cells(servers: Dict[str, "Server"], precision: str, beam: int, clients: int, items,
                  st: Settings) -> List[Dict]:
    """One cell per server (all started), measured in st.rounds rounds: within a round the systems in turn, in the
    reverse order every other round, so that each system's seconds fall across the same minutes as the others' (the
    machine is shared: its speed drifts between minutes by more than the differences measured)."""
    systems = list(servers)
    rounds: Dict[str, List] = {s: [] for s in systems}
    for r in range(st.rounds):
        for system in (systems if r % 2 == 0 else systems[::-1]):
            rounds[system].append(run_round(servers[system].url, items, clients, beam, st, st.duration / st.rounds))
    cells = []
    for system in systems:
        cell = {"precision": precision, "beam": beam, "clients": clients, "system": system,
                **cell_figures(rounds[system]), "peak_rss_mib": servers[system].peak_rss_mib()}
        cells.append(cell)
        print(f"  {precision} beam {beam} {clients:>2} clients {system:>14}: "
              f"{cell['sentences_per_s']:7.1f} sent/s {cell['tokens_per_s']:7.0f} tok/s  p50 "
              f"{cell['p50_ms']:7.1f} p99 {cell['p99_ms']:7.1f} ms  {cell['peak_rss_mib']:.0f} MiB"
              + (f"  errors {cell['errors']}: {cell['first_error']}" if cell["errors"] else "")
              + (f"  WRONG LENGTH {cell['wrong_length']}" if cell["wrong_length"] else ""),
              file=sys.stderr, flush=True)
    return cells


# --- the report ------------------------------------------------------------------------------------------------
def ratios(cells: List[Dict]) -> List[Dict]:
    """Per (precision, beam, clients): ours continuous (the better of its CONTINUOUS configurations in the cell)
    against the others (throughput ratio, p99s): request, the dynamic batcher's better configuration (DYNAMIC), and
    CTranslate2's better one."""
    by = {(c["precision"], c["beam"], c["clients"], c["system"]): c for c in cells}
    out = []
    for cell in dict.fromkeys(k[:3] for k in by):
        def best(systems):
            """The cell's system of `systems` that served the most sentences/s (None: none ran)."""
            ran = [by[k] for k in by if k[:3] == cell and k[3] in systems]
            return max(ran, key=lambda c: c["sentences_per_s"]) if ran else None
        cont = best(CONTINUOUS)
        if cont is None:
            continue
        precision, beam, clients = cell
        row = {"precision": precision, "beam": beam, "clients": clients, "continuous_best": cont["system"]}
        # -> vs_<name> (throughput ratio), p99_<name>_ms, and which system it was (<which>)
        for name, systems, which in (("request", ("request",), None), ("dynamic", DYNAMIC, "dynamic_best"),
                                     ("ct2_best", CT2_CONFIGS, "ct2_best")):
            other = best(systems)
            if other is not None and other["sentences_per_s"]:
                row[f"vs_{name}"] = round(cont["sentences_per_s"] / other["sentences_per_s"], 2)
                row[f"p99_{name}_ms"] = other["p99_ms"]
                if which:
                    row[which] = other["system"]
        row["p99_continuous_ms"] = cont["p99_ms"]
        out.append(row)
    return out


def markdown(data: Dict) -> str:
    st = data["settings"]
    lines = [f"# seq2onnx serve benchmark ({data['stem']})", "",
             f"Model: preset {st['preset']}, vocab {st['vocab_size']}, random weights (seed {st['seed']}); every server "
             f"a process of its own with {st['threads']} threads, behind the same HTTP front (uvicorn + create_app). "
             f"Load: {', '.join(map(str, st['clients']))} closed-loop aiohttp clients in the benchmark's process, "
             f"single-sentence POST /v1/translate, {st['duration']:g} s counted per cell in {st['rounds']} rounds "
             f"(each {st['warmup']:g} s warm-up, then its share), the systems in turn within a round. "
             f"Sentences: word counts from {data['sentence_lengths']}; output length L "
             + ("by one rule for all, unseen by the batchers" if st["lengths"] == "source" else "fixed per request")
             + f" (--lengths {st['lengths']}: bench/serve.py). Dynamic batchers wait up to {st['max_wait_ms']:g} ms. "
             "RSS: the server's VmHWM since it started, read after the cell.", ""]
    for precision in st["precisions"]:
        for beam in st["beams"]:
            rows = [c for c in data["cells"] if c["precision"] == precision and c["beam"] == beam]
            if not rows:
                continue
            lines += [f"## {precision}, {'greedy' if beam == 1 else f'beam {beam}'}", "",
                      "| clients | system | sentences/s | tokens/s | p50 ms | p95 ms | p99 ms | peak RSS MiB | errors |",
                      "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
            for c in rows:
                lines.append(f"| {c['clients']} | {c['system']} | {c['sentences_per_s']:.1f} | {c['tokens_per_s']:.0f} "
                             f"| {c['p50_ms']:.1f} | {c['p95_ms']:.1f} | {c['p99_ms']:.1f} | {c['peak_rss_mib']:.0f} "
                             f"| {c['errors'] + c['wrong_length']} |")
            lines.append("")
    if data["ratios"]:
        lines += ["## Continuous batching against the others (throughput ratio; p99 ms)", "",
                  "Goals (issue #33), at 16 and 64 clients: >= 3x per request, >= 1.3x dynamic at an equal or better "
                  "p99, ahead of CTranslate2's best.", "",
                  "| precision | beam | clients | ours | vs request | vs dynamic best | p99 continuous / dynamic | vs "
                  "CTranslate2 best | p99 continuous / CTranslate2 |", "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
        for r in data["ratios"]:
            def x(key):
                return f"{r[key]:.2f}x" if key in r else "-"
            p99d = (f"{r['p99_continuous_ms']:.0f} / {r['p99_dynamic_ms']:.0f} ({r['dynamic_best']})"
                    if "dynamic_best" in r else "-")
            p99c = (f"{r['p99_continuous_ms']:.0f} / {r['p99_ct2_best_ms']:.0f} ({r['ct2_best']})"
                    if "ct2_best" in r else "-")
            lines.append(f"| {r['precision']} | {r['beam']} | {r['clients']} | {r['continuous_best']} | "
                         f"{x('vs_request')} | {x('vs_dynamic')} "
                         f"| {p99d} | {x('vs_ct2_best')} | {p99c} |")
        lines.append("")
        if st["lengths"] == "source" and any("vs_ct2_best" in r for r in data["ratios"]):
            lines += [CT2_NOT_COMPARABLE, ""]
    if data["direct"]:
        lines += ["## 1 client: ours continuous over HTTP against translate_batch([one]) called directly", "",
                  "Goal: p50 within 10%. Each sentence sent to the server, then translated directly, in turn.", "",
                  "| precision | beam | direct p50 ms | continuous p50 ms | ratio |",
                  "|---|---:|---:|---:|---:|"]
        for d in data["direct"]:
            cont = d.get("continuous_p50_ms")
            ratio = f"{cont / d['p50_ms']:.2f}x" if cont and d["p50_ms"] else "-"
            lines.append(f"| {d['precision']} | {d['beam']} | {d['p50_ms']} | {cont if cont else '-'} | {ratio} |")
        lines.append("")
    m = data["machine"]
    lines += ["## Machine", "", report.machine_text(m, f"load average {data['load_average_before']:.2f} before, "
                                                     f"{data['load_average_after']:.2f} after; run took "
                                                     f"{data['elapsed_s'] / 60:.1f} min")]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"the tiny model, {QUICK.duration:g} s a cell: a smoke run")
    ap.add_argument("--duration", type=float, help="seconds counted per cell (default 6; quick 2)")
    ap.add_argument("--warmup", type=float, help="seconds of load before each round's (default 1; quick 0.5)")
    ap.add_argument("--rounds", type=int, help="rounds a cell's seconds are split into (default 2; quick 1)")
    ap.add_argument("--clients", nargs="+", type=int, help="closed-loop clients (default 1 4 16 64)")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, help="default: all")
    ap.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), help="default: int8 fp32")
    ap.add_argument("--beams", nargs="+", type=int, help="beam sizes (default 1 4)")
    ap.add_argument("--max-wait-ms", type=float, help="the dynamic batchers' collection time (default 5)")
    ap.add_argument("--lengths", choices=LENGTHS, help="output length per request (module doc; default buckets)")
    ap.add_argument("--no-direct", action="store_true", help="skip the 1-client p50 against translate_batch([one])")
    ap.add_argument("--cache", type=Path, default=BENCH / ".cache", help="model files (default bench/.cache)")
    ap.add_argument("--out", type=Path, help="results folder (default bench/results, quick: CACHE/results)")
    args = ap.parse_args(argv)
    st = QUICK if args.quick else Settings()
    given = {"duration": args.duration, "warmup": args.warmup, "clients": args.clients, "systems": args.systems,
             "precisions": args.precisions, "rounds": args.rounds, "beams": args.beams, "max_wait_ms": args.max_wait_ms,
             "lengths": args.lengths}
    st = replace(st, **{k: v for k, v in given.items() if v is not None})
    out_dir = args.out or (args.cache / "results" if args.quick else BENCH / "results")
    stem = "serve-quick" if args.quick else "serve" + ("" if st.lengths == "buckets" else f"-{st.lengths}")
    folder = args.cache / ("quick" if args.quick else "base")       # run.py's folder of the same model

    started, load_before = time.time(), os.getloadavg()
    bm = prepare(folder, st.preset, st.vocab_size, st.seed)
    art = build_all(folder, bm, args.cache / "optimum-site", ours=True,
                    ct2=any(s in CT2_CONFIGS for s in st.systems), hf=False, optimum=False)
    items, where = sentences(bm.tokens, st)
    cells: List[Dict] = []
    direct: List[Dict] = []
    for precision in st.precisions:
        servers: Dict[str, Server] = {}
        direct_side = None                      # paired_p50's Translator, loaded once per precision
        try:
            for system in st.systems:          # all at once: each cell's rounds take the systems in turn
                port = free_port()
                servers[system] = Server(server_command(system, precision, art.package, art.ct2, port, st), port,
                                         out_dir / "serve-logs" / f"{system}-{precision}.log")
            for server in servers.values():
                server.wait_ready()
            for beam in st.beams:
                for clients in st.clients:
                    cells += measure_cells(servers, precision, beam, clients, items, st)
                if not args.no_direct and 1 in st.clients and "continuous" in servers:
                    if direct_side is None:
                        direct_side = direct_translator(art.package, precision, st)
                    d = paired_p50(servers["continuous"].url, direct_side, precision, items, beam, st)
                    direct.append(d)
                    print(f"  {precision} beam {beam} 1 client, in turn: continuous p50 {d['continuous_p50_ms']} ms, "
                          f"direct translate_batch([one]) p50 {d['p50_ms']} ms", file=sys.stderr, flush=True)
        finally:
            for server in servers.values():
                server.stop()
    data = {"stem": stem, "settings": asdict(st), "sentence_lengths": where, "cells": cells,
            "ratios": ratios(cells), "direct": direct, "machine": report.machine(None),
            "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
            "elapsed_s": time.time() - started}
    text = markdown(data)
    print(text)
    report.write(out_dir, stem, data, text)
    bad = sum(c["errors"] + c["wrong_length"] for c in cells)
    print(f"\nwrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.md')}"
          + (f"; {bad} requests failed or had the wrong length: see the tables" if bad else ""), file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
