"""Authentication before anything else: a `/v1` request without a valid key is refused with 401
before its body is read or parsed, so an anonymous caller learns nothing and costs little.

The route's own dependency (`require` in app/api/deps.py) then checks the key's scope (403).
"""

from __future__ import annotations

from typing import cast

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import genai_error_response
from app.auth.authenticator import Authenticator
from app.auth.protected import is_protected
from app.errors import GenAIError
from app.middleware.body_limit import drain
from app.runtime import Runtime


class AuthMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_protected(scope["path"]):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        runtime = cast(Runtime, request.app.state.runtime)
        try:
            principal = await runtime.authenticator.authenticate(
                Authenticator.presented(
                    request.headers.get("authorization"), request.headers.get("x-api-key")
                )
            )
        except GenAIError as exc:  # 401, or 503 when the key store cannot be read
            await drain(scope, receive)  # so a client still uploading can read the refusal
            await genai_error_response(request, exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
