"""structlog set up once: context variables first, secrets scrubbed, JSON when not on a TTY."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import MutableMapping
from typing import Any

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings
from app.error_body import error_body, error_json
from app.errors import GenAIError

_SECRET_KEYS = re.compile(r"authorization|api[-_]?key|secret|password|cookie", re.IGNORECASE)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
REQUEST_ID_HEADER = "x-request-id"


def scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Never let a credential reach a log line, whatever a caller binds."""
    for key in list(event):
        if _SECRET_KEYS.search(key):
            event[key] = "[redacted]"
    return event


def configure_logging(settings: Settings) -> None:
    as_json = settings.log_json if settings.log_json is not None else not sys.stderr.isatty()
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
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


log = structlog.get_logger("app.request")

_INTERNAL_ERROR = GenAIError(
    "The service failed unexpectedly; the request id identifies the log line."
)


def _internal_error_body(request_id: str) -> bytes:
    return json.dumps(error_json(error_body(_INTERNAL_ERROR, request_id=request_id))).encode()


class RequestContextMiddleware:
    """Binds a request id, echoes it as `x-request-id`, and writes one canonical line per request.

    It is also the last-resort handler: an unexpected exception becomes a plain 500 error body
    here, so no traceback is printed or returned.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = (
            dict(scope.get("headers", [])).get(REQUEST_ID_HEADER.encode(), b"").decode("latin-1")
        )
        request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status = message["status"]
                response_started = True
                message["headers"] = [
                    *message.get("headers", []),
                    (REQUEST_ID_HEADER.encode(), request_id.encode()),
                ]
            await send(message)

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
                await send({"type": "http.response.body", "body": _internal_error_body(request_id)})
        finally:
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round((time.perf_counter() - started) * 1000, 2),
            )
