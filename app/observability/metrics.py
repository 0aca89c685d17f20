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
from collections.abc import Iterator, Sequence
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from app.observability.metric_labels import Bounded, LabelVocabulary
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


class _Families:
    """Makes the metric families in one registry, each labelled one `Bounded` by one vocabulary."""

    def __init__(self, registry: CollectorRegistry, vocabulary: LabelVocabulary) -> None:
        self.registry = registry
        self.vocabulary = vocabulary

    def counter(self, name: str, documentation: str, names: Sequence[str]) -> Bounded[Counter]:
        metric = Counter(name, documentation, names, registry=self.registry)
        return Bounded(metric, names, self.vocabulary)

    def histogram(
        self, name: str, documentation: str, names: Sequence[str], buckets: Sequence[float]
    ) -> Bounded[Histogram]:
        metric = Histogram(name, documentation, names, buckets=buckets, registry=self.registry)
        return Bounded(metric, names, self.vocabulary)

    def gauge(self, name: str, documentation: str, names: Sequence[str]) -> Bounded[Gauge]:
        """Summed over live workers."""
        metric = Gauge(
            name, documentation, names, registry=self.registry, multiprocess_mode="livesum"
        )
        return Bounded(metric, names, self.vocabulary)

    def plain_counter(self, name: str, documentation: str) -> Counter:
        """No labels, so nothing to bound."""
        return Counter(name, documentation, registry=self.registry)

    def plain_gauge(self, name: str, documentation: str) -> Gauge:
        """No labels; summed over live workers."""
        return Gauge(name, documentation, registry=self.registry, multiprocess_mode="livesum")


class Metrics:
    """Every series the gateway exports. Each labelled one is `Bounded` by `labels`, the
    vocabulary of what a label value may be (`app.observability.metric_labels`): a caller's
    made-up model or pattern is counted as `other`, never as a series of its own."""

    def __init__(self, *, labels: LabelVocabulary | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._shared_dir = multiprocess_dir()
        self.vocabulary = labels or LabelVocabulary()
        families = _Families(self.registry, self.vocabulary)
        # One group per concern, registered in this order (the exposition keeps it).
        self._add_requests(families)
        self._add_upstream(families)
        self._add_prompts(families)
        self._add_audit(families)
        self._add_cache(families)
        self._add_limits(families)
        self._add_usage(families)
        self._add_webhooks(families)

    def _add_webhooks(self, families: _Families) -> None:
        """Release events posted to receivers (app/webhooks)."""
        self.webhook_deliveries = families.counter(
            "genai_webhook_deliveries_total",
            "Webhook attempts by result: delivered, retry (scheduled again) or failed (for good).",
            ["result"],
        )
        self.webhook_events_lost = families.plain_counter(
            "genai_webhook_events_not_queued_total",
            "Events that could not be written to the delivery outbox (the store failed).",
        )

    def _add_requests(self, families: _Families) -> None:
        """Completions, and every HTTP request with its latency and the gateway's own share."""
        self.completions = families.counter(
            "genai_completions_total",
            "Completions by provider and final status.",
            ["provider", "status"],
        )
        self.upstream_seconds = families.histogram(
            "genai_upstream_seconds",
            "Provider call latency of a completed answer, retries and fallbacks included.",
            ["provider", "model"],
            _REQUEST_BUCKETS,
        )
        # Per HTTP request: `route` is the route template (never the raw path); pattern,
        # provider and model as the vocabulary bounds them ("" on routes that reach no model).
        per_request = ["route", "pattern", "provider", "model", "status"]
        self.requests = families.counter(
            "genai_requests_total",
            "HTTP requests by route template, pattern, answering provider and model, and status.",
            per_request,
        )
        self.request_seconds = families.histogram(
            "genai_request_seconds",
            "HTTP request latency (until the last byte of the body), by the same labels.",
            per_request,
            _REQUEST_BUCKETS,
        )
        self.overhead_seconds = families.histogram(
            "genai_gateway_overhead_seconds",
            "The gateway's own time per request: total minus the time spent waiting upstream.",
            ["route"],
            _OVERHEAD_BUCKETS,
        )

    def _add_upstream(self, families: _Families) -> None:
        """What the retry policy and the fallback chains did."""
        self.retries = families.counter(
            "genai_upstream_retries_total",
            "Provider calls made again by the retry policy (rate limit, 5xx, connection).",
            ["provider", "error_type"],
        )
        self.fallbacks = families.counter(
            "genai_fallbacks_total",
            "Fallbacks taken: the next model of the chain tried after `from_model` failed.",
            ["from_model", "to_model"],
        )

    def _add_prompts(self, families: _Families) -> None:
        """Rendering: contracts refused, prompt sizes, fallback prompts used."""
        self.contract_failures = families.counter(
            "genai_contract_failures_total",
            "Requests refused by a pattern's variable contract (missing or invalid variables).",
            ["pattern", "error_type"],
        )
        self.prompt_chars = families.histogram(
            "genai_rendered_prompt_chars",
            "Characters of a rendered prompt by role (system; user and assistant messages).",
            ["pattern", "role"],
            _PROMPT_CHAR_BUCKETS,
        )
        # No role label: a template without an active version is named, role and all, by the
        # caller; the `template_fallback` log line says which.
        self.template_fallbacks = families.plain_counter(
            "genai_template_fallbacks_total",
            "Renders that used the fallback prompt (no active template version for the role).",
        )

    def _add_audit(self, families: _Families) -> None:
        """The audit trail: drift found, raw prompts revealed, records queued for the store."""
        self.drift_detections = families.counter(
            "genai_drift_detections_total",
            "Template or pattern sources found changed since use.",
            ["source_kind"],
        )
        self.replay_reveals = families.plain_counter(
            "genai_replay_reveals_total",
            "Replays that returned the raw (unredacted) prompt.",
        )
        # Categories are the redactor's own fixed list (app/audit/redaction.py): bounded as is.
        self.redactions = Counter(
            "genai_redactions",
            "Values redacted from finished audit records, by category (each distinct value once "
            "per record).",
            ["category"],
            registry=families.registry,
        )
        self.audit_backlog = families.plain_gauge(
            "genai_audit_backlog",
            "Job completions queued for the store (summed over live workers).",
        )

    def _add_cache(self, families: _Families) -> None:
        """The response cache (app/cache/): each backend counts its own lookups."""
        self.cache_requests = families.counter(
            "genai_cache_requests_total",
            "Response cache lookups: hit, miss, or error (cache unreachable, slow or its entry "
            "unreadable; the request went upstream).",
            ["result"],
        )
        self.cache_write_failures = families.plain_counter(
            "genai_cache_write_failures_total",
            "Answers the response cache could not store (Redis down or slow, value not JSON).",
        )
        self.cache_entries = families.plain_gauge(
            "genai_cache_entries",
            "Answers held by the in-memory response cache (summed over live workers).",
        )

    def _add_limits(self, families: _Families) -> None:
        """Concurrency limits (app/concurrency/limits.py): `limit` is "global" or
        "provider:<name>"."""
        self.shed = families.counter(
            "genai_shed_total",
            "Requests answered 503 overloaded because a limit and its wait queue were full.",
            ["limit"],
        )
        self.inflight = families.gauge(
            "genai_inflight", "Slots of a limit in use (summed over live workers).", ["limit"]
        )
        self.queue_waiting = families.gauge(
            "genai_queue_waiting",
            "Requests waiting for a slot of a limit (summed over live workers).",
            ["limit"],
        )

    def _add_usage(self, families: _Families) -> None:
        """Tokens and spend, as `record_usage` counts them."""
        self.tokens = families.counter(
            "genai_tokens",
            "Tokens by kind as providers reported them: cached_input is part of input, "
            "reasoning part of output.",
            ["provider", "model", "kind"],
        )
        self.cost_usd = families.counter(
            "genai_cost_usd",
            "Estimated spend in USD from the price table (unpriced models add nothing).",
            ["provider", "model"],
        )
        # A saving can be negative (cache writes cost more than input), which a counter cannot
        # take: what the calls would have cost without the cache is counted instead, and the
        # saving is this minus genai_cost_usd_total.
        self.uncached_cost_usd = families.counter(
            "genai_cost_without_cache_usd",
            "What the same calls would have cost with no provider prompt cache, in USD; minus "
            "genai_cost_usd_total it is what the cache saved.",
            ["provider", "model"],
        )

    def count_redactions(self, redaction_map: dict[str, str]) -> None:
        """Count a finished record's redacted values (its map: token → category)."""
        counts: dict[str, int] = {}
        for category in redaction_map.values():
            counts[category] = counts.get(category, 0) + 1
        for category, count in counts.items():
            self.redactions.labels(category).inc(count)

    def record_usage(
        self,
        provider: str,
        model: str,
        usage: Usage,
        cost: float | None,
        *,
        saved_usd: float | None = None,
    ) -> None:
        """Count one upstream answer's tokens (the kinds the provider reported), its cost and
        what the prompt cache saved on it."""
        counts = {
            "input": usage.input_tokens,
            "output": usage.output_tokens,
            "cached_input": usage.cached_input_tokens,
            "reasoning": usage.reasoning_tokens,
            "cache_write": usage.cache_write_tokens,
            "cache_write_1h": usage.cache_write_1h_tokens,
        }
        for kind, tokens in counts.items():
            if tokens:
                self.tokens.labels(provider, model, kind).inc(tokens)
        if cost is not None:
            self.cost_usd.labels(provider, model).inc(cost)
            self.uncached_cost_usd.labels(provider, model).inc(cost + (saved_usd or 0.0))

    def exposition(self) -> bytes:
        """The text format for `/metrics`: this process's values, or every worker's summed."""
        if self._shared_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=str(self._shared_dir))  # type: ignore[no-untyped-call]
        return generate_latest(merged)
