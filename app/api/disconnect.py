"""Cancel a request's work when its client goes away, so the job is recorded as cancelled."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request

T = TypeVar("T")


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await `work` in this task (so its log context stays ours); cancel it on `http.disconnect`.

    The request body has already been read, so the next ASGI message can only be a disconnect.
    """
    request_task = asyncio.current_task()
    assert request_task is not None
    running = True

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                if running:
                    request_task.cancel()
                return

    watcher = asyncio.create_task(watch())
    try:
        return await work
    finally:
        running = False
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
