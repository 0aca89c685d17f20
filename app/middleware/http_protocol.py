"""Uvicorn's httptools protocol, with the two bounds on a request's head that it lacks.

Uvicorn with httptools buffers a request line and headers of any size, for as long as the client
takes to send them: an anonymous caller could hold hundreds of megabytes per connection (a 200 MB
header was accepted) or keep thousands of half-sent requests open for ever (slowloris). Nginx
bounds both (`large_client_header_buffers`, `client_header_timeout`); so does this protocol:

- a head larger than `max_head_bytes` is answered `431 request_head_too_large` and the
  connection closed: counted after each read while the head is incomplete (so at most one read,
  256 KiB, past the bound is ever buffered), and measured exactly once it is complete;
- a head not complete `head_timeout_seconds` after its first byte is answered
  `408 request_head_timeout` and the connection closed.

Both answers are written here, before the app sees a request, in the gateway's error shape;
then the rest of what the client sends is read and thrown away (up to LINGER_BYTES and
LINGER_SECONDS, nginx's lingering close), so a client still sending reads the answer instead of a
connection reset.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = structlog.get_logger(__name__)

LINGER_BYTES = 1024 * 1024
LINGER_SECONDS = 2.0


def _refusal(status: int, reason: str, error_type: str, message: str) -> bytes:
    log.warning("request_head_refused", status=status, error_type=error_type)
    body = json.dumps({"error": {"type": error_type, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BoundedHeadProtocol(HttpToolsProtocol):
    """Made per connection by uvicorn, through `functools.partial` with the two bounds."""

    def __init__(
        self, *args: Any, max_head_bytes: int, head_timeout_seconds: float, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._max_head_bytes = max_head_bytes
        self._head_timeout_seconds = head_timeout_seconds
        self._head_bytes = 0
        self._in_head = True  # until the current request's headers are complete
        self._head_timer: asyncio.TimerHandle | None = None
        self._lingering = -1  # bytes thrown away since the refusal; -1: not refused

    def data_received(self, data: bytes) -> None:
        if self._lingering >= 0:
            self._lingering += len(data)
            if self._lingering > LINGER_BYTES:
                self.transport.close()
            return
        if self._in_head and self._head_timer is None:
            self._head_timer = self.loop.call_later(self._head_timeout_seconds, self._too_slow)
        counting = self._in_head
        super().data_received(data)
        if counting and self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head_bytes:
                self._refuse_too_large()

    def on_headers_complete(self) -> None:
        self._end_head()
        if self._lingering >= 0:
            return
        # A head that arrived within one read was never counted above: measured here, exactly.
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self._max_head_bytes:
            self._refuse_too_large()
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._lingering < 0:  # else the request was refused: what follows is dropped
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._lingering < 0:
            super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._in_head, self._head_bytes = True, 0  # the next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def _end_head(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse_too_large(self) -> None:
        self._refuse(
            _refusal(
                431,
                "Request Header Fields Too Large",
                "request_head_too_large",
                f"The request line and headers are larger than {self._max_head_bytes} bytes "
                "(GENAI_REQUEST__MAX_HEAD_BYTES).",
            )
        )

    def _too_slow(self) -> None:
        self._head_timer = None
        if self._in_head and not self.transport.is_closing():
            self._refuse(
                _refusal(
                    408,
                    "Request Timeout",
                    "request_head_timeout",
                    f"The request line and headers did not arrive within "
                    f"{self._head_timeout_seconds:g} s (GENAI_REQUEST__HEAD_TIMEOUT_SECONDS).",
                )
            )

    def _refuse(self, answer: bytes) -> None:
        """Answer, stop sending, and read (and drop) what still comes for a bounded while."""
        self._end_head()
        self.transport.write(answer)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self._lingering = 0
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
