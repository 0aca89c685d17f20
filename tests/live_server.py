"""The real app served by uvicorn on a loopback port, for callers that need a URL: a client
generated from the OpenAPI document and schemathesis talk HTTP, not ASGI."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import uvicorn

from app.config import Settings
from app.main import create_app
from app.schemas import ApiKeyCreate

_START_SECONDS = 30.0


@dataclass(frozen=True)
class LiveGateway:
    base_url: str
    admin_key: str


@contextlib.contextmanager
def live_gateway(settings: Settings) -> Iterator[LiveGateway]:
    """Serve `create_app(settings)` in a background thread and mint an admin key on its loop."""
    app = create_app(settings)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", loop="asyncio", lifespan="on"
    )
    server = uvicorn.Server(config)
    server_loop: list[asyncio.AbstractEventLoop] = []

    async def serve() -> None:
        server_loop.append(asyncio.get_running_loop())
        await server.serve(sockets=[sock])

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="live-gateway")
    thread.start()
    try:
        deadline = time.monotonic() + _START_SECONDS
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start; its log says why")
            time.sleep(0.02)
        created = asyncio.run_coroutine_threadsafe(
            app.state.runtime.authenticator.create(ApiKeyCreate(scope="admin", name="live-admin")),
            server_loop[0],
        ).result(timeout=_START_SECONDS)
        yield LiveGateway(base_url=f"http://127.0.0.1:{port}", admin_key=created.key)
    finally:
        server.should_exit = True
        thread.join(timeout=_START_SECONDS)
        sock.close()
        if settings.data_dir.name.startswith("genai-test-"):
            shutil.rmtree(settings.data_dir, ignore_errors=True)
