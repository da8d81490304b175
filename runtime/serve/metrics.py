"""/metrics in Prometheus text (prometheus-client), on a registry of the app's own: requests by route and status,
request latency, time to first token per model; and, read from each Scheduler when scraped, its queue depth,
the rows in its running batch and the tokens it generated (a counter: rate() of it is tokens/s)."""
from __future__ import annotations

from typing import Dict, Iterator, Tuple

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .scheduler import Job, Schedules

# seconds: a tiny model answers in milliseconds, a large beam in seconds
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class _SchedulerCollector(Collector):
    def __init__(self, schedulers: Dict[str, Schedules]):
        self.schedulers = schedulers            # the app's dict: filled once the models are loaded

    def collect(self) -> Iterator:
        depth = GaugeMetricFamily("seq2onnx_queue_depth", "jobs waiting in the model's queue", labels=["model"])
        rows = GaugeMetricFamily("seq2onnx_running_rows", "decoder rows in the model's running batch",
                                 labels=["model"])
        tokens = CounterMetricFamily("seq2onnx_generated_tokens", "tokens of the best hypotheses generated",
                                     labels=["model"])
        jobs = CounterMetricFamily("seq2onnx_jobs", "jobs ended, by outcome (done, failed, cancelled: the "
                                   "client went away, expired: past the deadline)", labels=["model", "outcome"])
        joined = CounterMetricFamily("seq2onnx_joined_running", "jobs whose rows joined a batch that had already "
                                     "stepped (continuous batching)", labels=["model"])
        steps = CounterMetricFamily("seq2onnx_decoder_steps", "decoder steps run (continuous batching)",
                                    labels=["model"])
        for name, scheduler in list(self.schedulers.items()):
            joined.add_metric([name], scheduler.joined_running)
            steps.add_metric([name], scheduler.decoder_steps)
            depth.add_metric([name], scheduler.queue_depth)
            rows.add_metric([name], scheduler.running_rows)
            tokens.add_metric([name], scheduler.tokens_generated)
            for outcome, n in list(scheduler.outcomes.items()):
                jobs.add_metric([name, outcome], n)
        yield from (depth, rows, tokens, jobs, joined, steps)


class Metrics:
    def __init__(self, schedulers: Dict[str, Schedules]):
        self.registry = CollectorRegistry()
        self.requests = Counter("seq2onnx_requests", "HTTP requests answered", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("seq2onnx_request_seconds", "HTTP request latency", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.first_token = Histogram("seq2onnx_time_to_first_token_seconds",
                                     "from a job's arrival to its first token (unstreamed: to its results)",
                                     ["model"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.registry.register(_SchedulerCollector(schedulers))

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_job(self, model: str, job: Job) -> None:
        if job.time_to_first_token is not None:
            self.first_token.labels(model).observe(job.time_to_first_token)

    def render(self) -> Tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
