"""The HTTP front of `seq2onnx serve`: a Starlette app over one Scheduler per model.

Routes: LibreTranslate's POST /translate and /detect, GET /languages and /frontend/settings (libretranslate.py),
POST /translate_file and GET /download_file/NAME (files.py); our POST /v1/translate, /v1/translate/stream
(Server-Sent Events), /v1/score and GET /v1/models; GET /health, /ready, /metrics.
Every error is {"error": "<one line>"} with its status: 400 bad input (a limit: the flag that sets it), 403 API key,
404 no such route, 405 wrong method, 413 body too large, 421 a Host this server does not answer, 429 queue or
--max-pending-bytes full (Retry-After), 503 shutting down or not ready, 504 deadline, 500 anything else.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hmac
import ipaddress
import json
import logging
import os
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from sse_starlette import EventSourceResponse
from sse_starlette.sse import AppStatus
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..cli import printable
from ..decoding import step_limits
from ..errors import Seq2OnnxError
from ..option_table import json_schema, request_options
from ..options import DecodingOptions, OptionError
from ..text_input import token_ids
from ..translator import _SURROGATE
from .metrics import Metrics
from .scheduler import (RETRY_AFTER_RANGE, SCORE, STREAM, TRANSLATE, Cancelled, Closed, DeadlineExceeded, Job,
                        QueueFull, Scheduler)

log = logging.getLogger("seq2onnx.serve")
PENDING_KEY = "seq2onnx.pending_bytes"          # a request's ASGI scope: the bytes it holds of pending_bytes

# the fields of /v1 requests that are not translate_batch / score_batch options
V1_FIELDS = ("model", "texts", "stream", "api_key")
DECODING_FIELDS = frozenset(f.name for f in dataclasses.fields(DecodingOptions))
# What a request may cost, reckoned before it is queued from the limits it decodes under (its step limits and source
# tokens, not what it will produce), in bytes of the JSON answer: per hypothesis token (its text, its id, its
# alignment pair), per attention value (a float as json writes it: at most 22 characters and a comma), and per
# hypothesis (its scores and flags); and per attention value a decoder row holds while it decodes (float32).
ANSWER_BYTES_PER_TOKEN = 64
ANSWER_BYTES_PER_VALUE = 24
ANSWER_BYTES_PER_HYPOTHESIS = 256
ATTENTION_VALUE_BYTES = 4
ANSWER_PIECE_BYTES = 1 << 16            # uvicorn's high-water mark: a slow client is waited for after each
# the Host names a server without API keys answers besides IP addresses and the name it binds (web/demo/server.js)
LOCAL_NAMES = ("localhost",)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The server's limits (flags of `seq2onnx serve`, LibreTranslate's names where it has them)."""
    char_limit: int = 5000                  # characters per text (LibreTranslate --char-limit)
    batch_limit: int = 64                   # texts per request (LibreTranslate --batch-limit)
    alternatives_limit: int = 3             # LibreTranslate --alternatives-limit
    max_body_bytes: int = 1 << 20           # a request body past it: 413
    max_request_rows: int = 1024            # decoder rows one request may take: texts x max(beam, n-best)
    max_request_tokens: int = 1 << 16       # decoder rows x step limit: the cache one request may fill (request_cost)
    max_attention_values: int = 1 << 20     # rows x steps x source tokens of a request's attention (request_cost)
    max_answer_bytes: int = 16 << 20        # a request's answer, reckoned up front (request_cost)
    max_pending_bytes: int = 64 << 20       # every admitted request's answer and attention until it is sent: 429
    allowed_hosts: Optional[FrozenSet[str]] = None   # Host names answered besides IP addresses; None: any (421)
    timeout: float = 60.0                   # seconds a request may take (504)
    api_keys: Optional[FrozenSet[str]] = None   # None: no key needed
    languages: Dict[str, Tuple[str, str]] = dataclasses.field(default_factory=dict)  # model -> (source, target)
    max_file_bytes: int = 10 << 20          # a /translate_file upload (runtime/serve/files.py): 413
    max_file_chars: int = 100_000           # characters of text in one file
    file_store_bytes: int = 256 << 20       # the translated files kept for /download_file, in all: 429
    file_ttl: float = 1800.0                # seconds a translated file is kept (LibreTranslate's 30 minutes)


class HTTPError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[Dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class ClientGone(Exception):
    """The client disconnected while its job was queued or running (the job is cancelled)."""


class BodyTooLarge(Exception):
    pass


class Answer(JSONResponse):
    """A JSON answer sent in pieces: uvicorn waits for a slow client before each (its flow control), so a request
    holds its part of --max-pending-bytes (PendingBytes) until its client has read all but the last piece; one
    piece would be handed to the transport's buffer whole, and the request counted as answered at once."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        body = memoryview(self.body)
        for start in range(0, len(body), ANSWER_PIECE_BYTES):
            await send({"type": "http.response.body", "body": bytes(body[start:start + ANSWER_PIECE_BYTES]),
                        "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def error_response(status: int, message: str, headers: Optional[Dict[str, str]] = None) -> JSONResponse:
    return JSONResponse({"error": printable(message)}, status, headers)


@dataclasses.dataclass(frozen=True)
class Cost:
    """What one request may cost, reckoned before it is queued (request_cost)."""
    tokens: int                         # decoder rows x step limit: the self-attention cache it may fill
    attention_values: int               # rows x steps x source tokens, when it keeps attention
    answer_bytes: int                   # its JSON answer, at most

    @property
    def held_bytes(self) -> int:
        """What it holds until its answer is sent: the answer, and its rows' attention while they decode."""
        return self.answer_bytes + ATTENTION_VALUE_BYTES * self.attention_values


def request_cost(translator: Any, kind: str, texts: Sequence[str], options: Dict[str, Any]) -> Cost:
    """The most a job may cost, from the limits it decodes under: per text, its source tokens (EOS included, at most
    max_input_length) and its step limit (decoding.step_limits: max_decoding_length, max_length_a x source tokens +
    max_length_b, max_positions). A score job answers one log-prob per target token."""
    config = translator.config
    if kind == SCORE:
        return Cost(0, 0, len(texts) * (config.max_positions * ANSWER_BYTES_PER_TOKEN + ANSWER_BYTES_PER_HYPOTHESIS))
    given = {**translator.package.generation, **options}
    try:
        decoding = DecodingOptions.from_kwargs(**{k: v for k, v in given.items() if k in DECODING_FIELDS})
    except (OptionError, TypeError, ValueError):
        return Cost(0, 0, 0)                    # translate_batch refuses it before any work
    limit = given.get("max_input_length")
    if type(limit) is not int or not 1 <= limit <= config.max_positions:
        limit = config.max_positions            # translate_batch refuses a bad one
    attention = decoding.return_attention or given.get("return_alignment") is True   # alignment is read from it
    texts = [_SURROGATE.sub("\ufffd", t) for t in texts]        # as translate_batch reads them (with a warning)
    lengths = [min(limit, len(ids) + 1) for ids in token_ids(translator._tokenizer, texts, limit)[0]]
    steps = [int(s) for s in step_limits([range(n) for n in lengths], decoding, config)]
    rows, hypotheses = max(decoding.beam_size, decoding.num_hypotheses), decoding.num_hypotheses
    per_token = ANSWER_BYTES_PER_TOKEN
    answer = sum(hypotheses * (s * (per_token + (n * ANSWER_BYTES_PER_VALUE if decoding.return_attention else 0))
                               + ANSWER_BYTES_PER_HYPOTHESIS) for s, n in zip(steps, lengths))
    values = sum(rows * s * n for s, n in zip(steps, lengths)) if attention else 0
    return Cost(rows * sum(steps), values, answer)


class Service:
    """What the routes share: the schedulers by model name, the settings, the metrics, readiness."""

    def __init__(self, schedulers: Dict[str, Scheduler], settings: Settings):
        self.schedulers = schedulers
        self.settings = settings
        self.pending_bytes = 0                  # Cost.held_bytes of the requests admitted and not yet answered
        self.metrics = Metrics(schedulers)
        self.ready = False
        self.load_error: Optional[str] = None
        self.languages: Dict[Tuple[str, str], Any] = {}     # (source, target) -> libretranslate.Pair

    # --- checks ------------------------------------------------------------------------------------------
    def check_key(self, key: Any) -> None:
        keys = self.settings.api_keys
        if keys is None:
            return
        if not isinstance(key, str) or not key:
            raise HTTPError(403, "this server needs an API key: send api_key")
        if not any(hmac.compare_digest(key.encode("utf-8", "replace"), k.encode()) for k in keys):
            raise HTTPError(403, "Invalid API key")

    def check_texts(self, texts: Any, name: str) -> List[str]:
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise HTTPError(400, f"{name} must be a list of strings")
        limit = self.settings.batch_limit
        if len(texts) > limit:
            raise HTTPError(400, f"Invalid request: request ({len(texts)}) exceeds text limit ({limit})")
        for text in texts:
            if len(text) > self.settings.char_limit:
                raise HTTPError(400, f"Invalid request: request ({len(text)}) exceeds text limit "
                                     f"({self.settings.char_limit})")
        return texts

    def check_ready(self) -> None:
        """503 until the models are loaded: before that no route can tell a model or a language that exists from
        one that does not."""
        if not self.ready:
            raise HTTPError(503, self.load_error or "the models are loading; try again shortly")

    def scheduler(self, name: Any) -> Tuple[str, Scheduler]:
        self.check_ready()
        if name is None and len(self.schedulers) == 1:
            return next(iter(self.schedulers.items()))
        if not isinstance(name, str) or name not in self.schedulers:
            raise HTTPError(400, f"model must be one of {', '.join(sorted(self.schedulers))}, got {name!r}")
        return name, self.schedulers[name]

    # --- jobs --------------------------------------------------------------------------------------------
    def submit(self, request: Request, scheduler: Scheduler, kind: str, texts: List[str], options: Dict[str, Any],
               targets: Optional[List[str]] = None, on_text: Optional[Callable[[str], None]] = None) -> Job:
        """Queue a job within the request limits; what it may hold counts in pending_bytes until its answer has
        been sent (PendingBytes)."""
        limits = self.settings
        rows = scheduler.rows_of(texts, options)
        if rows > limits.max_request_rows:
            raise HTTPError(400, f"the request takes {rows} decoder rows (texts x max(beam_size, num_hypotheses)); "
                                 f"at most {limits.max_request_rows} (--max-request-rows)")
        cost = request_cost(scheduler.translator, kind, texts, options)
        if cost.tokens > limits.max_request_tokens:
            raise HTTPError(400, f"the request may decode {cost.tokens:,} tokens (decoder rows x step limit); at most "
                                 f"{limits.max_request_tokens:,} (--max-request-tokens): send fewer texts, or a "
                                 f"smaller beam_size or max_decoding_length")
        if cost.attention_values > limits.max_attention_values:
            raise HTTPError(400, f"the request may keep {cost.attention_values:,} attention values (decoder rows x "
                                 f"steps x source tokens, for return_attention or return_alignment); at most "
                                 f"{limits.max_attention_values:,} (--max-attention-values): send fewer or shorter "
                                 f"texts, or a smaller beam_size or max_decoding_length")
        if cost.answer_bytes > limits.max_answer_bytes:
            raise HTTPError(400, f"the answer may take {cost.answer_bytes:,} bytes (hypotheses x steps"
                                 f"{' x source tokens' if cost.attention_values else ''}); at most "
                                 f"{limits.max_answer_bytes:,} (--max-answer-bytes): send fewer texts, or a smaller "
                                 f"num_hypotheses or max_decoding_length")
        held = cost.held_bytes
        if held > limits.max_pending_bytes:
            raise HTTPError(400, f"the request may hold {held:,} bytes (its answer and its attention); at most "
                                 f"{limits.max_pending_bytes:,} (--max-pending-bytes)")
        if self.pending_bytes + held > limits.max_pending_bytes:
            raise HTTPError(429, f"Slowdown: the requests in progress may hold {self.pending_bytes:,} bytes, this one "
                                 f"{held:,}, of {limits.max_pending_bytes:,} (--max-pending-bytes); retry after "
                                 f"{RETRY_AFTER_RANGE[0]} s", {"Retry-After": str(RETRY_AFTER_RANGE[0])})
        try:
            job = scheduler.submit(kind, texts, options, targets=targets, on_text=on_text, timeout=limits.timeout)
        except QueueFull as e:
            raise HTTPError(429, f"Slowdown: {e}", {"Retry-After": str(e.retry_after)}) from None
        except Closed as e:
            raise HTTPError(503, str(e)) from None
        self.pending_bytes += held
        request.scope[PENDING_KEY] = request.scope.get(PENDING_KEY, 0) + held
        return job

    def host_allowed(self, host: str) -> bool:
        """A Host header this server answers: any with allowed_hosts None (API keys set), else an IP address
        (a page whose DNS name is rebound to this server sends its name, never an address) or an allowed name.
        The port is not compared: a rebinding page picks the server's port for its own."""
        allowed = self.settings.allowed_hosts
        if allowed is None:
            return True
        name = host_name(host)
        # no Host (HTTP/1.0): not a browser's request
        return not name or _is_ip(name) or name in allowed

    async def run(self, request: Request, model: str, scheduler: Scheduler, kind: str, texts: List[str],
                  options: Dict[str, Any], targets: Optional[List[str]] = None) -> List[Any]:
        """Submit a job and await its results; a client that disconnects cancels it, its deadline answers 504."""
        job = self.submit(request, scheduler, kind, texts, options, targets)
        future = asyncio.wrap_future(job.future)
        future.add_done_callback(_consume)
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({future, gone}, timeout=self.settings.timeout,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if future not in done:
            job.cancel()
            if gone in done:
                raise ClientGone()
            raise HTTPError(504, f"the request took longer than {self.settings.timeout:g} s")
        self.metrics.observe_job(model, job)
        return job_result(future)


def host_name(host: str) -> str:
    """A Host header's name, lower case, without its port, the brackets of an IPv6 address or a final dot."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1:name.find("]")]
    elif ":" in name:
        name = name.rpartition(":")[0]
    return name.rstrip(".")


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def job_result(future: Any) -> List[Any]:
    """A resolved job's results (its asyncio or concurrent future), its failure as an HTTPError."""
    try:
        return future.result()
    except DeadlineExceeded as e:
        raise HTTPError(504, str(e)) from None
    except Cancelled as e:
        raise ClientGone() from e
    except Closed as e:
        raise HTTPError(503, str(e)) from None
    except (Seq2OnnxError, ValueError, TypeError) as e:      # OptionError and friends: the request's fault
        raise HTTPError(400, str(e)) from None


def _consume(future: "asyncio.Future[Any]") -> None:
    """Mark a job's exception retrieved (a cancelled or abandoned job is not an asyncio warning)."""
    if not future.cancelled():
        future.exception()


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body was read: the next ASGI message is the disconnect)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def result_dict(result: Any) -> Dict[str, Any]:
    return dataclasses.asdict(result)


# --- request bodies ------------------------------------------------------------------------------------------
async def json_object(request: Request) -> Dict[str, Any]:
    body = await request.body()
    try:
        value = json.loads(body, parse_constant=_not_json)
    except (ValueError, RecursionError) as e:
        raise HTTPError(400, f"the body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise HTTPError(400, f"the body must be a JSON object, got {type(value).__name__}")
    return value


def _not_json(name: str) -> None:
    """NaN, Infinity and -Infinity, which Python's json reads and JSON (RFC 8259) does not have."""
    raise ValueError(f"{name} is not a JSON value")


def endpoint(route: Callable[[Request], Any]) -> Callable[[Request], Any]:
    """A route whose every failure is one JSON line: HTTPError as it says, a bad body 400/413, the rest 500."""

    async def wrapped(request: Request) -> Response:
        try:
            return await route(request)
        except HTTPError as e:
            return error_response(e.status, e.message, e.headers)
        except StarletteHTTPException as e:                     # Starlette's form parser: too many fields, ...
            return error_response(e.status_code, str(e.detail), e.headers)
        except BodyTooLarge as e:
            return error_response(413, f"the request body is larger than {e.args[0]} bytes")
        except (ClientGone, ClientDisconnect):
            return Response(status_code=499)                     # nobody reads it (nginx's "client closed")
        except Exception as e:  # noqa: BLE001 - the server's promise: no tracebacks to the client
            if os.environ.get("SEQ2ONNX_DEBUG"):
                log.exception("seq2onnx serve: %s", request.url.path)
            else:
                log.error("seq2onnx serve: %s: %s: %s", request.url.path, type(e).__name__, printable(str(e)))
            return error_response(500, f"internal error: {type(e).__name__}: {e}")

    wrapped.__name__ = route.__name__
    return wrapped


# --- /v1 -----------------------------------------------------------------------------------------------------
def v1_options(body: Dict[str, Any]) -> Dict[str, Any]:
    """A /v1/score body's score_batch options: every field but V1_FIELDS (score_batch refuses an unknown one)."""
    return {k: v for k, v in body.items() if k not in V1_FIELDS}


def translate_options(body: Dict[str, Any], scheduler: Scheduler, own: Tuple[str, ...] = ()) -> Dict[str, Any]:
    """A /v1 body's translate_batch options, read and type-checked by the one options table (option_table.py) over
    the model's generation defaults; a bad one is a 400 naming it."""
    try:
        return request_options(body, scheduler.translator.package.generation, own=V1_FIELDS + own)
    except OptionError as e:
        raise HTTPError(400, str(e)) from None


@endpoint
async def v1_translate(request: Request) -> Response:
    service: Service = request.app.state.service
    body = await json_object(request)
    service.check_key(body.get("api_key") or _bearer(request))
    if body.get("stream") is True:
        return await _stream(request, service, body)
    if "stream" in body and body["stream"] is not False:
        raise HTTPError(400, f"stream must be true or false, got {body['stream']!r}")
    name, scheduler = service.scheduler(body.get("model"))
    texts = service.check_texts(body.get("texts"), "texts")
    results = await service.run(request, name, scheduler, TRANSLATE, texts, translate_options(body, scheduler))
    return Answer({"model": name, "results": [result_dict(r) for r in results]})


@endpoint
async def v1_translate_stream(request: Request) -> Response:
    service: Service = request.app.state.service
    body = await json_object(request)
    service.check_key(body.get("api_key") or _bearer(request))
    return await _stream(request, service, body)


async def _stream(request: Request, service: Service, body: Dict[str, Any]) -> Response:
    """One text's translation as Server-Sent Events: `piece` events ({"text": ...}) as the decoder commits them,
    then one `result` event (the TranslationResult's fields); a failure after the first piece is an `error`
    event. A failure before it (bad options, full queue) is an ordinary JSON error with its status."""
    name, scheduler = service.scheduler(body.get("model"))
    texts = body.get("texts", [body["text"]] if "text" in body else None)
    texts = service.check_texts(texts, "texts")
    if len(texts) != 1:
        raise HTTPError(400, f"a stream translates one text: send text, or texts with one entry (got {len(texts)})")
    loop = asyncio.get_running_loop()
    events: "asyncio.Queue[Tuple[str, Any]]" = asyncio.Queue()
    options = translate_options(body, scheduler, own=("text",))
    job = service.submit(request, scheduler, STREAM, texts, options,
                         on_text=lambda piece: loop.call_soon_threadsafe(events.put_nowait, ("piece", piece)))
    job.future.add_done_callback(lambda f: loop.call_soon_threadsafe(events.put_nowait, ("done", None)))
    deadline = loop.time() + service.settings.timeout

    async def next_event() -> Tuple[str, Any]:
        try:
            return await asyncio.wait_for(events.get(), timeout=max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            job.cancel()
            raise HTTPError(504, f"the request took longer than {service.settings.timeout:g} s") from None

    first = await next_event()           # before the headers: a job that fails at once gets its own status
    if first[0] == "done":               # no piece: a blank text, or a failure
        result = job_result(job.future)[0]
        service.metrics.observe_job(name, job)
        return EventSourceResponse(_one({"event": "result", "data": json.dumps(result_dict(result))}), ping=15)

    async def generate() -> AsyncIterator[Dict[str, Any]]:
        try:
            event = first
            while event[0] == "piece":
                yield {"event": "piece", "data": json.dumps({"text": event[1]})}
                event = await next_event()
            error = job.future.exception()
            if error is None:
                service.metrics.observe_job(name, job)
                yield {"event": "result", "data": json.dumps(result_dict(job.future.result()[0]))}
            else:
                yield {"event": "error", "data": json.dumps({"error": printable(str(error))})}
        except HTTPError as e:                                  # the deadline
            yield {"event": "error", "data": json.dumps({"error": e.message})}
        finally:
            if not job.future.done():
                job.cancel()                                    # the client went away: drop its rows

    return EventSourceResponse(generate(), ping=15)


async def _one(event: Dict[str, Any]) -> AsyncIterator[Dict[str, Any]]:
    yield event


@endpoint
async def v1_score(request: Request) -> Response:
    service: Service = request.app.state.service
    body = await json_object(request)
    service.check_key(body.get("api_key") or _bearer(request))
    name, scheduler = service.scheduler(body.get("model"))
    sources = service.check_texts(body.get("sources"), "sources")
    targets = service.check_texts(body.get("targets"), "targets")
    options = {k: v for k, v in v1_options(body).items() if k not in ("sources", "targets")}
    results = await service.run(request, name, scheduler, SCORE, sources, options, targets)
    return Answer({"model": name, "results": [result_dict(r) for r in results]})


@endpoint
async def v1_options_schema(request: Request) -> Response:
    """GET /v1/options[?model=NAME]: the options a /v1 request may set, as a JSON Schema (option_table.json_schema),
    with the model's generation defaults."""
    service: Service = request.app.state.service
    name, scheduler = service.scheduler(request.query_params.get("model"))
    return JSONResponse({"model": name, **json_schema(scheduler.translator.package.generation)})


@endpoint
async def v1_models(request: Request) -> Response:
    service: Service = request.app.state.service
    models = []
    for name, scheduler in service.schedulers.items():
        t = scheduler.translator
        pairs = sorted(pair for pair, p in service.languages.items() if p.model == name)
        models.append({"name": name, "variant": t.variant, "device": t.device, "batching": scheduler.policy,
                       "languages": [{"source": s, "target": g} for s, g in pairs]})
    return JSONResponse({"models": models, "ready": service.ready})


def _bearer(request: Request) -> Optional[str]:
    auth = request.headers.get("authorization", "")
    return auth[7:] if auth.lower().startswith("bearer ") else None


# --- health ----------------------------------------------------------------------------------------------------
async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def ready(request: Request) -> Response:
    service: Service = request.app.state.service
    if service.ready:
        return JSONResponse({"status": "ready", "models": sorted(service.schedulers)})
    return error_response(503, service.load_error or "the models are loading")


async def metrics(request: Request) -> Response:
    body, content_type = request.app.state.service.metrics.render()
    return Response(body, media_type=content_type)


# --- middleware (pure ASGI: they neither buffer bodies nor run routes in another task) -----------------------
class BodyLimit:
    """A body past max_body_bytes (or its path's own limit, in `paths`): 413 from its Content-Length at once, else
    BodyTooLarge once read past it."""

    def __init__(self, app: ASGIApp, limit: int, paths: Optional[Dict[str, int]] = None):
        self.app, self.default, self.paths = app, limit, paths or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.paths.get(scope["path"], self.default)
        length = dict(scope["headers"]).get(b"content-length", b"0")
        if not length.isdigit() or int(length) > limit:
            response = error_response(413 if length.isdigit() else 400,
                                      f"the request body is larger than {limit} bytes" if length.isdigit()
                                      else "Content-Length is not a number")
            return await response(scope, receive, send)
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)
            return message

        await self.app(scope, limited, send)


class PendingBytes:
    """Gives back what a request held of Service.pending_bytes once its answer has been sent (or it failed)."""

    def __init__(self, app: ASGIApp, service: Service):
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            self.service.pending_bytes -= scope.get(PENDING_KEY, 0)


class AllowedHosts:
    """421 to a request whose Host the server does not answer (Service.host_allowed): DNS rebinding."""

    def __init__(self, app: ASGIApp, service: Service):
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if not self.service.host_allowed(host):
                names = ", ".join(sorted(n for n in self.service.settings.allowed_hosts or () if not _is_ip(n)))
                response = error_response(421, f"this server does not answer Host {host!r}; it answers IP addresses "
                                               f"and {names}: add the name with --allowed-hosts, or set --api-keys")
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


class RequestMetrics:
    """Each answered request counted by route (the app's paths; any other is "other") and status."""

    def __init__(self, app: ASGIApp, service: Service, routes: Sequence[str]):
        self.app, self.service, self.routes = app, service, set(routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.monotonic(), 500

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            route = scope["path"] if scope["path"] in self.routes else "other"
            self.service.metrics.observe_request(route, status, time.monotonic() - start)


# --- the app -------------------------------------------------------------------------------------------------
def create_app(schedulers: Dict[str, Scheduler], settings: Settings,
               load: Optional[Callable[[], Dict[str, Scheduler]]] = None,
               on_load_error: Optional[Callable[[str], None]] = None) -> Starlette:
    """The app over `schedulers` (model name -> Scheduler). With `load`, the schedulers come from it, run in a
    thread at startup: /health answers at once, /ready and the routes 503 until it returns (on its
    Seq2OnnxError: `on_load_error(message)`). On shutdown every scheduler finishes what it holds."""
    from .libretranslate import detect, frontend_settings, language_table, languages, translate
    from .files import ROUTES as FILE_ROUTES, body_limits

    service = Service(schedulers, settings)

    def loaded() -> None:
        service.languages = language_table({n: s.translator for n, s in schedulers.items()}, settings.languages)
        service.ready = True

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = None
        if load is not None:
            async def load_models() -> None:
                try:
                    schedulers.update(await asyncio.to_thread(load))
                    loaded()
                except Seq2OnnxError as e:
                    service.load_error = str(e)
                    if on_load_error is not None:
                        on_load_error(str(e))
            task = asyncio.ensure_future(load_models())
        else:
            loaded()
        try:
            yield
        finally:
            if task is not None:
                await task
            await asyncio.to_thread(drain, schedulers)

    routes = [
        Route("/translate", translate, methods=["POST"]),
        Route("/languages", languages, methods=["GET"]),
        Route("/detect", detect, methods=["POST"]),
        Route("/frontend/settings", frontend_settings, methods=["GET"]),
        *FILE_ROUTES,
        Route("/v1/translate", v1_translate, methods=["POST"]),
        Route("/v1/translate/stream", v1_translate_stream, methods=["POST"]),
        Route("/v1/score", v1_score, methods=["POST"]),
        Route("/v1/models", v1_models, methods=["GET"]),
        Route("/v1/options", v1_options_schema, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/ready", ready, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={StarletteHTTPException: _http_error})
    app.state.service = service
    # the last added runs first: metrics count every answer, a refused Host reads no body
    app.add_middleware(PendingBytes, service=service)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes, paths=body_limits(settings))
    app.add_middleware(AllowedHosts, service=service)
    app.add_middleware(RequestMetrics, service=service, routes=[r.path for r in routes])
    # streams end when their translation does, not at SIGTERM (sse-starlette's default cuts them): in-flight
    # requests finish, within uvicorn's graceful shutdown timeout
    AppStatus.disable_automatic_graceful_drain()
    return app


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (404 no such route, 405 wrong method with its Allow header) as our JSON errors."""
    assert isinstance(exc, StarletteHTTPException)
    return error_response(exc.status_code, str(exc.detail), exc.headers)


def stop_admitting(schedulers: Dict[str, Scheduler]) -> None:
    """SIGTERM: new jobs get 503 (Closed); queued and running ones finish."""
    for scheduler in schedulers.values():
        scheduler.close(drain=True, timeout=0)


def drain(schedulers: Dict[str, Scheduler]) -> None:
    for scheduler in schedulers.values():
        scheduler.close(drain=True)
