"""Prometheus metrics, in a registry owned by each app instance (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.completions = Counter(
            "genai_completions_total",
            "Completions by provider and final status.",
            ["provider", "status"],
            registry=self.registry,
        )
        self.upstream_seconds = Histogram(
            "genai_upstream_seconds",
            "Provider call latency, retries included.",
            ["provider"],
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
            "Job completions queued for the store.",
            registry=self.registry,
        )
