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
import json
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Dict, Optional, Sequence, Tuple

from sse_starlette import EventSourceResponse
from sse_starlette.sse import AppStatus
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import Seq2OnnxError, printable
from ..option_table import json_schema, request_options
from ..options import OptionError
from .files import ROUTES as FILE_ROUTES, body_limits
from .libretranslate import detect, frontend_settings, language_table, languages, translate
from .scheduler import SCORE, STREAM, TRANSLATE, Schedules
from .service import (PENDING_KEY, V1_FIELDS, Answer, BodyTooLarge, HTTPError, Service, Settings, endpoint,
                      error_response, is_ip, job_result, json_object, result_dict)


# --- /v1 -----------------------------------------------------------------------------------------------------
def v1_options(body: Dict[str, Any]) -> Dict[str, Any]:
    """A /v1/score body's score_batch options: every field but V1_FIELDS (score_batch refuses an unknown one)."""
    return {k: v for k, v in body.items() if k not in V1_FIELDS}


def translate_options(body: Dict[str, Any], scheduler: Schedules, own: Tuple[str, ...] = ()) -> Dict[str, Any]:
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
                names = ", ".join(sorted(n for n in self.service.settings.allowed_hosts or () if not is_ip(n)))
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
def create_app(schedulers: Dict[str, Schedules], settings: Settings,
               load: Optional[Callable[[], Dict[str, Schedules]]] = None,
               on_load_error: Optional[Callable[[str], None]] = None) -> Starlette:
    """The app over `schedulers` (model name -> Scheduler). With `load`, the schedulers come from it, run in a
    thread at startup: /health answers at once, /ready and the routes 503 until it returns (on its
    Seq2OnnxError: `on_load_error(message)`). On shutdown every scheduler finishes what it holds."""
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


def stop_admitting(schedulers: Dict[str, Schedules]) -> None:
    """SIGTERM: new jobs get 503 (Closed); queued and running ones finish."""
    for scheduler in schedulers.values():
        scheduler.close(drain=True, timeout=0)


def drain(schedulers: Dict[str, Schedules]) -> None:
    for scheduler in schedulers.values():
        scheduler.close(drain=True)
