"""OpenTelemetry traces, exported over OTLP/HTTP only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

Off (the default) nothing of OpenTelemetry is imported and every span below is one shared no-op,
so an untraced service pays a function call per span. On, `configure_tracing` builds an SDK
tracer provider with a batching OTLP/HTTP exporter; the exporter reads the standard OTEL_*
variables itself (endpoint, headers, timeout), and `OTEL_SERVICE_NAME`/`OTEL_RESOURCE_ATTRIBUTES`
name the service.

The tracer is process state, like structlog's configuration: spans open deep in the pipeline
(render, audit, provider calls) and OpenTelemetry's current-span context is process-wide anyway.
Each `create_app` sets it again, and the app's lifespan flushes it on shutdown.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # only for annotations: importing the SDK is the cost tracing-off avoids
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span as OtelSpan
    from opentelemetry.trace import Tracer

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
DEFAULT_SERVICE_NAME = "genai-service"

AttributeValue = str | bool | int | float | Sequence[str]
SpanKind = Literal["internal", "server", "client"]


class Span:
    """A span the pipeline can annotate; the no-op one when tracing is off."""

    __slots__ = ()

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set an attribute (None is skipped: an unknown value is left out, not invented)."""

    def rename(self, name: str) -> None:
        """The server span learns its route template only once routing has run."""

    def fail(self, error_type: str) -> None:
        """Mark the span failed with the error's type (`error.type`), without a traceback."""

    def end(self) -> None:
        """End a span opened with `begin_span` (a `span` block ends its own)."""


NO_SPAN = Span()


class _LiveSpan(Span):
    __slots__ = ("_span",)

    def __init__(self, span: OtelSpan) -> None:
        self._span = span

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None:
            self._span.set_attribute(key, value)

    def rename(self, name: str) -> None:
        self._span.update_name(name)

    def fail(self, error_type: str) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("error.type", error_type)
        self._span.set_status(Status(StatusCode.ERROR, error_type))

    def end(self) -> None:
        self._span.end()


class _Tracing:
    """The configured tracer and its provider (flushed and shut down by `shutdown_tracing`)."""

    def __init__(self, tracer: Tracer, provider: TracerProvider) -> None:
        self.tracer = tracer
        self.provider = provider


_tracing: _Tracing | None = None


def tracing_requested() -> bool:
    """An OTLP endpoint is configured and the standard OTEL_SDK_DISABLED switch is not set."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return bool(os.environ.get(ENDPOINT_ENV) or os.environ.get(TRACES_ENDPOINT_ENV))


def configure_tracing(version: str) -> bool:
    """Trace when an OTLP endpoint is configured; True when tracing is on."""
    global _tracing
    shutdown_tracing()
    if not tracing_requested():
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, str] = {"service.version": version}
    if not os.environ.get("OTEL_SERVICE_NAME"):  # the operator's name wins over ours
        attributes["service.name"] = DEFAULT_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _tracing = _Tracing(provider.get_tracer("app", version), provider)
    return True


def shutdown_tracing() -> None:
    """Export what is buffered and stop (at the app's shutdown); a no-op when tracing is off."""
    global _tracing
    if _tracing is not None:
        _tracing.provider.shutdown()
        _tracing = None


def _otel_kind(kind: SpanKind) -> Any:
    from opentelemetry.trace import SpanKind as OtelKind

    return {"internal": OtelKind.INTERNAL, "server": OtelKind.SERVER, "client": OtelKind.CLIENT}[
        kind
    ]


def _present(attributes: Mapping[str, AttributeValue | None] | None) -> dict[str, AttributeValue]:
    return {key: value for key, value in (attributes or {}).items() if value is not None}


@contextlib.contextmanager
def span(
    name: str,
    *,
    kind: SpanKind = "internal",
    attributes: Mapping[str, AttributeValue | None] | None = None,
    carrier: Mapping[str, str] | None = None,
) -> Iterator[Span]:
    """A span around the block, current inside it (its children nest under it). `carrier`:
    incoming W3C `traceparent`/`tracestate` headers, for a server span that continues a trace."""
    tracing = _tracing
    if tracing is None:
        yield NO_SPAN
        return
    context = None
    if carrier:
        from opentelemetry.propagate import extract

        context = extract(carrier)
    with tracing.tracer.start_as_current_span(
        name, context=context, kind=_otel_kind(kind), attributes=_present(attributes)
    ) as live:
        yield _LiveSpan(live)


def begin_span(
    name: str,
    *,
    kind: SpanKind = "internal",
    attributes: Mapping[str, AttributeValue | None] | None = None,
) -> Span:
    """A span under the current one that outlives this block (a stream): call `end()`."""
    tracing = _tracing
    if tracing is None:
        return NO_SPAN
    return _LiveSpan(
        tracing.tracer.start_span(name, kind=_otel_kind(kind), attributes=_present(attributes))
    )


def add_trace_ids(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor (installed only when tracing is on): the current trace and span."""
    from opentelemetry.trace import get_current_span

    context = get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    return event


def tracing_enabled() -> bool:
    return _tracing is not None
