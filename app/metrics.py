"""Prometheus metrics, in a registry owned by each app instance (no global state).

Under `genai serve --workers N` (N > 1) every worker is its own process: `serve` then sets
PROMETHEUS_MULTIPROC_DIR before the workers start, prometheus-client keeps each worker's values in
files there, and `/metrics` answers with the sum over all workers, whichever one is asked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from app.schemas import Usage

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Seconds: the gateway's own work is milliseconds, a request with its upstream call up to minutes.
_OVERHEAD_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_REQUEST_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
_PROMPT_CHAR_BUCKETS = (0, 100, 300, 1_000, 3_000, 10_000, 30_000, 100_000, 300_000, 1_000_000)


@dataclass(slots=True)
class RequestFacts:
    """What the pipeline learns about one HTTP request, for its metrics and overhead header.

    The request middleware opens one per request; the service fills it in. A mutable object in a
    context variable, so a streamed body (sent from a task with a copy of the context) still
    reaches the same one. Labels stay empty on routes that never reach a model.
    """

    pattern: str = ""
    provider: str = ""
    model: str = ""
    upstream_seconds: float = 0.0


_request_facts: ContextVar[RequestFacts | None] = ContextVar("genai_request_facts", default=None)


def open_request_facts() -> RequestFacts:
    """A fresh record for the request starting in this context (the middleware's call)."""
    facts = RequestFacts()
    _request_facts.set(facts)
    return facts


def request_facts() -> RequestFacts:
    """The current request's record; a throwaway one outside a request (CLI, tests, replay)."""
    return _request_facts.get() or RequestFacts()


def multiprocess_dir() -> Path | None:
    """Where the workers share their values; set (by `serve`) before prometheus-client loads."""
    value = os.environ.get(MULTIPROC_DIR_ENV)
    return Path(value) if value else None


@contextlib.contextmanager
def shared_across_workers(workers: int) -> Iterator[Path | None]:
    """For `serve`, before any worker starts: where the workers share their metric values.

    With several workers, a private empty directory, removed when serving ends. An operator's
    own PROMETHEUS_MULTIPROC_DIR is kept (prometheus-client chose its mode on loading), emptied
    of an earlier run's files so they are not summed in. One worker alone keeps its values in
    memory.
    """
    inherited = multiprocess_dir()
    if inherited is not None:
        for stale in inherited.glob("*.db"):
            stale.unlink()
        yield inherited
        return
    if workers <= 1:
        yield None
        return
    path = Path(tempfile.mkdtemp(prefix="genai-metrics-"))  # 0700: this user only
    os.environ[MULTIPROC_DIR_ENV] = str(path)
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_DIR_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._shared_dir = multiprocess_dir()
        self.completions = Counter(
            "genai_completions_total",
            "Completions by provider and final status.",
            ["provider", "status"],
            registry=self.registry,
        )
        self.upstream_seconds = Histogram(
            "genai_upstream_seconds",
            "Provider call latency of a completed answer, retries and fallbacks included.",
            ["provider", "model"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        # Per HTTP request: `route` is the route template (never the raw path), pattern,
        # provider and model are bounded by the catalog and the configuration ("" elsewhere).
        self.requests = Counter(
            "genai_requests_total",
            "HTTP requests by route template, pattern, answering provider and model, and status.",
            ["route", "pattern", "provider", "model", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "genai_request_seconds",
            "HTTP request latency (until the last byte of the body), by the same labels.",
            ["route", "pattern", "provider", "model", "status"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.overhead_seconds = Histogram(
            "genai_gateway_overhead_seconds",
            "The gateway's own time per request: total minus the time spent waiting upstream.",
            ["route"],
            buckets=_OVERHEAD_BUCKETS,
            registry=self.registry,
        )
        self.retries = Counter(
            "genai_upstream_retries_total",
            "Provider calls made again by the retry policy (rate limit, 5xx, connection).",
            ["provider", "error_type"],
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "genai_fallbacks_total",
            "Fallbacks taken: the next model of the chain tried after `from_model` failed.",
            ["from_model", "to_model"],
            registry=self.registry,
        )
        self.contract_failures = Counter(
            "genai_contract_failures_total",
            "Requests refused by a pattern's variable contract (missing or invalid variables).",
            ["pattern", "error_type"],
            registry=self.registry,
        )
        self.prompt_chars = Histogram(
            "genai_rendered_prompt_chars",
            "Characters of a rendered prompt by role (system; user and assistant messages).",
            ["pattern", "role"],
            buckets=_PROMPT_CHAR_BUCKETS,
            registry=self.registry,
        )
        self.template_fallbacks = Counter(
            "genai_template_fallbacks_total",
            "Renders that used the fallback prompt.",
            ["role"],
            registry=self.registry,
        )
        self.drift_detections = Counter(
            "genai_drift_detections_total",
            "Template or pattern sources found changed since use.",
            ["source_kind"],
            registry=self.registry,
        )
        self.replay_reveals = Counter(
            "genai_replay_reveals_total",
            "Replays that returned the raw (unredacted) prompt.",
            registry=self.registry,
        )
        self.audit_backlog = Gauge(
            "genai_audit_backlog",
            "Job completions queued for the store (summed over live workers).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        # The response cache (app/cache/): each backend counts its own lookups.
        self.cache_requests = Counter(
            "genai_cache_requests_total",
            "Response cache lookups: hit, miss, or error (cache unreachable, slow or its entry "
            "unreadable; the request went upstream).",
            ["result"],
            registry=self.registry,
        )
        self.cache_write_failures = Counter(
            "genai_cache_write_failures_total",
            "Answers the response cache could not store (Redis down or slow, value not JSON).",
            registry=self.registry,
        )
        self.cache_entries = Gauge(
            "genai_cache_entries",
            "Answers held by the in-memory response cache (summed over live workers).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        # Concurrency limits (app/limits.py): `limit` is "global" or "provider:<name>".
        self.shed = Counter(
            "genai_shed_total",
            "Requests answered 503 overloaded because a limit and its wait queue were full.",
            ["limit"],
            registry=self.registry,
        )
        self.inflight = Gauge(
            "genai_inflight",
            "Slots of a limit in use (summed over live workers).",
            ["limit"],
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.queue_waiting = Gauge(
            "genai_queue_waiting",
            "Requests waiting for a slot of a limit (summed over live workers).",
            ["limit"],
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.tokens = Counter(
            "genai_tokens",
            "Tokens by kind as providers reported them: cached_input is part of input, "
            "reasoning part of output.",
            ["provider", "model", "kind"],
            registry=self.registry,
        )
        self.cost_usd = Counter(
            "genai_cost_usd",
            "Estimated spend in USD from the price table (unpriced models add nothing).",
            ["provider", "model"],
            registry=self.registry,
        )

    def record_usage(self, provider: str, model: str, usage: Usage, cost: float | None) -> None:
        """Count one upstream answer's tokens (the kinds the provider reported) and its cost."""
        counts = {
            "input": usage.input_tokens,
            "output": usage.output_tokens,
            "cached_input": usage.cached_input_tokens,
            "reasoning": usage.reasoning_tokens,
        }
        for kind, tokens in counts.items():
            if tokens:
                self.tokens.labels(provider, model, kind).inc(tokens)
        if cost is not None:
            self.cost_usd.labels(provider, model).inc(cost)

    def exposition(self) -> bytes:
        """The text format for `/metrics`: this process's values, or every worker's summed."""
        if self._shared_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=str(self._shared_dir))  # type: ignore[no-untyped-call]
        return generate_latest(merged)
