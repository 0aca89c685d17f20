"""Server-Sent Events for a streamed completion: `delta` events (`tool_call` and `reasoning`
pieces too, when the model makes them), then `envelope` or `error`.

A pure ASGI response: it sends the headers, then relays the service's events while watching for
the client's `http.disconnect`. A client that goes away cancels the relay, which cancels the
upstream call, and the job is recorded as cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Callable, Iterable

import structlog
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.api.error_body import error_body, error_json
from app.api.responses import json_bytes
from app.providers.base import ReasoningDelta, ToolCallDelta
from app.schemas import CompletionEnvelope
from app.service import ClientStoppedReading, StreamDelta, StreamFailed, StreamOutput

DEFAULT_SEND_TIMEOUT = 30.0
log = structlog.get_logger(__name__)

HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),  # nginx and similar proxies must not hold the stream back
]


def encode(event: StreamOutput, *, request_id: str | None) -> bytes:
    """One SSE frame; the data is a single line of JSON (orjson never writes a newline)."""
    if isinstance(event, StreamDelta):
        name, data = b"delta", json_bytes({"text": event.text})
    elif isinstance(event, ToolCallDelta):
        name, data = b"tool_call", json_bytes(dataclasses.asdict(event))
    elif isinstance(event, ReasoningDelta):
        name, data = b"reasoning", json_bytes(dataclasses.asdict(event))
    elif isinstance(event, CompletionEnvelope):
        name, data = b"envelope", json_bytes(event)
    else:
        assert isinstance(event, StreamFailed)
        body = error_json(error_body(event.error, request_id=request_id))
        name, data = b"error", json_bytes(body)
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


Frames = Callable[[StreamOutput], Iterable[bytes]]
"""How one of the service's events is written on the wire (the gateway's or OpenAI's framing)."""


class EventStreamResponse(Response):
    """A Response (so FastAPI sends it as is) whose body is relayed as the events arrive."""

    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[StreamOutput, None],
        *,
        request_id: str | None,
        frames: Frames | None = None,
        headers: dict[str, str] | None = None,
        send_timeout: float = DEFAULT_SEND_TIMEOUT,
    ) -> None:
        self.events = events
        self.send_timeout = send_timeout  # one send, waiting on a client that stopped reading
        self.frames: Frames = frames or (lambda event: (encode(event, request_id=request_id),))
        self.status_code = 200
        self.background = None
        self.raw_headers = [*HEADERS] + [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in (headers or {}).items()
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        relay = asyncio.ensure_future(self._relay(send))

        async def watch() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    relay.cancel()
                    return

        watcher = asyncio.ensure_future(watch())
        try:
            await relay
        except asyncio.CancelledError:
            if not relay.cancelled():  # we were cancelled ourselves, not by a disconnect
                relay.cancel()
                raise
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _relay(self, send: Send) -> None:
        try:
            start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
            await self._send(send, start)
            async for event in self.events:
                for frame in self.frames(event):
                    body = {"type": "http.response.body", "body": frame, "more_body": True}
                    await self._send(send, body)
            await self._send(send, {"type": "http.response.body", "body": b"", "more_body": False})
        except _Stalled:
            # The client stopped reading: the job ends cancelled with that reason and frees its
            # slot; the connection is closed once this returns (the response cannot complete).
            log.warning("stream_client_stopped_reading", send_timeout_s=self.send_timeout)
            with contextlib.suppress(StopAsyncIteration, ClientStoppedReading):
                await self.events.athrow(ClientStoppedReading())
        finally:
            await self.events.aclose()

    async def _send(self, send: Send, message: Message) -> None:
        try:
            async with asyncio.timeout(self.send_timeout):
                await send(message)
        except TimeoutError:
            raise _Stalled from None


class _Stalled(Exception):
    """A send waited longer than the send timeout on a client that does not read."""
