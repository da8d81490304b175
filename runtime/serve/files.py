"""LibreTranslate's file routes (its server's libretranslate/app.py): POST /translate_file and GET /download_file.

- /translate_file: a multipart form with file, source, target and api_key (apiKey too, as /translate reads it);
  answers {"translatedFileUrl": "<this server>/download_file/<name>"}, the URL LibreTranslate's url_for gives.
  The file is translated by documents/files.py (.txt, .html, .srt, .docx, by its name's extension), its sentences
  as jobs of the scheduler like /translate's, each within the request limits (--max-request-rows, ...), one after
  another (a file's jobs queue behind other clients' requests, not before them). Errors as /translate's:
  {"error": ...} with 400 (a bad file, names the problem), 403, 413 (over --max-file-bytes), 429.
- /download_file/<name>: the translated file, as an attachment named as LibreTranslate names it
  (<original name>_<target>.<ext>). Files live in a store of this process's own (a private temporary folder),
  at most MAX_STORED_FILES and --file-store-bytes of them, each for --file-ttl seconds (LibreTranslate: 30
  minutes), under an unguessable name (128 random bits); a name the store does not hold is 404, and nothing outside
  it is ever read. A full store is 429 until its oldest file expires.
"""
from __future__ import annotations

import asyncio
import dataclasses
import mimetypes
import os
import re
import secrets
import shutil
import tempfile
import threading
import time
import unicodedata
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from ..documents.files import FileLimits, file_format, translate_file_bytes
from ..options import PER_TEXT, DecodingOptions, TranslationOptions
from .scheduler import TRANSLATE, Records, Schedules, record_rows
from .service import PENDING_KEY, HTTPError, Service, Settings, endpoint, records_cost
from .libretranslate import NPM_KEY_FIELD, pick_pair

TRANSLATE_FILE, DOWNLOAD_FILE = "/translate_file", "/download_file"
MAX_STORED_FILES = 1024
FILES_AT_ONCE = 4                   # files translated at once (a thread each); more: 429
FORM_BYTES = 64 << 10               # a /translate_file body's room for its other fields and the multipart framing
FORM_FIELDS = 8
LOOP_GRACE = 5.0                    # seconds past a job's deadline a file's thread waits for the event loop
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")
MAX_NAME_CHARS = 100


def body_limits(settings: Settings) -> Dict[str, int]:
    """The body limit of the routes whose bodies are files (app.BodyLimit's per-path limits)."""
    return {TRANSLATE_FILE: settings.max_file_bytes + FORM_BYTES}


def secure_name(name: str) -> str:
    """werkzeug's secure_filename, which LibreTranslate applies to an upload's name: accents dropped (NFKD, ASCII),
    white space as "_", then only letters, digits, ".", "_" and "-", no "." or "_" at either end."""
    name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    return _NAME_CHARS.sub("", "_".join(name.split())).strip("._")


def download_name(filename: str, target: str, ext: str) -> str:
    """LibreTranslate's name of a translated file: the upload's secure name (its folder dropped), "_<target>"
    before its extension."""
    stem = os.path.splitext(os.path.basename(filename.replace("\\", "/")))[0]
    return f"{secure_name(stem)[:MAX_NAME_CHARS] or 'file'}_{secure_name(target)[:20]}{ext}"


@dataclasses.dataclass
class _Stored:
    path: str
    name: str                       # the download's name
    size: int
    expires: float


class FileStore:
    """The translated files, bounded in number and bytes, each kept for `ttl` seconds, in a folder of its own
    (mode 0700) removed with it."""

    def __init__(self, max_bytes: int, ttl: float, max_files: int = MAX_STORED_FILES):
        self.max_bytes, self.ttl, self.max_files = max_bytes, ttl, max_files
        self.folder = tempfile.mkdtemp(prefix="seq2onnx-files-")
        self._files: Dict[str, _Stored] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.translating = 0                            # files being translated now (FILES_AT_ONCE)
        self.executor = ThreadPoolExecutor(FILES_AT_ONCE, thread_name_prefix="seq2onnx-file")
        weakref.finalize(self, shutil.rmtree, self.folder, True)

    def _expire(self, now: float) -> None:
        for key in [k for k, f in self._files.items() if f.expires <= now]:
            self._drop(key)

    def _drop(self, key: str) -> None:
        stored = self._files.pop(key)
        self._bytes -= stored.size
        try:
            os.unlink(stored.path)
        except FileNotFoundError:
            pass

    def put(self, data: bytes, name: str) -> str:
        """Keep `data` (downloaded as `name`); its key, the download URL's last part. 429 when full."""
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if len(data) > self.max_bytes:
                raise HTTPError(400, f"the translated file has {len(data):,} bytes; the server keeps at most "
                                     f"{self.max_bytes:,} (--file-store-bytes)")
            if len(self._files) >= self.max_files or self._bytes + len(data) > self.max_bytes:
                wait = max(1, int(min(f.expires for f in self._files.values()) - now) + 1) if self._files else 1
                raise HTTPError(429, f"Slowdown: the server keeps {len(self._files)} translated files of "
                                     f"{self._bytes:,} bytes (--file-store-bytes {self.max_bytes:,}, at most "
                                     f"{self.max_files} files) until they expire; retry after {wait} s",
                                {"Retry-After": str(wait)})
            key = f"{secrets.token_hex(16)}.{name}"
            path = os.path.join(self.folder, secrets.token_hex(16))
            self._files[key] = _Stored(path, name, len(data), now + self.ttl)
            self._bytes += len(data)
        try:
            with open(path, "xb") as f:
                f.write(data)
        except BaseException:
            with self._lock:
                if key in self._files:
                    self._drop(key)
            raise
        return key

    def get(self, key: str) -> Optional[_Stored]:
        with self._lock:
            self._expire(time.monotonic())
            return self._files.get(key)


def _store(request: Request) -> FileStore:
    state = request.app.state
    if getattr(state, "file_store", None) is None:      # one per app, made on first use (in the event loop)
        settings = state.service.settings
        state.file_store = FileStore(settings.file_store_bytes, settings.file_ttl)
    return state.file_store


class SchedulerTranslator:
    """A Translator's check_options and run_batch over the server's scheduler, for documents/files.py in a worker
    thread: the texts go as jobs of the request on the event loop (Service.run: its limits, deadline, disconnect),
    with the records check_options made, as many texts a job as the request limits allow, one job after another.
    What a job holds of --max-pending-bytes is given back when it is done (its results are taken at once), so a long
    file does not fill it."""

    def __init__(self, service: Service, request: Request, model: str, scheduler: Schedules,
                 loop: asyncio.AbstractEventLoop):
        self.service, self.request, self.model, self.scheduler, self.loop = service, request, model, scheduler, loop
        translator = scheduler.translator
        self.package, self.engine = translator.package, translator.engine
        self.check_options, self.source_words = translator.check_options, translator.source_words

    def run_batch(self, texts: List[str], call: TranslationOptions, decoding: DecodingOptions) -> List[Any]:
        results: List[Any] = []
        for start, end in self._chunks(texts, call, decoding):
            part = replace(call, **{k: getattr(call, k)[start:end] for k in PER_TEXT if getattr(call, k) is not None})
            # bounded: a job ends by its deadline, and a loop that stopped running it leaves no thread waiting
            future = asyncio.run_coroutine_threadsafe(self._run(texts[start:end], (part, decoding)), self.loop)
            results += future.result(timeout=self.service.settings.timeout + LOOP_GRACE)
        return results

    def _chunks(self, texts: List[str], call: TranslationOptions,
                decoding: DecodingOptions) -> List[Tuple[int, int]]:
        """Runs of consecutive texts ([start, end)), each within the request limits (a text over them alone: its job
        says why)."""
        limits = self.service.settings
        per_rows = record_rows(["."], decoding)
        bounds = (limits.max_request_rows, limits.max_request_tokens, limits.max_attention_values,
                  limits.max_answer_bytes, limits.max_pending_bytes)
        chunks: List[Tuple[int, int]] = []
        total = [0] * len(bounds)
        for i, text in enumerate(texts):
            cost = records_cost(self.scheduler.translator, [text], call, decoding)
            mine = (per_rows, cost.tokens, cost.attention_values, cost.answer_bytes, cost.held_bytes)
            if chunks and all(t + m <= b for t, m, b in zip(total, mine, bounds)):
                chunks[-1] = (chunks[-1][0], i + 1)
                total = [t + m for t, m in zip(total, mine)]
            else:
                chunks.append((i, i + 1))
                total = list(mine)
        return chunks

    async def _run(self, texts: List[str], records: Records) -> List[Any]:
        scope = self.request.scope
        before = scope.get(PENDING_KEY, 0)
        try:
            return await self.service.run(self.request, self.model, self.scheduler, TRANSLATE, texts, {},
                                          records=records)
        finally:
            held = scope.get(PENDING_KEY, 0) - before
            self.service.pending_bytes -= held
            scope[PENDING_KEY] = before


def _missing(name: str) -> HTTPError:
    return HTTPError(400, f"Invalid request: missing {name} parameter")


@endpoint
async def translate_file(request: Request) -> Response:
    service: Service = request.app.state.service
    settings = service.settings
    form = await request.form(max_files=1, max_fields=FORM_FIELDS)
    values: Dict[str, Any] = dict(request.query_params)
    values.update({k: v for k, v in form.items() if isinstance(v, str)})
    service.check_key(values.get("api_key") or values.get(NPM_KEY_FIELD))
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise _missing("file")
    source, target = values.get("source"), values.get("target")
    for name, value in (("source", source), ("target", target)):
        if not value:
            raise _missing(name)
    if not upload.filename:
        raise HTTPError(400, "Invalid request: empty file")
    try:
        fmt = file_format(upload.filename)
    except ValueError as e:
        raise HTTPError(400, f"Invalid request: file format not supported: {e}") from None
    if upload.size is not None and upload.size > settings.max_file_bytes:
        raise HTTPError(413, f"the file has {upload.size:,} bytes; at most {settings.max_file_bytes:,} "
                             f"(--max-file-bytes)")
    source, pair = pick_pair(service, str(source), str(target))
    model, scheduler = service.scheduler(pair.model)
    store = _store(request)
    if store.translating >= FILES_AT_ONCE:
        raise HTTPError(429, f"Slowdown: the server translates {FILES_AT_ONCE} files at once; retry after 1 s",
                        {"Retry-After": "1"})
    data = await upload.read(settings.max_file_bytes + 1)
    if len(data) > settings.max_file_bytes:
        raise HTTPError(413, f"the file has more than {settings.max_file_bytes:,} bytes (--max-file-bytes)")
    options: Dict[str, Any] = {}
    if pair.source_lang is not None:
        options.update(source_lang=pair.source_lang, target_lang=pair.target_lang)
    loop = asyncio.get_running_loop()
    bridge = SchedulerTranslator(service, request, model, scheduler, loop)
    limits = FileLimits(settings.max_file_bytes, settings.max_file_chars)
    store.translating += 1
    try:
        translated = await loop.run_in_executor(
            store.executor, lambda: translate_file_bytes(bridge, data, fmt, limits, language=source, **options))
    except HTTPError:
        raise
    except ValueError as e:                 # FileError, DocumentError, an option translate_batch refuses
        raise HTTPError(400, f"Invalid request: {e}") from None
    finally:
        store.translating -= 1
    key = store.put(translated, download_name(upload.filename, str(target), fmt))
    return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", filename=key))})


@endpoint
async def download_file(request: Request) -> Response:
    stored = _store(request).get(request.path_params["filename"])
    if stored is None:
        raise HTTPError(404, "no such file: translated files are kept for a while (--file-ttl), then removed; "
                             "translate it again")
    media = mimetypes.guess_type(stored.name)[0] or "application/octet-stream"
    return FileResponse(stored.path, filename=stored.name, media_type=media)


ROUTES: Tuple[Route, ...] = (
    Route(TRANSLATE_FILE, translate_file, methods=["POST"]),
    Route(DOWNLOAD_FILE + "/{filename}", download_file, methods=["GET"], name="download_file"),
)
