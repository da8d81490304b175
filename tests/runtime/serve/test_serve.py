"""`seq2onnx serve` as a real subprocess on 127.0.0.1 with the shipped model numbers-en-de (loads in ~1 s, no
trained-model fixture): LibreTranslate's contract through its clients (libretranslatepy, deep-translator, the
requests Weblate sends; npm `libretranslate`: web/test/libretranslate_client.test.js) and raw form / query bodies,
/v1 against Translator.translate_batch, the SSE stream, scoring, /metrics, and the faults (limits, bad bodies,
keys, a full queue, clients that go away, SIGTERM with requests in flight)."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra")
pytest.importorskip("starlette", reason="the serve extra: pip install '.[serve]'")
from deep_translator import LibreTranslator  # noqa: E402
from deep_translator.exceptions import AuthorizationException  # noqa: E402
from libretranslatepy import LibreTranslateAPI  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from seq2onnx.runtime import Translator  # noqa: E402
from seq2onnx.runtime.serve.service import Settings  # noqa: E402

MODEL = "numbers-en-de"
KEY = "test-key-1"
# a job that decodes 400 steps of 8 beams whatever the text (the numbers model would stop after a few): about 1.4 s
# on this 2-core host. The fault tests below time one first and scale their waits by it, so that they do not rest on
# the machine's speed
SLOW = {"min_decoding_length": 400, "max_decoding_length": 400, "max_length_a": 0, "max_length_b": None,
        "beam_size": 8}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, tmp: Path, *flags: str, models: Sequence[str] = (MODEL,)):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp / f"serve-{self.port}.log", "w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "seq2onnx.runtime.cli", "serve", *models, "--port",
                                      str(self.port), "--log-level", "warning", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server exited {self.proc.returncode}: {self.output()}"
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not get ready: {self.output()}")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """Dynamic batching, API keys, small limits."""
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "keys").write_text(f"{KEY}\nanother-key\n")
    s = Server(tmp, "--batching", "dynamic", "--api-keys", str(tmp / "keys"), "--batch-limit", "8",
               "--char-limit", "200", "--max-body-bytes", "4096", "--max-request-rows", "64")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator(MODEL)


def post(server: Server, path: str, body: Dict, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json={"api_key": KEY, **body}, timeout=60, **kw)


def metrics(server: Server) -> Dict[tuple, float]:
    text = httpx.get(server.url + "/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def one_line_error(r: httpx.Response, status: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"] == "application/json"
    assert "\n" not in r.text and list(r.json()) == ["error"], r.text
    return r.json()["error"]


# --- LibreTranslate -------------------------------------------------------------------------------------------
def test_libretranslate_client_round_trip(server, translator):
    lt = LibreTranslateAPI(server.url, api_key=KEY)
    assert lt.translate("twenty three", "en", "de") == translator.translate("twenty three")
    assert lt.languages() == [{"code": "de", "name": "German", "targets": []},
                              {"code": "en", "name": "English", "targets": ["de"]}]


def test_libretranslate_form_query_and_json_bodies(server, translator):
    want = [translator.translate(t) for t in ("seven", "one hundred and five")]
    form = httpx.post(server.url + "/translate", data={"q": "seven", "source": "en", "target": "de",
                                                       "api_key": KEY}, timeout=30)
    assert form.json() == {"translatedText": want[0]}
    query = httpx.post(server.url + "/translate", params={"q": "seven", "source": "auto", "target": "de",
                                                          "api_key": KEY}, timeout=30)   # deep-translator's way
    answer = query.json()                                          # source "auto": detected (tests/runtime/package/test_languages.py)
    assert answer["translatedText"] == want[0] and answer["detectedLanguage"]["language"] == "en"
    assert 0 < answer["detectedLanguage"]["confidence"] <= 100
    batch = post(server, "/translate", {"q": ["seven", "one hundred and five"], "source": "en", "target": "de",
                                        "alternatives": 2})                              # Weblate's way: JSON, a list
    beam = translator.translate_batch(["seven", "one hundred and five"], beam_size=4, num_hypotheses=3)
    assert batch.json() == {"translatedText": want,
                            "alternatives": [[h for h in r.hypotheses[1:] if h != r.hypotheses[0]] for r in beam]}


def test_deep_translator_client(server, translator):
    # deep_translator/libre.py (1.11.4): POST custom_url + "translate" with q, source, target, format=text and
    # api_key in the query string and no body; reads "translatedText"; 403 -> AuthorizationException.
    # translate_batch is one translate per text. (Its base_url keyword is swallowed by **kwargs: custom_url it is.)
    texts = ["twenty three", "one hundred and five"]
    want = [translator.translate(t) for t in texts]
    lt = LibreTranslator(source="en", target="de", api_key=KEY, custom_url=server.url + "/")
    assert lt.translate(texts[0]) == want[0]
    assert lt.translate_batch(texts) == want
    assert LibreTranslator(source="auto", target="de", api_key=KEY, custom_url=server.url + "/").translate(
        texts[1]) == want[1]
    with pytest.raises(AuthorizationException):
        LibreTranslator(source="en", target="de", api_key="wrong", custom_url=server.url + "/").translate("seven")


# Weblate's LibreTranslate backend: weblate/machinery/libretranslate.py (WeblateOrg/weblate, commit 19117864,
# LibreTranslateTranslation(BatchMachineTranslation)) with weblate/machinery/base.py's request(): the URL is the
# configured one without its trailing slashes + "/languages" or "/translate"; headers Referer (the site's URL) and
# Accept "application/json; charset=utf-8"; any status >= 400 raises (403 and 429 as rate limits), the detail read
# from {"error": str}. Languages: [x["code"] for x in answer], a pair supported when both codes are listed and
# differ. Translate: a JSON body {"api_key", "q": [texts], "source", "target"}, read payload["translatedText"][i];
# up to batch_size = 20 texts a request.
WEBLATE_HEADERS = {"Referer": "https://weblate.example.org/", "Accept": "application/json; charset=utf-8"}
WEBLATE_BATCH_SIZE = 20


def test_weblate_machinery_requests(server, translator):
    base = (server.url + "/").rstrip("/")
    languages = httpx.get(base + "/languages", headers=WEBLATE_HEADERS, timeout=10)
    assert languages.status_code == 200
    codes = {x["code"] for x in languages.json()}
    assert {"en", "de"} <= codes
    texts = ["twenty three", "seven", "test"]    # "test": what Weblate translates to check its settings
    r = httpx.post(base + "/translate", headers=WEBLATE_HEADERS, timeout=30,
                   json={"api_key": KEY, "q": texts, "source": "en", "target": "de"})
    assert r.status_code == 200
    assert [r.json()["translatedText"][i] for i in range(len(texts))] == [translator.translate(t) for t in texts]
    refused = httpx.post(base + "/translate", headers=WEBLATE_HEADERS, timeout=30,
                         json={"api_key": "", "q": texts, "source": "en", "target": "de"})
    assert refused.status_code == 403 and isinstance(refused.json()["error"], str)
    # a full batch of Weblate's fits the default --batch-limit (this module's server sets a smaller one)
    assert Settings().batch_limit >= WEBLATE_BATCH_SIZE


@pytest.mark.parametrize("body, message", [
    ({"source": "en", "target": "de"}, "missing q"),
    ({"q": "x", "source": "fr", "target": "de"}, "fr is not supported"),
    ({"q": "x", "source": "en", "target": "en"}, "not available as a target"),
    ({"q": "x", "source": "en", "target": "de", "format": "xml"}, "xml format is not supported"),
    ({"q": "x", "source": "en", "target": "de", "alternatives": "many"}, "not a number"),
    ({"q": "x", "source": "en", "target": "de", "alternatives": 9}, "must be <= 3"),
    ({"q": ["x"] * 9, "source": "en", "target": "de"}, "exceeds text limit (8)"),
    ({"q": "x" * 201, "source": "en", "target": "de"}, "exceeds text limit (200)"),
    ({"q": [1, 2], "source": "en", "target": "de"}, "must be a list of strings"),
])
def test_libretranslate_bad_requests_are_400(server, body, message):
    assert message in one_line_error(post(server, "/translate", body), 400)


# --- /v1 ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"beam_size": 1, "return_scores": True},
                                     {"beam_size": 3, "num_hypotheses": 2, "return_scores": True,
                                      "return_alignment": True, "target_prefix": [None, "ein"]}])
def test_v1_translate_equals_translate_batch(server, translator, options):
    texts = ["one hundred and twenty", "seventeen"]
    r = post(server, "/v1/translate", {"model": MODEL, "texts": texts, **options})
    want = translator.translate_batch(texts, **options)
    got = r.json()["results"]
    assert [g["hypotheses"] for g in got] == [w.hypotheses for w in want]
    assert [g["token_ids"] for g in got] == [w.token_ids for w in want]
    if options.get("return_scores"):
        assert [x for g in got for x in g["scores"]] == pytest.approx([x for w in want for x in w.scores], abs=1e-4)
    if options.get("return_alignment"):
        assert [g["alignment"] for g in got] == [[list(map(list, a)) for a in w.alignment] for w in want]


def test_v1_stream_joins_to_the_translation(server, translator):
    text = "four thousand and twelve"
    with httpx.stream("POST", server.url + "/v1/translate/stream", json={"api_key": KEY, "text": text,
                                                                          "beam_size": 1}, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _sse(r.iter_lines())
    pieces = [json.loads(d)["text"] for e, d in events if e == "piece"]
    kinds = [e for e, _ in events]
    assert kinds[-1] == "result" and set(kinds[:-1]) == {"piece"} and len(pieces) > 1
    want = translator.translate_batch([text], beam_size=1, return_scores=True)[0]
    result = json.loads(events[-1][1])
    assert "".join(pieces) == result["hypotheses"][0] == want.hypotheses[0]
    assert result["token_ids"] == want.token_ids and result["scores"] == pytest.approx(want.scores, abs=1e-4)


def _sse(lines: Iterator[str]) -> List[tuple]:
    events, event, data = [], None, []
    for line in lines:
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and event:
            events.append((event, "\n".join(data)))
            event, data = None, []
    return events


def test_v1_stream_bad_option_is_an_ordinary_400(server):
    r = post(server, "/v1/translate/stream", {"text": "seven", "num_hypotheses": 2, "beam_size": 2})
    assert "num_hypotheses must be 1" in one_line_error(r, 400)


def test_v1_score_and_models(server, translator):
    r = post(server, "/v1/score", {"sources": ["seven"], "targets": ["sieben"]})
    want = translator.score_batch(["seven"], ["sieben"])[0]
    got = r.json()["results"][0]
    assert got["tokens"] == want.tokens and got["log_probs"] == pytest.approx(want.log_probs, abs=1e-5)
    models = httpx.get(server.url + "/v1/models", timeout=10).json()
    assert models["ready"] and [m["name"] for m in models["models"]] == [MODEL]
    assert models["models"][0]["languages"] == [{"source": "en", "target": "de"}]
    schema = httpx.get(server.url + "/v1/options", timeout=10).json()        # from the one options table
    assert schema["model"] == MODEL and schema["properties"]["beam_size"]["type"] == "integer"
    assert "max_batch_size" not in schema["properties"]


@pytest.mark.parametrize("body, status, message", [
    ({"texts": ["x"], "beam_size": "wide"}, 400, "beam_size must be an integer"),
    ({"texts": ["x"], "no_such_option": 1}, 400, "unknown option(s) 'no_such_option'; known: api_key, beam_rules"),
    ({"texts": ["x"], "beam_size": 2.0}, 400, "beam_size must be an integer, got 2.0"),
    ({"texts": ["x"], "return_scores": 1}, 400, "return_scores must be true or false"),
    ({"texts": ["x"], "max_batch_size": 0}, 400, "max_batch_size: set by the server"),
    ({"texts": "x"}, 400, "texts must be a list of strings"),
    ({"texts": ["x"], "model": "other"}, 400, "model must be one of numbers-en-de"),
    ({"texts": ["x"] * 5, "beam_size": 16}, 400, "takes 80 decoder rows"),
    ({"texts": ["x"], "beam_size": 256, "num_hypotheses": 256}, 400, "takes 256 decoder rows"),
    ({"texts": ["x"], "max_length_b": -1}, 400, "max_length_b must be an integer"),
    ({"texts": ["x"], "stream": "yes"}, 400, "stream must be true or false"),
    ({"texts": ["x" * 5000]}, 413, "larger than 4096 bytes"),
])
def test_v1_bad_requests(server, body, status, message):
    assert message in one_line_error(post(server, "/v1/translate", body), status)


def test_bad_bodies_and_keys(server):
    bad = httpx.post(server.url + "/v1/translate", content=b'{"texts": ["x"', timeout=10,
                     headers={"content-type": "application/json"})
    assert "not valid JSON" in one_line_error(bad, 400)
    assert "JSON object" in one_line_error(httpx.post(server.url + "/v1/translate", json=[1], timeout=10), 400)
    assert "needs an API key" in one_line_error(httpx.post(server.url + "/v1/translate", json={"texts": ["x"]},
                                                           timeout=10), 403)
    wrong = {"texts": ["x"], "api_key": "nope"}
    assert "Invalid API key" in one_line_error(httpx.post(server.url + "/v1/translate", json=wrong, timeout=10), 403)
    form = httpx.post(server.url + "/translate", data={"q": "x", "source": "en", "target": "de"}, timeout=10)
    assert "needs an API key" in one_line_error(form, 403)
    bearer = httpx.post(server.url + "/v1/translate", json={"texts": ["seven"]}, timeout=10,
                        headers={"authorization": f"Bearer {KEY}"})
    assert bearer.status_code == 200
    # a body larger than the limit without a Content-Length to say so (chunked): 413 once read past it
    chunked = httpx.post(server.url + "/v1/translate", content=iter([b'{"texts": ["', b"x" * 5000, b'"]}']),
                         timeout=10)
    assert "larger than 4096 bytes" in one_line_error(chunked, 413)


def test_hostile_requests_leave_the_others_alone(server, translator):
    """Bad requests sent at the same time as good ones: each good answer is its own translation."""
    texts = ["one", "twenty two", "three hundred", "forty four", "five thousand", "sixty"]
    want = [translator.translate(t) for t in texts]
    bad = [{"texts": ["x"], "beam_size": 0}, {"texts": ["\udcff"]}, {"texts": ["seven"], "constraints": "x"},
           {"texts": ["x"], "suppress_ids": [-1]}, {"texts": ["\x00" * 150]}, {"texts": ["x"], "seed": "s"}]
    answers: Dict[str, int] = {}

    def send(i: int) -> None:
        good = post(server, "/v1/translate", {"texts": [texts[i]]})
        answers[texts[i]] = good.json()["results"][0]["hypotheses"][0]
        r = httpx.post(server.url + "/v1/translate", timeout=30,
                       content=json.dumps({"api_key": KEY, **bad[i]}).encode("utf-8", "surrogatepass"),
                       headers={"content-type": "application/json"})
        answers[f"bad{i}"] = r.status_code

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [answers[t] for t in texts] == want
    assert all(answers[f"bad{i}"] in (200, 400) for i in range(len(bad))), answers


def test_metrics_count_requests(server):
    before = metrics(server)
    post(server, "/v1/translate", {"texts": ["seven"]})
    httpx.get(server.url + "/health", timeout=10)
    after = metrics(server)
    key = ("seq2onnx_requests_total", (("route", "/v1/translate"), ("status", "200")))
    assert after[key] == before.get(key, 0) + 1
    assert after[("seq2onnx_requests_total", (("route", "/health"), ("status", "200")))] >= 1
    assert after[("seq2onnx_generated_tokens_total", (("model", MODEL),))] > 0
    assert after[("seq2onnx_queue_depth", (("model", MODEL),))] == 0
    assert after[("seq2onnx_time_to_first_token_seconds_count", (("model", MODEL),))] >= 1


# --- load, disconnects, shutdown: a server that takes one request at a time --------------------------------
@pytest.fixture()
def slow_server(tmp_path) -> Iterator[Server]:
    s = Server(tmp_path, "--batching", "request", "--max-queue", "2", "--timeout", "30")
    yield s
    s.stop()


def _jobs(server: Server, outcome: str) -> float:
    return metrics(server).get(("seq2onnx_jobs_total", (("model", MODEL), ("outcome", outcome))), 0)


def test_full_queue_disconnects_and_sigterm(slow_server, translator):
    s = slow_server
    started = time.monotonic()                      # how long one SLOW job takes on this machine, alone
    assert httpx.post(s.url + "/v1/translate", json={"texts": ["seven"], **SLOW}, timeout=60).status_code == 200
    slow = time.monotonic() - started
    # a full queue: 429 with Retry-After, while the others are answered
    results: List[httpx.Response] = []
    threads = [threading.Thread(target=lambda: results.append(
        httpx.post(s.url + "/v1/translate", json={"texts": ["seven"], **SLOW}, timeout=60))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    statuses = sorted(r.status_code for r in results)
    assert 200 in statuses and 429 in statuses, statuses
    full = next(r for r in results if r.status_code == 429)
    assert int(full.headers["retry-after"]) >= 1 and "queue is full" in full.json()["error"]

    # a client that goes away while its job waits: the job is dropped, the server answers the next one
    cancelled = _jobs(s, "cancelled")
    busy = threading.Thread(target=lambda: httpx.post(s.url + "/v1/translate", json={"texts": ["a"], **SLOW},
                                                       timeout=60))
    busy.start()
    time.sleep(slow / 10)
    # b waits for the rest of a (about 0.9 slow) and then runs (slow): its client gives up after half of one
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(s.url + "/v1/translate", json={"texts": ["b"], **SLOW}, timeout=slow / 2)
    # a stream whose client leaves after its first piece: stopped at the next piece
    with httpx.stream("POST", s.url + "/v1/translate/stream", json={"text": "c", **SLOW}, timeout=60) as r:
        next(r.iter_lines())
    busy.join(60)
    _wait(lambda: _jobs(s, "cancelled") >= cancelled + 2, "two cancelled jobs")
    ok = httpx.post(s.url + "/v1/translate", json={"texts": ["seven"]}, timeout=30)
    assert ok.json()["results"][0]["hypotheses"] == [translator.translate("seven")]

    # SIGTERM with requests in flight: they finish, then the process exits 0
    done: List[httpx.Response] = []
    threads = [threading.Thread(target=lambda: done.append(
        httpx.post(s.url + "/v1/translate", json={"texts": ["seven"], **SLOW}, timeout=60))) for _ in range(2)]
    for t in threads:
        t.start()
    _wait(lambda: _jobs_in_flight(s) >= 2, "two requests in flight")
    s.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert [r.status_code for r in done] == [200, 200], [r.text for r in done]
    assert s.proc.wait(30) == 0, s.output()
    assert "Traceback" not in s.output()


def _jobs_in_flight(s: Server) -> float:
    """Jobs queued, plus the one running (the request policy runs one at a time; it holds SLOW's 8 rows)."""
    m = metrics(s)
    return m[("seq2onnx_queue_depth", (("model", MODEL),))] + (m[("seq2onnx_running_rows", (("model", MODEL),))] > 0)


def _wait(condition, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds} s for {what}"
        time.sleep(0.05)


def test_cli_errors_are_one_line(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "seq2onnx.runtime.cli", "serve", *args], capture_output=True,
                              text=True, timeout=60)
    for args, message in [((MODEL, "--languages", "en"), "--languages takes [MODEL=]SRC:TGT"),
                          ((MODEL, "--api-keys", str(tmp_path / "none")), "--api-keys"),
                          ((MODEL, MODEL), "two models are named"),
                          ((MODEL, "--instances", "0"), "--instances must be positive")]:
        r = run(*args)
        assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    bad = run(str(tmp_path / "no-such-model"), "--port", str(_free_port()))
    assert bad.returncode == 2 and "no-such-model" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr
