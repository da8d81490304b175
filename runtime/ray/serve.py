"""The server of `seq2onnx serve` as a Ray Serve application: the same Starlette app (serve/app.py create_app, its
routes, limits and errors), in N replicas behind Serve's HTTP proxy, each loading the models and running its own
schedulers (continuous batching by default), as `seq2onnx serve` does in one process.

Two ways in, one application (`application`):
  - Ray Serve's own: `serve run seq2onnx.runtime.ray.serve:app_builder models=numbers-en-de replicas=2` (and the
    same import path in a Serve config file for `serve deploy`, KubeRay's RayService); every `seq2onnx serve` flag
    is a key (`batching=dynamic`, `api_keys=/path/keys`).
  - `seq2onnx ray-serve MODEL [MODEL ...] --replicas N [--ray-address ADDRESS]` with `seq2onnx serve`'s flags:
    --host and --port are then the proxy's.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any, Dict, List

from ray import serve

from . import connect
from ..errors import Seq2OnnxError
from ..serve.app import create_app
from ..serve.cli import serve_parser
from ..serve.cli import prepare

APP_NAME = "seq2onnx"


@serve.deployment
@serve.ingress()
class TranslationServer:
    """One replica: `seq2onnx serve`'s command line (argv) parsed and checked as the command does (serve.cli.prepare),
    its models loaded (a started Scheduler each), and its app built over them; Serve runs the app's lifespan, whose
    end drains the schedulers (a replica stopped by Serve finishes what it holds)."""

    def __init__(self, argv: List[str]):
        self.argv = argv

    def __serve_build_asgi_app__(self) -> Any:
        _, settings, load = prepare(self.argv)
        return create_app(load(), settings)


def application(argv: List[str], replicas: int = 1, cpus_per_replica: float = 1.0) -> Any:
    """The Serve application of `seq2onnx serve ARGV` in `replicas` replicas of `cpus_per_replica` CPUs each (checked
    here: a bad flag is a Seq2OnnxError before Serve starts anything)."""
    if replicas < 1 or cpus_per_replica <= 0:
        raise Seq2OnnxError(f"replicas must be >= 1 and cpus per replica > 0, got {replicas}, {cpus_per_replica}")
    args, settings, _ = prepare(argv)
    if args.intra_threads == 0:          # onnxruntime's default, every core of the node: the replica's CPUs instead
        argv = [*argv, "--intra-threads", str(max(1, int(cpus_per_replica)))]
    # @serve.deployment made the class a Deployment, which mypy cannot see: it keeps a decorated class's own type
    return TranslationServer.options(  # type: ignore[attr-defined]
        num_replicas=replicas, ray_actor_options={"num_cpus": cpus_per_replica},
        # a replica takes as many requests as its queue holds; past that, Serve queues them before the replicas
        max_ongoing_requests=args.max_queue,
        graceful_shutdown_timeout_s=settings.timeout + 5,
        logging_config={"log_level": args.log_level.upper(), "enable_access_log": False},   # as `seq2onnx serve`
    ).bind(argv)


def app_builder(builder_args: Dict[str, str]) -> Any:
    """Ray Serve's application builder (`serve run seq2onnx.runtime.ray.serve:app_builder key=value ...`): `models`
    (one or more, separated by commas), `replicas`, `cpus_per_replica`, and any flag of `seq2onnx serve` by its name
    (`max_queue=512`, `api_keys=/path/keys`, `languages=en:de`)."""
    given = dict(builder_args)
    models = given.pop("models", given.pop("model", ""))
    replicas = given.pop("replicas", "1")
    cpus = given.pop("cpus_per_replica", "1")
    argv = [m for m in models.replace(",", " ").split()]
    for key, value in given.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    try:
        return application(argv, int(replicas), float(cpus))
    except ValueError as e:
        raise Seq2OnnxError(f"replicas and cpus_per_replica must be numbers: {e}") from None


# --- seq2onnx ray-serve ----------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    """`seq2onnx serve`'s parser with the Ray group."""
    p = serve_parser()
    p.prog, p.allow_abbrev = "seq2onnx ray-serve", False     # RAY_FLAGS are taken out of argv by their full names
    p.description = ("Serve translations over HTTP as `seq2onnx serve` does, in --replicas replicas on a Ray cluster, "
                     "behind Ray Serve's HTTP proxy on --host:--port. Ray Serve's own way: `serve run "
                     "seq2onnx.runtime.ray.serve:app_builder models=MODEL replicas=N` (README).")
    g = p.add_argument_group("Ray")
    g.add_argument("--replicas", type=int, default=1, help="replicas, each with its schedulers (default 1)")
    g.add_argument("--cpus-per-replica", type=float, default=1.0, help="CPUs a replica reserves (default 1)")
    g.add_argument("--ray-address", metavar="auto|ADDRESS",
                   help="the cluster (ray.init's address; default: RAY_ADDRESS, else a new one on this machine)")
    return p


RAY_FLAGS = ("--replicas", "--cpus-per-replica", "--ray-address")


def ray_serve_main(argv: List[str]) -> int:
    """Start the application on the cluster, wait for SIGTERM or Ctrl-C, then delete it (its replicas drain)."""
    import ray

    args = _parser().parse_args(argv)
    server_argv = _without(argv, RAY_FLAGS)
    app = application(server_argv, args.replicas, args.cpus_per_replica)
    connect(args.ray_address)
    stop = threading.Event()              # after ray.init, whose SIGTERM handler would end the process at once
    previous = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        serve.run(app, name=APP_NAME, route_prefix="/")
        print(f"seq2onnx ray-serve: {args.replicas} replica(s) ready on http://{args.host}:{args.port}",
              file=sys.stderr, flush=True)
        while not stop.wait(1.0):
            pass
        serve.delete(APP_NAME)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        ray.shutdown()
    return 0


def _without(argv: List[str], flags: tuple) -> List[str]:
    """argv less the given flags and their values (`--flag VALUE` or `--flag=VALUE`)."""
    out: List[str] = []
    skip = False
    for item in argv:
        if skip:
            skip = False
        elif item in flags:
            skip = True
        elif not item.startswith(tuple(f + "=" for f in flags)):
            out.append(item)
    return out
