"""`seq2onnx serve MODEL [MODEL ...]`: the models over HTTP (app.py) on uvicorn, one scheduler each.

The port opens at once; the models load in a thread (/ready: 503 until they have). SIGTERM or Ctrl-C: new
requests get 503, those in flight finish, then the process exits 0 (SIGTERM) or 130 (Ctrl-C)."""
from __future__ import annotations

import argparse
import functools
import logging
import signal
import warnings
from pathlib import Path
from types import FrameType
from typing import Any, Callable, Dict, FrozenSet, List, Optional, TextIO, Tuple, Type, Union

from ..cli.main import OneLineParser
from ..errors import Seq2OnnxError, printable
from .app import create_app, stop_admitting
from .service import LOCAL_NAMES, Settings, host_name
from .continuous import MIN_LENGTH_CLASS
from .pool import SchedulerPool
from .scheduler import POLICIES, Scheduler, Schedules

BATCHING = ("continuous", "dynamic", "request")
DEFAULT_BATCHING = "continuous"
DEFAULTS = Settings()


def serve_parser() -> argparse.ArgumentParser:
    from ..translator import COMPUTE_TYPES
    p = OneLineParser(prog="seq2onnx serve", description="Serve translations over HTTP: LibreTranslate's "
                      "/translate, /languages, /translate_file and /download_file, and /v1/translate, "
                      "/v1/translate/stream, /v1/score, /v1/models, /health, /ready, /metrics (README: 'Serve translations over HTTP').")
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="a model package folder, or a shipped model's name (numbers-en-de); its name in /v1 "
                        "requests is the folder's name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--languages", action="append", default=[], metavar="[MODEL=]SRC:TGT",
                   help="the LibreTranslate pair of a package that records no languages (default: the pair its "
                        "name ends with, e.g. opus-mt-en-de); MODEL= may be left out with one model")
    p.add_argument("--api-keys", metavar="FILE", help="a file of API keys, one a line: requests need one (403)")
    p.add_argument("--allowed-hosts", action="append", default=[], metavar="NAME[,NAME]",
                   help="without --api-keys the server answers only requests whose Host is an IP address, localhost "
                        "or the --host name (421: a web page's DNS name rebound to it gets nothing); these names "
                        "too, e.g. the name of a proxy in front of it; '*': any")
    g = p.add_argument_group("batching")
    g.add_argument("--batching", choices=BATCHING, default=DEFAULT_BATCHING,
                   help=f"continuous: rows join the running batch at each step; dynamic: collect requests for "
                        f"--max-wait-ms, one batch per option set; request: one translate_batch per request "
                        f"(default: {DEFAULT_BATCHING})")
    g.add_argument("--max-wait-ms", type=float, default=10.0, help="dynamic: how long to collect (default 10)")
    g.add_argument("--max-batch-rows", type=int, default=256, help="decoder rows a batch holds (default 256)")
    g.add_argument("--max-queue", type=int, default=256, help="jobs waiting per model; more: 429 (default 256)")
    g.add_argument("--instances", type=int, default=1,
                   help="schedulers per model, each batching on its own thread over the one loaded model "
                        "(Triton's instance count, CTranslate2's inter_threads); with --intra-threads 1, one a core "
                        "(default 1)")
    g.add_argument("--min-length-class", type=int, default=MIN_LENGTH_CLASS,
                   help=f"continuous: jobs whose step limit is at most this share a batch; longer ones batch by "
                        f"cache capacity class (a power of 2); a large value: one batch (default {MIN_LENGTH_CLASS})")
    lim = p.add_argument_group("limits")
    lim.add_argument("--char-limit", type=int, default=DEFAULTS.char_limit, help="characters per text")
    lim.add_argument("--batch-limit", type=int, default=DEFAULTS.batch_limit, help="texts per request")
    lim.add_argument("--alternatives-limit", type=int, default=DEFAULTS.alternatives_limit,
                     help="LibreTranslate's alternatives at most")
    lim.add_argument("--max-body-bytes", type=int, default=DEFAULTS.max_body_bytes)
    lim.add_argument("--max-request-rows", type=int, default=DEFAULTS.max_request_rows,
                     help="decoder rows one request may take: texts x max(beam_size, num_hypotheses)")
    lim.add_argument("--max-request-tokens", type=int, default=DEFAULTS.max_request_tokens,
                     help="decoder tokens one request may decode: rows x its texts' step limits (max_decoding_length, "
                          f"max_length_a/b over the source tokens), the cache it fills (default "
                          f"{DEFAULTS.max_request_tokens})")
    lim.add_argument("--max-attention-values", type=int, default=DEFAULTS.max_attention_values,
                     help="attention values one request may keep, for return_attention or return_alignment: decoder "
                          f"rows x step limit x source tokens (default {DEFAULTS.max_attention_values})")
    lim.add_argument("--max-answer-bytes", type=int, default=DEFAULTS.max_answer_bytes,
                     help="the JSON answer one request may take, reckoned from its step limits before it is queued "
                          f"(default {DEFAULTS.max_answer_bytes})")
    lim.add_argument("--max-pending-bytes", type=int, default=DEFAULTS.max_pending_bytes,
                     help="what the requests admitted and not yet answered may hold together, their answers and "
                          f"attention; past it: 429 (default {DEFAULTS.max_pending_bytes})")
    lim.add_argument("--timeout", type=float, default=DEFAULTS.timeout, help="seconds per request (504)")
    f = p.add_argument_group("files (/translate_file, /download_file)")
    f.add_argument("--max-file-bytes", type=int, default=DEFAULTS.max_file_bytes,
                   help=f"the largest file a /translate_file request may send (413; default "
                        f"{DEFAULTS.max_file_bytes})")
    f.add_argument("--max-file-chars", type=int, default=DEFAULTS.max_file_chars,
                   help=f"characters of text one file may hold (default {DEFAULTS.max_file_chars})")
    f.add_argument("--file-store-bytes", type=int, default=DEFAULTS.file_store_bytes,
                   help="the translated files kept for /download_file, in bytes, all together; full: 429 (default "
                        f"{DEFAULTS.file_store_bytes})")
    f.add_argument("--file-ttl", type=float, default=DEFAULTS.file_ttl,
                   help=f"seconds a translated file is kept (default {DEFAULTS.file_ttl:g}, LibreTranslate's)")
    m = p.add_argument_group("model")
    m.add_argument("--device", default="auto", help="auto, cpu or cuda (as Translator)")
    m.add_argument("--compute-type", default="default", choices=list(COMPUTE_TYPES))
    m.add_argument("--intra-threads", type=int, default=0, help="onnxruntime intra-op threads (0: its default)")
    m.add_argument("--inter-threads", type=int, default=1)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    return p


def policy(name: str) -> Type[Scheduler]:
    """The Scheduler class of a --batching name."""
    if name == "continuous":
        from .continuous import ContinuousScheduler
        return ContinuousScheduler
    return POLICIES[name]


def parse_languages(given: List[str], names: List[str]) -> Dict[str, Tuple[str, str]]:
    out: Dict[str, Tuple[str, str]] = {}
    for item in given:
        model, _, pair = item.rpartition("=")
        source, colon, target = pair.partition(":")
        if not colon or not source or not target:
            raise Seq2OnnxError(f"--languages takes [MODEL=]SRC:TGT, e.g. en:de, got {item!r}")
        if not model:
            if len(names) != 1:
                raise Seq2OnnxError(f"--languages {item!r}: name the model (MODEL=SRC:TGT): several are served")
            model = names[0]
        if model not in names:
            raise Seq2OnnxError(f"--languages {item!r}: no model named {model!r}; served: {', '.join(names)}")
        out[model] = (source, target)
    return out


def read_keys(path: str) -> frozenset:
    try:
        keys = frozenset(line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines()
                         if line.strip())
    except (OSError, UnicodeDecodeError) as e:
        raise Seq2OnnxError(f"--api-keys {path}: cannot read it: {e}") from None
    if not keys:
        raise Seq2OnnxError(f"--api-keys {path}: the file holds no key")
    return keys


def allowed_hosts(host: str, given: List[str]) -> Optional[FrozenSet[str]]:
    """The Host names a server without API keys answers besides IP addresses: localhost, the name it binds, the
    --allowed-hosts; None (any) when they hold '*'."""
    names = {n.strip().lower().rstrip(".") for item in given for n in item.split(",") if n.strip()}
    if "*" in names:
        return None
    return frozenset({*LOCAL_NAMES, host_name(host), *names} - {""})


def model_names(models: List[str]) -> List[str]:
    names = [Path(m).name for m in models]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise Seq2OnnxError(f"two models are named {dup!r} (a model's name is its folder's name): rename one")
    return names


def prepare(argv: List[str]) -> Tuple[argparse.Namespace, Settings, Callable[[], Dict[str, Schedules]]]:
    """`seq2onnx serve`'s command line parsed and checked: its arguments, the app's Settings, and the function that
    loads its models, a started Scheduler each (serve_main's; each Ray Serve replica's too: runtime/ray/serve.py)."""
    args = serve_parser().parse_args(argv)
    for flag in ("port", "max_batch_rows", "max_queue", "char_limit", "batch_limit", "max_body_bytes",
                 "max_request_rows", "min_length_class", "instances", "max_request_tokens", "max_attention_values", "max_answer_bytes",
                 "max_pending_bytes", "max_file_bytes", "max_file_chars", "file_store_bytes"):
        if getattr(args, flag) < (0 if flag == "port" else 1):
            raise Seq2OnnxError(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    if args.timeout <= 0 or args.file_ttl <= 0 or args.max_wait_ms < 0 or args.alternatives_limit < 0:
        raise Seq2OnnxError("--timeout and --file-ttl must be > 0, --max-wait-ms and --alternatives-limit >= 0")
    if args.max_answer_bytes > args.max_pending_bytes:
        raise Seq2OnnxError(f"--max-answer-bytes ({args.max_answer_bytes}) must be at most --max-pending-bytes "
                            f"({args.max_pending_bytes}), which holds every answer in progress")
    names = model_names(args.models)
    api_keys = None if args.api_keys is None else read_keys(args.api_keys)
    settings = Settings(char_limit=args.char_limit, batch_limit=args.batch_limit,
                        alternatives_limit=args.alternatives_limit, max_body_bytes=args.max_body_bytes,
                        max_request_rows=args.max_request_rows, max_request_tokens=args.max_request_tokens,
                        max_attention_values=args.max_attention_values,
                        max_answer_bytes=args.max_answer_bytes, max_pending_bytes=args.max_pending_bytes,
                        timeout=args.timeout, api_keys=api_keys, max_file_bytes=args.max_file_bytes,
                        max_file_chars=args.max_file_chars, file_store_bytes=args.file_store_bytes,
                        file_ttl=args.file_ttl,
                        allowed_hosts=None if api_keys is not None else allowed_hosts(args.host, args.allowed_hosts),
                        languages=parse_languages(args.languages, names))
    cls = policy(args.batching)
    log = logging.getLogger("seq2onnx.serve")

    def load() -> Dict[str, Schedules]:
        from ..translator import Translator
        schedulers: Dict[str, Schedules] = {}
        for name, model in zip(names, args.models):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    translator = Translator(model, device=args.device, compute_type=args.compute_type,
                                            intra_threads=args.intra_threads, inter_threads=args.inter_threads)
                except ValueError as e:
                    raise Seq2OnnxError(f"{model}: {e}") from e
            for w in caught:
                log.warning("seq2onnx serve: %s: %s", name, printable(str(w.message)))
            kwargs: Dict[str, Any] = dict(max_batch_rows=args.max_batch_rows, name=name)
            if args.batching == "dynamic":
                kwargs["max_wait_ms"] = args.max_wait_ms
            if args.batching == "continuous":
                kwargs["min_length_class"] = args.min_length_class
            make = functools.partial(cls, translator, **kwargs)
            schedulers[name] = (make(max_queue=args.max_queue) if args.instances == 1 else
                                SchedulerPool(make, args.instances, args.max_queue)).start()
            log.info("seq2onnx serve: %s loaded (%s, %s batching)", name, translator.variant, args.batching)
        return schedulers

    return args, settings, load


def _log_warning(message: Union[Warning, str], category: Type[Warning], filename: str, lineno: int,
                 file: Optional[TextIO] = None, line: Optional[str] = None) -> None:
    """A Python warning (a text truncated to max_input_length, lone surrogates replaced) as one line of the
    server's log, without the source file and line that Python's own format adds."""
    logging.getLogger("seq2onnx.serve").warning("seq2onnx serve: %s: %s", category.__name__, printable(str(message)))


def serve_main(argv: List[str]) -> int:
    import uvicorn                       # the extra's modules: a missing one is the CLI's one-line hint

    args, settings, load = prepare(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(message)s")
    warnings.showwarning = _log_warning
    schedulers: Dict[str, Schedules] = {}
    failure: List[str] = []

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Optional[FrameType]) -> None:
            stop_admitting(schedulers)                  # new jobs: 503; queued and running ones finish
            super().handle_exit(sig, frame)

    def load_failed(message: str) -> None:
        failure.append(message)
        server.should_exit = True

    app = create_app(schedulers, settings, load=load, on_load_error=load_failed)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False,
                            timeout_graceful_shutdown=args.timeout + 5, lifespan="on")
    server = Server(config)
    # uvicorn re-raises a signal it handled once it has shut down: SIGTERM's is then ours, which does nothing,
    # so a drained server exits 0
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        server.run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if failure:
        raise Seq2OnnxError(failure[0])
    if not server.started:
        raise Seq2OnnxError(f"could not listen on {args.host}:{args.port} (see the line above)")
    return 0
