"""What the routes of `seq2onnx serve` share (app.py: /v1, health, metrics and the app; libretranslate.py:
LibreTranslate's routes; files.py: its file routes): the settings, the Service over the schedulers (admission,
API keys, a request's cost), the errors as JSON answers, and `endpoint`, which every route is written with.
"""
from __future__ import annotations

import asyncio
import dataclasses
import hmac
import ipaddress
import json
import logging
import os
from concurrent.futures import Future
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple, Union

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from ..decode.decoding import step_limits
from ..errors import Seq2OnnxError, printable
from ..options import DecodingOptions, OptionError, TranslationOptions, with_defaults
from ..text_input import token_ids
from ..translator import SURROGATE, Translator
from .metrics import Metrics
from .scheduler import (RETRY_AFTER_RANGE, SCORE, Cancelled, Closed, DeadlineExceeded, Job, QueueFull, Records,
                        Schedules, record_rows)

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


def error_response(status: int, message: str, headers: Optional[Mapping[str, str]] = None) -> JSONResponse:
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


def request_cost(translator: Translator, kind: str, texts: Sequence[str], options: Dict[str, Any]) -> Cost:
    """The most a job may cost, from the limits it decodes under: per text, its source tokens (EOS included, at most
    max_input_length) and its step limit (decoding.step_limits: max_decoding_length, max_length_a x source tokens +
    max_length_b, max_positions). A score job answers one log-prob per target token."""
    config = translator.config
    if kind == SCORE:
        return Cost(0, 0, len(texts) * (config.max_positions * ANSWER_BYTES_PER_TOKEN + ANSWER_BYTES_PER_HYPOTHESIS))
    given = with_defaults(options, translator.package.generation)     # the options translate_batch decodes with
    try:
        decoding = DecodingOptions.from_kwargs(**{k: v for k, v in given.items() if k in DECODING_FIELDS})
    except (OptionError, TypeError, ValueError):
        return Cost(0, 0, 0)                    # translate_batch refuses it before any work
    limit = given.get("max_input_length")
    if type(limit) is not int or not 1 <= limit <= config.max_positions:
        limit = config.max_positions            # translate_batch refuses a bad one
    attention = decoding.return_attention or given.get("return_alignment") is True   # alignment is read from it
    return decoding_cost(translator, texts, decoding, limit, attention)


def records_cost(translator: Translator, texts: Sequence[str], call: TranslationOptions,
                 decoding: DecodingOptions) -> Cost:
    """request_cost of a translation whose options are records (Translator.check_options')."""
    limit = translator.config.max_positions if call.max_input_length is None else call.max_input_length
    return decoding_cost(translator, texts, decoding, limit, decoding.return_attention or call.return_alignment)


def decoding_cost(translator: Translator, texts: Sequence[str], decoding: DecodingOptions, limit: int,
                  attention: bool) -> Cost:
    """request_cost of texts cut to `limit` source tokens, decoded with `decoding` (attention: kept for
    return_attention or return_alignment)."""
    config = translator.config
    texts = [SURROGATE.sub("\ufffd", t) for t in texts]        # as translate_batch reads them (with a warning)
    lengths = [min(limit, len(ids) + 1) for ids in token_ids(translator.tokenizer, texts, limit)[0]]
    steps = [int(s) for s in step_limits([range(n) for n in lengths], decoding, config)]
    rows, hypotheses = max(decoding.beam_size, decoding.num_hypotheses), decoding.num_hypotheses
    per_token = ANSWER_BYTES_PER_TOKEN
    answer = sum(hypotheses * (s * (per_token + (n * ANSWER_BYTES_PER_VALUE if decoding.return_attention else 0))
                               + ANSWER_BYTES_PER_HYPOTHESIS) for s, n in zip(steps, lengths))
    values = sum(rows * s * n for s, n in zip(steps, lengths)) if attention else 0
    return Cost(rows * sum(steps), values, answer)


@dataclasses.dataclass(frozen=True)
class Pair:
    """How one (source, target) of LibreTranslate's is translated: which model, with which translate_batch
    languages (None: the package records none, and needs none)."""
    model: str
    source_lang: Optional[str]
    target_lang: Optional[str]


class Service:
    """What the routes share: the schedulers by model name, the settings, the metrics, readiness."""

    def __init__(self, schedulers: Dict[str, Schedules], settings: Settings):
        self.schedulers = schedulers
        self.settings = settings
        self.pending_bytes = 0                  # Cost.held_bytes of the requests admitted and not yet answered
        self.metrics = Metrics(schedulers)
        self.ready = False
        self.load_error: Optional[str] = None
        self.languages: Dict[Tuple[str, str], Pair] = {}    # (source, target) -> its model and codes

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

    def scheduler(self, name: Any) -> Tuple[str, Schedules]:
        self.check_ready()
        if name is None and len(self.schedulers) == 1:
            return next(iter(self.schedulers.items()))
        if not isinstance(name, str) or name not in self.schedulers:
            raise HTTPError(400, f"model must be one of {', '.join(sorted(self.schedulers))}, got {name!r}")
        return name, self.schedulers[name]

    # --- jobs --------------------------------------------------------------------------------------------
    def submit(self, request: Request, scheduler: Schedules, kind: str, texts: List[str], options: Dict[str, Any],
               targets: Optional[List[str]] = None, on_text: Optional[Callable[[str], object]] = None,
               records: Optional[Records] = None) -> Job:
        """Queue a job within the request limits; what it may hold counts in pending_bytes until its answer has
        been sent (PendingBytes). A translation whose options are records (check_options') gives them as
        `records` (options: {})."""
        limits = self.settings
        rows = scheduler.rows_of(texts, options) if records is None else record_rows(texts, records[1])
        if rows > limits.max_request_rows:
            raise HTTPError(400, f"the request takes {rows} decoder rows (texts x max(beam_size, num_hypotheses)); "
                                 f"at most {limits.max_request_rows} (--max-request-rows)")
        cost = (request_cost(scheduler.translator, kind, texts, options) if records is None
                else records_cost(scheduler.translator, texts, *records))
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
            job = scheduler.submit(kind, texts, options, targets=targets, on_text=on_text, timeout=limits.timeout,
                                   records=records)
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
        return not name or is_ip(name) or name in allowed

    async def run(self, request: Request, model: str, scheduler: Schedules, kind: str, texts: List[str],
                  options: Dict[str, Any], targets: Optional[List[str]] = None,
                  records: Optional[Records] = None) -> List[Any]:
        """Submit a job and await its results; a client that disconnects cancels it, its deadline answers 504."""
        job = self.submit(request, scheduler, kind, texts, options, targets, records=records)
        future = asyncio.wrap_future(job.future)
        future.add_done_callback(_consume)
        gone = asyncio.ensure_future(_disconnected(request))
        waiting: Set["asyncio.Future[Any]"] = {future, gone}
        try:
            done, _ = await asyncio.wait(waiting, timeout=self.settings.timeout,
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


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def job_result(future: Union[Future[List[Any]], asyncio.Future[List[Any]]]) -> List[Any]:
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

