"""`seq2onnx serve` against hostile or careless clients, as a real subprocess on 127.0.0.1 with the shipped
model (test_serve.py's Server): what one request may cost (--max-request-tokens, --max-attention-values,
--max-answer-bytes) and all of them hold (--max-pending-bytes), refused before any decoding with the flag named;
the Host check without --api-keys (DNS rebinding); every error JSON, Starlette's own included; Python warnings as
one line of the server's log."""
from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Iterator

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra")
pytest.importorskip("starlette", reason="the serve extra: pip install '.[serve]'")
from tests.runtime.serve.test_serve import MODEL, Server, one_line_error  # noqa: E402

from seq2onnx.runtime import Translator  # noqa: E402
from seq2onnx.runtime.serve.service import Settings  # noqa: E402
from seq2onnx.runtime.serve.cli import prepare  # noqa: E402

PROXY = "translate.example.org"
# small budgets, so that small requests reach them: 4 texts x 4 hypotheses x 200 steps reckon 208,896 answer bytes
LIMITS = ("--max-request-tokens", "4096", "--max-attention-values", "20000", "--max-answer-bytes", "200000")


def attention_request(words: int) -> dict:
    """An answer of 4 hypotheses x `words` steps x `words` + 1 source tokens of attention, ~20 bytes each."""
    return {"texts": [" ".join(["seven"] * words)], "beam_size": 4, "num_hypotheses": 4, "return_attention": True,
            "min_decoding_length": words, "max_decoding_length": words, "max_length_a": 0, "max_length_b": None}


# ~10 MB of answer; reckoned 13.9 MB held (answer 11.9 MB, attention 2.0 MB), and MEDIUM 2.6 MB
BIG, MEDIUM = attention_request(350), attention_request(150)
PENDING = ("--max-attention-values", "600000", "--max-answer-bytes", "14000000", "--max-pending-bytes", "15000000")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """No API keys (the Host check is on), a proxy's name allowed, small cost budgets."""
    s = Server(tmp_path_factory.mktemp("hardening"), "--allowed-hosts", PROXY, *LIMITS)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def translator() -> Translator:
    return Translator(MODEL)


def post(server: Server, path: str, body, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60, **kw)


# --- what a request may cost ------------------------------------------------------------------------------------
def test_the_unbounded_request_is_refused_under_the_default_flags(tmp_path):
    """64 hypotheses of 256 steps with their attention over 816 source words (bench/serve_memory.py's `unbounded`
    case; its cost: bench/results/serve-memory.md): refused up front by the default --max-attention-values."""
    body = {"texts": [" ".join(["seven"] * 816)], "beam_size": 64, "num_hypotheses": 64, "min_decoding_length": 256,
            "max_decoding_length": 256, "return_attention": True}
    default = Settings().max_attention_values
    s = Server(tmp_path)                                                # the default flags
    try:
        message = one_line_error(post(s, "/v1/translate", body), 400)
    finally:
        s.stop()
    assert "8,388,608 attention values" in message and f"at most {default:,} (--max-attention-values)" in message


@pytest.mark.parametrize("body, message", [
    ({"texts": ["seven"] * 8, "beam_size": 8, "max_decoding_length": 100, "max_length_a": 0, "max_length_b": None},
     "may decode 6,400 tokens (decoder rows x step limit); at most 4,096 (--max-request-tokens)"),
    ({"texts": [" ".join(["seven"] * 40)], "beam_size": 4, "return_attention": True, "max_decoding_length": 200,
      "max_length_a": 0, "max_length_b": None}, "keep 32,800 attention values"),
    ({"texts": [" ".join(["seven"] * 40)], "beam_size": 4, "return_alignment": True, "max_decoding_length": 200,
      "max_length_a": 0, "max_length_b": None}, "at most 20,000 (--max-attention-values)"),
    ({"texts": ["seven"] * 4, "beam_size": 4, "num_hypotheses": 4, "max_decoding_length": 200, "max_length_a": 0,
      "max_length_b": None}, "may take 208,896 bytes (hypotheses x steps); at most 200,000 (--max-answer-bytes)"),
])
def test_costly_requests_are_400_naming_the_flag(server, body, message):
    assert message in one_line_error(post(server, "/v1/translate", body), 400)


def test_sampling_without_a_beam_size_has_the_budget_of_beam_1(server):
    """Sampling with no beam_size decodes at beam 1 whatever the package's default beam (options.with_defaults): the
    request's cost is reckoned with the same rule, not skipped as an option translate_batch would refuse."""
    body = {"texts": ["seven"], "sampling_topk": 0, "num_hypotheses": 256, "max_decoding_length": 100000,
            "max_length_a": 0, "max_length_b": None}
    assert "(--max-request-tokens)" in one_line_error(post(server, "/v1/translate", body), 400)
    assert "(--max-request-tokens)" in one_line_error(post(server, "/v1/translate", {**body, "beam_size": 1}), 400)


def test_a_stream_has_the_same_budgets(server):
    body = {"text": "seven", "beam_size": 64, "max_decoding_length": 100, "max_length_a": 0, "max_length_b": None}
    assert "(--max-request-tokens)" in one_line_error(post(server, "/v1/translate/stream", body), 400)


def test_step_limits_come_from_the_source_length(server, translator):
    """The default max_length_a/b reckon a short text's steps from its own tokens: the budget that refuses
    200 steps of 4 x 4 hypotheses takes the same request at its relative limit, and answers it as translate_batch."""
    texts, options = ["seven", "twenty three", "one hundred", "nine"], {"beam_size": 4, "num_hypotheses": 4}
    r = post(server, "/v1/translate", {"texts": texts, **options})
    assert r.status_code == 200, r.text
    assert [x["hypotheses"] for x in r.json()["results"]] == [
        x.hypotheses for x in translator.translate_batch(texts, **options)]


def test_pending_bytes_are_held_until_the_answer_is_sent(tmp_path):
    """--max-pending-bytes: a request's reckoned cost counts until its answer has been sent. BIG's client reads only
    the first bytes of its ~10 MB answer, from a socket with a 4 kB receive buffer, so the server is still sending it
    (its send buffer holds at most net.ipv4.tcp_wmem's max, 4 MiB by default): MEDIUM is 429 with Retry-After, a
    small request passes; once BIG's client has read its answer, MEDIUM passes."""
    if int(Path("/proc/sys/net/ipv4/tcp_wmem").read_text().split()[2]) >= 8 << 20:
        pytest.skip("this machine's TCP send buffers could hold BIG's whole answer")
    s = Server(tmp_path, *PENDING)
    try:
        body = json.dumps(BIG).encode()
        with socket.socket() as held:
            held.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            held.connect(("127.0.0.1", s.port))
            held.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            held.settimeout(120)
            assert held.recv(12) == b"HTTP/1.1 200"                 # the server is sending the answer
            full = post(s, "/v1/translate", MEDIUM)
            assert "(--max-pending-bytes); retry after 1 s" in one_line_error(full, 429)
            assert full.headers["retry-after"] == "1"
            assert post(s, "/v1/translate", {"texts": ["seven"]}).status_code == 200
            answer = _read_answer(held, b"HTTP/1.1 200")
            assert len(json.loads(answer)["results"][0]["attention"]) == 4
        assert post(s, "/v1/translate", MEDIUM).status_code == 200
    finally:
        s.stop()


def _read_answer(sock: socket.socket, start: bytes) -> bytes:
    """The rest of an HTTP response whose first bytes (`start`) were read: its body, by its Content-Length."""
    data = bytearray(start)
    while b"\r\n\r\n" not in data:
        data += sock.recv(1 << 16)
    head, _, rest = bytes(data).partition(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    body = bytearray(rest)
    while len(body) < length:
        body += sock.recv(1 << 20)
    return bytes(body)


# --- Host ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("host, status", [
    ("evil.example:{port}", 421), ("evil.example", 421), ("localhost.evil.example:{port}", 421),
    ("localhost:{port}", 200), ("LOCALHOST.:{port}", 200), ("127.0.0.1:{port}", 200), ("[::1]:{port}", 200),
    ("10.1.2.3", 200), (f"{PROXY}:443", 200),
])
def test_host_names_answered_without_api_keys(server, host, status):
    r = httpx.get(server.url + "/v1/models", headers={"host": host.format(port=server.port)}, timeout=10)
    if status == 421:
        assert "add the name with --allowed-hosts, or set --api-keys" in one_line_error(r, 421)
    assert r.status_code == status


def test_host_rule_from_the_command_line(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k\n")
    assert prepare([MODEL, "--api-keys", str(keys)])[1].allowed_hosts is None          # keys: any host
    assert prepare([MODEL, "--allowed-hosts", "*"])[1].allowed_hosts is None
    named = prepare([MODEL, "--host", "MyBox.lan", "--allowed-hosts", "a.example,b.example"])[1].allowed_hosts
    assert named == {"localhost", "mybox.lan", "a.example", "b.example"}


# --- every error JSON -----------------------------------------------------------------------------------------------
def test_starlette_refusals_are_json(server):
    get = httpx.get(server.url + "/translate", timeout=10)
    assert one_line_error(get, 405) == "Method Not Allowed" and get.headers["allow"] == "POST"
    assert one_line_error(httpx.get(server.url + "/no/such/route", timeout=10), 404) == "Not Found"


@pytest.mark.parametrize("content, content_type, message", [
    ("&".join(f"f{i}=1" for i in range(1500)), "application/x-www-form-urlencoded", "Too many fields"),
    ("--x\r\nContent-Disposition: form-data; name=q\r\n\r\nseven\r\n--x--\r\n", "multipart/form-data",
     "Missing boundary in multipart"),
    ('{"q": "seven", "source": "en", "target": "de", "alternatives": Infinity}', "application/json",
     "Infinity is not a JSON value"),
    ('{"q": "seven", "source": "en", "target": "de", "alternatives": 1e999}', "application/json",
     "alternatives parameter is not a number"),
])
def test_client_faults_are_400(server, content, content_type, message):
    r = httpx.post(server.url + "/translate", content=content, headers={"content-type": content_type}, timeout=10)
    assert message in one_line_error(r, 400)


def test_v1_nan_is_400(server):
    r = httpx.post(server.url + "/v1/translate", content=b'{"texts": ["x"], "length_penalty": NaN}', timeout=10)
    assert "NaN is not a JSON value" in one_line_error(r, 400)


# --- the log ----------------------------------------------------------------------------------------------------------
def test_warnings_are_one_line_of_the_log(server):
    r = post(server, "/v1/translate", {"texts": [" ".join(["seven"] * 600)], "max_decoding_length": 4})
    assert r.status_code == 200 and r.json()["results"][0]["truncated"]
    lines = [line for line in server.output().splitlines() if "input 0 has" in line]
    assert lines == ["seq2onnx serve: OptionWarning: input 0 has 601 tokens (EOS included); truncated to "
                     "max_input_length=512"], server.output()
    assert ".py:" not in server.output() and "warnings.warn" not in server.output()


def test_routes_answer_503_until_the_models_are_loaded():
    """While the models load, LibreTranslate's routes know no language yet: 503 (try again), never a 400 saying the
    language is not supported (a client would give up on a pair the server serves a moment later)."""
    import threading

    from starlette.testclient import TestClient

    from seq2onnx.runtime.serve.app import create_app

    release = threading.Event()

    def load():
        release.wait(60)
        return {}

    app = create_app({}, Settings(), load=load)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        try:
            for method, path, body in (("POST", "/translate", {"q": "seven", "source": "en", "target": "de"}),
                                       ("GET", "/languages", None), ("POST", "/detect", {"q": "seven"}),
                                       ("GET", "/frontend/settings", None),
                                       ("POST", "/v1/translate", {"texts": ["seven"]})):
                r = client.request(method, path, json=body)
                assert r.status_code == 503, (path, r.status_code, r.text)
                assert "loading" in r.json()["error"]
        finally:
            release.set()
