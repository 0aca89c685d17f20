"""A loopback uvicorn server in a thread of its own, for the fakes a test talks to over HTTP."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

Serve = Callable[[uvicorn.Server, socket.socket], Coroutine[Any, Any, None]]


async def _serve_plainly(server: uvicorn.Server, sock: socket.socket) -> None:
    await server.serve(sockets=[sock])


@contextmanager
def serving_in_thread(
    config: uvicorn.Config,
    *,
    name: str,
    serve: Serve = _serve_plainly,
    before_exit: Callable[[], None] = lambda: None,
) -> Iterator[int]:
    """Serve `config.app` on an ephemeral loopback port until the block ends; yields the port.

    `serve` runs in the thread's loop (a fake that must know its loop wraps it); `before_exit` is
    called from the test's thread before uvicorn is told to stop (to wake a fake's pending
    delays, so shutdown is quick)."""
    # IPPROTO_TCP, not 0: only then does asyncio set TCP_NODELAY, without which every reply on
    # a kept-alive connection waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=lambda: asyncio.run(serve(server, sock)), name=name, daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{name} failed to start")
            time.sleep(0.01)
        yield sock.getsockname()[1]
    finally:
        before_exit()
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
