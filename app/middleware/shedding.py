"""Shed a completion at the door when the gateway is full: 503 `overloaded` with Retry-After.

A pure ASGI middleware outside authentication, so a request that would only be refused costs
no key check, no body read and no validation: under overload the event loop's time goes to the
requests it admitted (`bench/overload.py` measures it). The limit itself still decides at
acquisition (`app/concurrency/limits.py`); this only answers the obvious cases early.
"""

from __future__ import annotations

from typing import cast

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import genai_error_response
from app.api.paths import SHED_PATHS
from app.errors import Overloaded
from app.runtime import Runtime


class ShedMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in SHED_PATHS:
            request = Request(scope)
            runtime = cast(Runtime, request.app.state.runtime)
            try:
                runtime.limits.completion().refuse_if_full()
            except Overloaded as exc:
                await genai_error_response(request, exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)
