"""A loopback webhook receiver: a real HTTP server on 127.0.0.1 in a thread, scripted per request.

Each request takes the next scripted reply (a status, optionally with headers, or `HANG`: no
answer until `release()`), and is recorded with its headers and raw body so tests can verify the
HMAC signature of every delivery. With the script exhausted it answers 200.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.threaded_server import serving_in_thread

HANG = -1


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    url: str = ""
    received: list[Received] = field(default_factory=list)
    script: deque[tuple[int, dict[str, str]]] = field(default_factory=deque)
    hanging: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _released: threading.Event = field(default_factory=threading.Event)

    def reply(self, *statuses: int, headers: dict[str, str] | None = None) -> None:
        for status in statuses:
            self.script.append((status, headers or {}))

    def release(self) -> None:
        """Let every hanging request answer (200)."""
        self._released.set()

    async def _handle(self, request: Request) -> Response:
        body = await request.body()
        with self._lock:
            self.received.append(Received(dict(request.headers), body))
            status, headers = self.script.popleft() if self.script else (200, {})
        if status == HANG:
            with self._lock:
                self.hanging += 1
            await asyncio.to_thread(self._released.wait, 60)  # set by release() or at stop
            status = 200
        return Response(status_code=status, headers=headers)

    @property
    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook", self._handle, methods=["POST"])])


async def eventually(condition: Callable[[], Awaitable[bool]], *, seconds: float = 15.0) -> None:
    """Await until `condition()` is true; the bound only ends a stuck test (no timing claim)."""
    deadline = time.monotonic() + seconds
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


@contextmanager
def running_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    config = uvicorn.Config(
        receiver.app,
        log_level="warning",
        lifespan="off",
        loop="asyncio",
        timeout_graceful_shutdown=1,
    )
    with serving_in_thread(config, name="webhook-receiver", before_exit=receiver.release) as port:
        receiver.url = f"http://127.0.0.1:{port}/hook"
        yield receiver
