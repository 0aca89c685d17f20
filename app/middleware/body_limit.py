"""The request body limit: a body over GENAI_MAX_BODY_BYTES is refused with 413 before it is read.

A pure ASGI middleware, so nothing is buffered on the way: a declared Content-Length over the
limit is refused before the body is read, and a body without one (chunked) is counted as it
streams and cut off at the first chunk past the limit, so at most `max_bytes` plus one chunk is
ever held. Either way the rest of the body is then read and thrown away, up to DRAIN_BYTES and
DRAIN_SECONDS (nginx's "lingering close"): a client still uploading reads the 413 instead of a
connection reset. A client that asked `Expect: 100-continue` has sent nothing yet: it is
answered at once.
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import genai_error_response
from app.errors import PayloadTooLarge
from app.schemas.base import InputLimits, input_limits


def _too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than {max_bytes} bytes (GENAI_MAX_BODY_BYTES)."
    )


DRAIN_BYTES = 64 * 1024 * 1024
DRAIN_SECONDS = 5.0


async def drain(scope: Scope, receive: Receive) -> None:
    """Read and discard the rest of a refused body, within the bounds above (also used by the
    authentication middleware, which refuses before reading the body too)."""
    if any(name == b"expect" for name, _ in scope.get("headers", [])):
        return  # 100-continue: the body has not been sent, and now will not be
    discarded = 0
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DRAIN_SECONDS):
            while discarded < DRAIN_BYTES:
                message = await receive()
                if message["type"] != "http.request":
                    return
                discarded += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    """The byte cap, and the request's other input limits (GENAI_REQUEST__*) for validation."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, limits: InputLimits) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
            await drain(scope, receive)
            response = genai_error_response(Request(scope), _too_large(self.max_bytes))
            # The unread body is left to the server; Connection: close stops keep-alive reuse.
            response.headers["connection"] = "close"
            await response(scope, receive, send)
            return

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    if message.get("more_body", False):
                        await drain(scope, receive)
                    # Raised inside the route's body read: FastAPI re-raises HTTPException, and
                    # the one HTTP error handler renders it as payload_too_large.
                    raise HTTPException(413, detail=_too_large(self.max_bytes).message)
            return message

        with input_limits(self.limits):
            await self.app(scope, counting_receive, send)
