"""The request body limit: a body over GENAI_MAX_BODY_BYTES is refused with 413 before it is read.

A pure ASGI middleware, so nothing is buffered on the way: a declared Content-Length over the
limit is answered at once, and a body without one (chunked) is counted as it streams and cut
off at the first chunk past the limit, so at most `max_bytes` plus one chunk is ever held.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import genai_error_response
from app.errors import PayloadTooLarge


def _too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The request body is larger than {max_bytes} bytes (GENAI_MAX_BODY_BYTES)."
    )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _declared_length(scope)
        if declared is not None and declared > self.max_bytes:
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
                    # Raised inside the route's body read: FastAPI re-raises HTTPException, and
                    # the one HTTP error handler renders it as payload_too_large.
                    raise HTTPException(413, detail=_too_large(self.max_bytes).message)
            return message

        await self.app(scope, counting_receive, send)
