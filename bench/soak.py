"""The soak: `seq2onnx serve` under 64 clients of mixed requests for a long time, then killed with
SIGKILL under load and started again, as the servers users trust are tested.

    python bench/soak.py                           # 64 clients, 30 minutes, then the kill: bench/results/soak.{json,md}
    python bench/soak.py --minutes 2 --warmup-s 20 --out bench/.cache/results     # a short run

Each client sends its next request when the last is answered, drawing its kind at random (fixed seed per client):
  greedy      /v1/translate, one text, beam_size 1
  beam        /v1/translate, two texts, beam_size 4
  nbest       /v1/translate, one text, beam_size 4, num_hypotheses 3
  stream      /v1/translate/stream, one text, beam_size 1: the pieces joined must be the result's hypothesis
  libre       LibreTranslate's /translate, the model's own generation settings
  bad         one of BAD_REQUESTS: every one must get a 4xx with a JSON error, never a 5xx and never a 200
  cut         a /v1/translate (beam 4, two texts) whose client disconnects after 1-60 ms
  cut-stream  a stream whose client disconnects after its first event
Every answered request is compared with Translator.translate_batch([text], **the same options) computed in this
process before the server starts (every text on its own: "one client's request never changes another's answer").

Phases: warm-up (--warmup-s, not counted in the RSS baseline), the counted load (--minutes in all, warm-up
included), then SIGKILL of the server under the same load, a new server on the same port, and --after-s seconds of
load on it. While the server is down, connection errors and 503s (the new server loading its model) are the
provoked failures; anything else that is not the answer is a failure. The server's RSS (VmRSS) is read every 5 s:
its highest in the minute after warm-up against its highest in the last minute of the counted load (growth at most
--max-growth, 5%). Exit 1 if any check fails.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

if __package__ in (None, ""):          # run as a script: python bench/soak.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import report  # noqa: E402
from bench.serve import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KINDS = {"greedy": 20, "beam": 15, "nbest": 10, "stream": 15, "libre": 15, "bad": 10, "cut": 8, "cut-stream": 7}
OPTIONS = {                                        # each kind's translate_batch options (its reference's too)
    "greedy": {"beam_size": 1},
    "beam": {"beam_size": 4},
    "nbest": {"beam_size": 4, "num_hypotheses": 3},
    "stream": {"beam_size": 1},
    "libre": {},
}
# (path, raw body): what a careless or hostile client sends; each must be a 4xx
BAD_REQUESTS: List[Tuple[str, str]] = [
    ("/v1/translate", '{"texts": ["three"], "suppress_ids": [99999]}'),
    ("/v1/translate", '{"texts": ["three"], "forced_bos_id": 99999}'),
    ("/v1/translate", '{"texts": ["three"], "beam_size": 0}'),
    ("/v1/translate", '{"texts": ["three"], "beam_size": 4, "sampling_topk": 5}'),
    ("/v1/translate", '{"texts": ["three"], "num_hypotheses": 9, "beam_size": 4}'),
    ("/v1/translate", '{"texts": ["three"], "max_decoding_length": -1}'),
    ("/v1/translate", '{"texts": ["three"], "no_such_option": 1}'),
    ("/v1/translate", '{"texts": "three"}'),
    ("/v1/translate", '{"texts": ["three"'),
    ("/v1/translate", '[1, 2]'),
    ("/v1/translate/stream", '{"texts": ["three", "four"]}'),
    ("/translate", '{"q": "three", "source": "en", "target": "de", "alternatives": Infinity}'),
    ("/translate", '{"q": "three", "source": "en", "target": "xx"}'),
    ("/translate", '{"source": "en", "target": "de"}'),
]
SAMPLE_S = 5.0


def sentences(n: int, seed: int) -> List[str]:
    """Number words, the shipped model's task (num2words, as its training data; a short fixed list without it)."""
    rng = random.Random(seed)
    try:
        from num2words import num2words
    except ImportError:
        base = ["one", "seven", "twelve", "forty-two", "three hundred", "nine thousand and one", "eighty-eight"]
        return [base[i % len(base)] for i in range(n)]
    return [num2words(rng.randrange(0, 100_000 if i % 3 else 100)) for i in range(n)]


def references(model: str, compute_type: str, texts: List[str]) -> Dict[str, Dict[str, List[str]]]:
    """kind -> text -> the hypotheses of translate_batch([text], **OPTIONS[kind]), one text a call."""
    from seq2onnx.runtime import Translator

    tr = Translator(model, device="cpu", compute_type=compute_type)
    return {kind: {t: tr.translate_batch([t], **opts)[0].hypotheses for t in texts} for kind, opts in OPTIONS.items()}


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return round(int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) / 1024, 1)


class Server:
    """`seq2onnx serve` as a child process on a fixed port (the restart takes the same one)."""

    def __init__(self, cmd: List[str], log_path: Path):
        self.cmd, self.log_path = cmd, log_path
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> None:
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    async def wait_ready(self, url: str, timeout: float = 300.0) -> None:
        import aiohttp

        until = time.monotonic() + timeout
        async with aiohttp.ClientSession() as client:
            while time.monotonic() < until:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the server exited ({self.proc.returncode}); its log: {self.log_path}")
                try:
                    async with client.get(url + "/ready", timeout=aiohttp.ClientTimeout(total=2)) as r:
                        if r.status == 200:
                            return
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"the server was not ready after {timeout:.0f} s; its log: {self.log_path}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@dataclass
class Record:
    phase: str
    kind: str
    status: int            # HTTP status; -1: no answer (connection refused or reset); 0: the client cut it
    ok: bool
    error: str = ""


class Soak:
    def __init__(self, url: str, texts: List[str], refs: Dict[str, Dict[str, List[str]]], languages: Tuple[str, str]):
        self.url, self.texts, self.refs, self.languages = url, texts, refs, languages
        self.phase = "warmup"
        self.records: List[Record] = []
        self.stop_at = float("inf")

    async def client(self, session, c: int) -> None:
        import aiohttp

        rng = random.Random(1000 + c)
        kinds, weights = list(KINDS), list(KINDS.values())
        while time.monotonic() < self.stop_at:
            kind = rng.choices(kinds, weights)[0]
            phase = self.phase
            try:
                status, ok, error = await getattr(self, "send_" + kind.replace("-", "_"))(session, rng)
            except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
                status, ok, error = -1, False, f"{type(e).__name__}: {e}"[:200]
            if self.phase == "down" or (phase != self.phase and phase == "load"):
                phase = "down"                         # in flight at the kill: its failure is the kill's
            self.records.append(Record(phase, kind, status, ok, error))
            if status in (-1, 503):
                await asyncio.sleep(0.05)              # the server is down or loading: don't spin

    async def _post(self, session, path: str, body) -> Tuple[int, Dict]:
        data = body if isinstance(body, str) else json.dumps(body)
        async with session.post(self.url + path, data=data, headers={"Content-Type": "application/json"}) as r:
            text = await r.text()
            try:
                return r.status, json.loads(text)
            except ValueError:
                return r.status, {"error": f"not JSON: {text[:100]!r}"}

    async def _translate(self, session, kind: str, texts: List[str]) -> Tuple[int, bool, str]:
        status, answer = await self._post(session, "/v1/translate", {"texts": texts, **OPTIONS[kind]})
        if status != 200:
            return status, False, str(answer.get("error"))[:200]
        got = [r["hypotheses"] for r in answer["results"]]
        want = [self.refs[kind][t] for t in texts]
        return status, got == want, "" if got == want else f"{texts}: {got} != translate_batch's {want}"

    async def send_greedy(self, session, rng):
        return await self._translate(session, "greedy", [rng.choice(self.texts)])

    async def send_beam(self, session, rng):
        return await self._translate(session, "beam", [rng.choice(self.texts), rng.choice(self.texts)])

    async def send_nbest(self, session, rng):
        return await self._translate(session, "nbest", [rng.choice(self.texts)])

    async def send_libre(self, session, rng):
        text = rng.choice(self.texts)
        source, target = self.languages
        status, answer = await self._post(session, "/translate", {"q": text, "source": source, "target": target})
        if status != 200:
            return status, False, str(answer.get("error"))[:200]
        want = self.refs["libre"][text][0]
        ok = answer.get("translatedText") == want
        return status, ok, "" if ok else f"{text!r}: {answer.get('translatedText')!r} != {want!r}"

    async def _events(self, response):
        """(event, data) of a Server-Sent Events body, as they arrive."""
        event, data = "message", []
        async for raw in response.content:
            line = raw.decode().rstrip("\r\n")
            if not line:
                if data:
                    yield event, "\n".join(data)
                event, data = "message", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())

    async def send_stream(self, session, rng, cut: bool = False):
        text = rng.choice(self.texts)
        body = json.dumps({"text": text, **OPTIONS["stream"]})
        async with session.post(self.url + "/v1/translate/stream", data=body,
                                headers={"Content-Type": "application/json"}) as r:
            if r.status != 200:
                return r.status, False, (await r.text())[:200]
            pieces, result = [], None
            async for event, data in self._events(r):
                if cut:
                    r.close()                              # the client goes away mid-stream
                    return 0, True, ""
                if event == "piece":
                    pieces.append(json.loads(data)["text"])
                elif event == "result":
                    result = json.loads(data)
                elif event == "error":
                    return 200, False, f"error event: {data[:200]}"
        if cut:                                            # answered before a first event could be read
            return r.status, True, ""
        want = self.refs["stream"][text]
        if result is None:
            return 200, False, "the stream ended without a result event"
        ok = result["hypotheses"] == want and (not pieces or "".join(pieces).strip() == want[0].strip())
        return 200, ok, "" if ok else f"{text!r}: pieces {pieces}, result {result['hypotheses']} != {want}"

    async def send_cut_stream(self, session, rng):
        return await self.send_stream(session, rng, cut=True)

    async def send_cut(self, session, rng):
        try:                                               # answered before the cut: judged as any answer
            return await asyncio.wait_for(self._translate(session, "beam", [rng.choice(self.texts)] * 2),
                                          timeout=rng.uniform(0.001, 0.06))
        except asyncio.TimeoutError:
            return 0, True, ""

    async def send_bad(self, session, rng):
        path, body = rng.choice(BAD_REQUESTS)
        status, answer = await self._post(session, path, body)
        ok = 400 <= status < 500 and isinstance(answer.get("error"), str) and not answer["error"].startswith("not JSON")
        return status, ok, "" if ok else f"{path} {body[:60]}: {status} {str(answer)[:150]}"


async def run(args) -> Dict:
    import aiohttp

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = sentences(args.sentences, seed=7)
    t0 = time.monotonic()
    refs = references(args.model, args.compute_type, texts)
    print(f"soak: references for {len(texts)} texts x {len(OPTIONS)} option sets in {time.monotonic() - t0:.0f} s",
          file=sys.stderr)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "seq2onnx.runtime.cli", "serve", args.model, "--port", str(port), "--device", "cpu",
           "--compute-type", args.compute_type, "--batching", args.batching, "--log-level", "warning"]
    log_path = out_dir / "soak-server.log"
    log_path.write_text("")
    server = Server(cmd, log_path)
    server.start()
    await server.wait_ready(url)
    first_pid = server.proc.pid
    soak = Soak(url, texts, refs, tuple(args.languages.split(":")))
    samples: List[Tuple[float, str, float]] = []            # (seconds since the load began, phase, RSS MiB)
    load_s = args.minutes * 60
    start = time.monotonic()
    soak.stop_at = start + load_s + args.after_s + 600       # the phases below end it sooner
    connector = aiohttp.TCPConnector(limit=args.clients, force_close=False)
    timeout = aiohttp.ClientTimeout(total=args.request_timeout_s)
    down_s = None
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        clients = [asyncio.create_task(soak.client(session, c)) for c in range(args.clients)]

        async def sample_until(until: float, pid: int) -> None:
            while time.monotonic() < until:
                samples.append((round(time.monotonic() - start, 1), soak.phase, rss_mib(pid)))
                await asyncio.sleep(min(SAMPLE_S, max(0.0, until - time.monotonic())))

        soak.phase = "warmup"
        await sample_until(start + args.warmup_s, server.proc.pid)
        soak.phase = "load"
        await sample_until(start + load_s, server.proc.pid)
        rss_end_peak = Path(f"/proc/{server.proc.pid}/status").read_text()
        vmhwm = round(int(re.search(r"^VmHWM:\s+(\d+) kB", rss_end_peak, re.M).group(1)) / 1024, 1)
        soak.phase = "down"
        killed_at = time.monotonic()
        server.kill()
        print(f"soak: SIGKILL at {killed_at - start:.0f} s under load; starting a new server", file=sys.stderr)
        server.start()
        await server.wait_ready(url)
        down_s = time.monotonic() - killed_at
        soak.phase = "after"
        await sample_until(time.monotonic() + args.after_s, server.proc.pid)
        soak.stop_at = 0
        await asyncio.gather(*clients)
    code = server.stop()
    return figures(args, soak.records, samples, vmhwm, down_s, code, first_pid)


def figures(args, records: List[Record], samples, vmhwm: float, down_s: float, exit_code: int, first_pid: int) -> Dict:
    by_phase: Dict[str, Dict] = {}
    for phase in ("warmup", "load", "down", "after"):
        rs = [r for r in records if r.phase == phase]
        by_phase[phase] = {
            "requests": len(rs),
            "answered_200": sum(r.status == 200 for r in rs),
            "4xx": sum(400 <= r.status < 500 for r in rs),
            "5xx": sum(r.status >= 500 for r in rs),
            "no_answer": sum(r.status == -1 for r in rs),
            "cut_by_client": sum(r.status == 0 for r in rs),
            "failed": sum(not r.ok for r in rs),
        }
    # while the server is down, no answer and 503 (the new one loading) are what the kill provokes
    failures = [r for r in records if not r.ok and not (r.phase == "down" and r.status in (-1, 503))]
    unprovoked_5xx = [r for r in records if r.status >= 500 and not (r.phase == "down" and r.status == 503)]
    mismatches = [r for r in records if r.status == 200 and not r.ok]
    window = 60.0
    after_warmup = [m for t, p, m in samples if p == "load" and t < args.warmup_s + window]
    at_end = [m for t, p, m in samples if p == "load" and t >= args.minutes * 60 - window]
    rss_warm, rss_end = (max(after_warmup) if after_warmup else None), (max(at_end) if at_end else None)
    growth = (rss_end / rss_warm - 1) if rss_warm and rss_end else None
    checks = {
        "every answer equals translate_batch alone": not mismatches,
        "no 5xx but the ones the kill provokes": not unprovoked_5xx,
        "every bad request a 4xx with a JSON error": all(r.ok for r in records if r.kind == "bad" and r.phase != "down"),
        f"RSS growth after warm-up <= {args.max_growth:.0%}": growth is not None and growth <= args.max_growth,
        "answers again after SIGKILL and restart": by_phase["after"]["answered_200"] > 0
                                                   and by_phase["after"]["failed"] == 0,
        "the server exits 0 on SIGTERM": exit_code == 0,
    }
    return {
        "machine": report.machine(None),
        "settings": {k: v for k, v in vars(args).items()},
        "kinds": KINDS,
        "bad_requests": [f"{p} {b}" for p, b in BAD_REQUESTS],
        "phases": by_phase,
        "rss_mib": {"after_warmup_max": rss_warm, "at_end_max": rss_end, "growth": growth, "first_server_vmhwm": vmhwm,
                    "samples": samples},
        "restart_s": round(down_s, 1) if down_s is not None else None,
        "checks": checks,
        "failures": [f"{r.phase} {r.kind} {r.status}: {r.error}" for r in failures[:50]],
        "failure_count": len(failures),
    }


def markdown(data: Dict) -> str:
    s = data["settings"]
    lines = [f"# Soak: `seq2onnx serve {s['model']}` ({s['batching']}, {s['compute_type']}), {s['clients']} clients, "
             f"{s['minutes']} min, then SIGKILL and restart under load", "",
             report.machine_text(data["machine"], during="this soak"), "",
             f"Command: `python bench/soak.py --minutes {s['minutes']} --clients {s['clients']} --warmup-s "
             f"{s['warmup_s']} --after-s {s['after_s']}`", "",
             "| phase | requests | answered 200 | 4xx | 5xx | no answer | cut by the client | failed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for phase, f in data["phases"].items():
        lines.append(f"| {phase} | {f['requests']} | {f['answered_200']} | {f['4xx']} | {f['5xx']} | {f['no_answer']} "
                     f"| {f['cut_by_client']} | {f['failed']} |")
    r = data["rss_mib"]
    growth = f"{r['growth']:+.1%}" if r["growth"] is not None else "n/a"
    lines += ["", f"Server RSS (MiB): highest in the minute after warm-up {r['after_warmup_max']}, highest in the "
              f"last minute {r['at_end_max']} ({growth}); peak (VmHWM) of the first server {r['first_server_vmhwm']}. "
              f"SIGKILL to ready again: {data['restart_s']} s.", "", "| check | passed |", "|---|---|"]
    lines += [f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in data["checks"].items()]
    if data["failures"]:
        lines += ["", f"Failures ({data['failure_count']}, the first 50):", ""] + [f"- {f}" for f in data["failures"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="numbers-en-de", help="a package folder or a shipped model's name")
    p.add_argument("--languages", default="en:de", help="the LibreTranslate pair of /translate requests")
    # float32: the int8 graphs quantise activations per tensor over the whole step (docs/CONTRACTS.md), so an int8
    # answer may differ from translate_batch alone in its lower hypotheses, and this checks equality
    p.add_argument("--compute-type", default="float32")
    p.add_argument("--batching", default="continuous", choices=["continuous", "dynamic", "request"])
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--minutes", type=float, default=30.0, help="the counted load, warm-up included")
    p.add_argument("--warmup-s", type=float, default=120.0)
    p.add_argument("--after-s", type=float, default=60.0, help="load on the restarted server")
    p.add_argument("--sentences", type=int, default=300)
    p.add_argument("--request-timeout-s", type=float, default=120.0)
    p.add_argument("--max-growth", type=float, default=0.05)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    if args.minutes * 60 < args.warmup_s + 60:
        p.error("--minutes must leave at least a minute of load after --warmup-s")
    data = asyncio.run(run(args))
    out = Path(args.out)
    report.write(out, "soak", data, markdown(data))
    print(markdown(data))
    return 0 if all(data["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
