"""structlog set up once: context variables first, secrets scrubbed, JSON when not on a TTY."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Callable, MutableMapping
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings
from app.error_body import error_body, error_json
from app.errors import GenAIError
from app.observability.metrics import Metrics, RequestFacts, open_request_facts
from app.observability.tracing import add_trace_ids, span, tracing_enabled

_SECRET_KEYS = re.compile(r"authorization|api[-_]?key|secret|password|cookie", re.IGNORECASE)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
REQUEST_ID_HEADER = "x-request-id"
OVERHEAD_HEADER = "x-genai-overhead-ms"
_TRACE_HEADERS = (b"traceparent", b"tracestate")


def scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Never let a credential reach a log line, whatever a caller binds."""
    for key in list(event):
        if _SECRET_KEYS.search(key):
            event[key] = "[redacted]"
    return event


def logs_as_json(settings: Settings) -> bool:
    return settings.log_json if settings.log_json is not None else not sys.stderr.isatty()


def _renderer(as_json: bool) -> Any:
    return structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()


def configure_logging(settings: Settings) -> None:
    """Call after `configure_tracing`: with tracing on, every line names its trace and span."""
    as_json = logs_as_json(settings)
    renderer = _renderer(as_json)
    traced = [add_trace_ids] if tracing_enabled() else []
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *traced,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )


def uvicorn_formatter(as_json: bool) -> logging.Formatter:
    """Uvicorn's own lines (start-up, errors) rendered like ours: timestamp, level, JSON."""
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.contextvars.merge_contextvars,
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            scrub_secrets,
        ],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, _renderer(as_json)],
    )


def uvicorn_log_config(settings: Settings) -> dict[str, Any]:
    """uvicorn's `log_config`: its loggers write through `uvicorn_formatter` to stderr.

    Plain data (the formatter named by its import path), because uvicorn hands it to every
    worker process.
    """
    level = settings.log_level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structlog": {
                "()": "app.observability.logging.uvicorn_formatter",
                "as_json": logs_as_json(settings),
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "structlog",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            name: {"handlers": ["stderr"], "level": level, "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }


def route_template(scope: Scope) -> str:
    """The matched route's path template (`/v1/jobs/{job_id}`), never the raw path: a metric
    label must stay bounded. `unrouted`: refused before routing (401, 413, shed 503) or no
    route matched (404)."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) else "unrouted"


def _overhead_ms(started: float, facts: RequestFacts) -> float:
    """The gateway's own time so far: elapsed minus the time spent waiting upstream."""
    elapsed = time.perf_counter() - started
    return round(max(0.0, elapsed - facts.upstream_seconds) * 1000, 2)


log = structlog.get_logger("app.request")

_INTERNAL_ERROR = GenAIError(
    "The service failed unexpectedly; the request id identifies the log line."
)


def _internal_error_body(request_id: str) -> bytes:
    return json.dumps(error_json(error_body(_INTERNAL_ERROR, request_id=request_id))).encode()


class RequestContextMiddleware:
    """Binds a request id, echoes it as `x-request-id` beside `x-genai-overhead-ms`, writes one
    canonical line per request, counts it (`genai_requests_total` and friends) and, with tracing
    on, wraps it in the server span.

    It is also the last-resort handler: an unexpected exception becomes a plain 500 error body
    here, so no traceback is printed or returned. `metrics` gives the app's Metrics once its
    lifespan has built them (None before).
    """

    def __init__(self, app: ASGIApp, metrics: Callable[[], Metrics | None] = lambda: None) -> None:
        self.app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        incoming = headers.get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        facts = open_request_facts()
        started = time.perf_counter()
        status = 500
        response_started = False
        method = scope["method"]
        carrier = {
            name.decode(): headers[name].decode("latin-1")
            for name in _TRACE_HEADERS
            if name in headers
        }

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                message["headers"] = [
                    *message.get("headers", []),
                    (REQUEST_ID_HEADER.encode(), request_id.encode()),
                    (OVERHEAD_HEADER.encode(), str(_overhead_ms(started, facts)).encode()),
                ]
            await send(message)

        with span(
            method,
            kind="server",
            attributes={"http.request.method": method, "url.path": scope["path"]},
            carrier=carrier,
        ) as server:
            try:
                await self.app(scope, receive, send_with_id)
            except asyncio.CancelledError:
                status = 499  # the client closed the connection before the answer
                raise
            except Exception as exc:
                log.error("unhandled_error", error_type=type(exc).__name__)
                if not response_started:
                    await send_with_id(
                        {
                            "type": "http.response.start",
                            "status": 500,
                            "headers": [(b"content-type", b"application/json")],
                        }
                    )
                    await send(
                        {"type": "http.response.body", "body": _internal_error_body(request_id)}
                    )
            finally:
                duration = time.perf_counter() - started
                route = route_template(scope)
                server.rename(f"{method} {route}")
                server.set("http.route", route)
                server.set("http.response.status_code", status)
                if status >= 500:
                    server.fail(str(status))
                log.info(
                    "request",
                    method=method,
                    path=scope["path"],
                    status=status,
                    duration_ms=round(duration * 1000, 2),
                )
                self._count(route, status, duration, facts)

    def _count(self, route: str, status: int, duration: float, facts: RequestFacts) -> None:
        metrics = self._metrics()
        if metrics is None:
            return
        labels = (route, facts.pattern, facts.provider, facts.model, str(status))
        metrics.requests.labels(*labels).inc()
        metrics.request_seconds.labels(*labels).observe(duration)
        metrics.overhead_seconds.labels(route).observe(max(0.0, duration - facts.upstream_seconds))
