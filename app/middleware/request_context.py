"""Around every request (inside CORS alone): its id, its one log line, its metrics, its span.

Also the last-resort handler: an unexpected exception becomes a plain 500 error body here.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Callable

import structlog
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.error_body import error_body, error_json
from app.errors import GenAIError
from app.observability.facts import RequestFacts, open_request_facts
from app.observability.metrics import Metrics
from app.observability.tracing import Span, span

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
REQUEST_ID_HEADER = "x-request-id"
OVERHEAD_HEADER = "x-genai-overhead-ms"
_TRACE_HEADERS = (b"traceparent", b"tracestate")


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


def _request_id(headers: dict[bytes, bytes]) -> str:
    """The caller's `x-request-id` when it is a sane one, else a new id."""
    incoming = headers.get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
    return incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex


def _trace_carrier(headers: dict[bytes, bytes]) -> dict[str, str]:
    """The W3C trace context the caller sent, for the server span to continue."""
    return {
        name.decode(): headers[name].decode("latin-1") for name in _TRACE_HEADERS if name in headers
    }


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
        request_id = _request_id(headers)
        scope.setdefault("state", {})["request_id"] = request_id
        facts = open_request_facts(request_id)
        started = time.perf_counter()
        status = 500
        response_started = False
        method = scope["method"]

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
            carrier=_trace_carrier(headers),
        ) as server:
            try:
                await self.app(scope, receive, send_with_id)
            except asyncio.CancelledError:
                status = 499  # the client closed the connection before the answer
                raise
            except ClientDisconnect:  # gone while its body was read: nobody is left to answer
                status = 499
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
                self._finish(scope, server, status, time.perf_counter() - started, facts)

    def _finish(
        self, scope: Scope, server: Span, status: int, duration: float, facts: RequestFacts
    ) -> None:
        """The request's end: its span named and closed, its one log line, its metrics."""
        method, route = scope["method"], route_template(scope)
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
