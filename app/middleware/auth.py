"""Authentication before anything else: a `/v1` request without a valid key is refused with 401
before its body is read or parsed, so an anonymous caller learns nothing and costs little.

A signed-in console page (issue 21) calls `/v1` with its session cookie instead, and must echo
the session's CSRF token in `x-csrf-token`: a cookie alone, as another site can make a browser
send, authenticates nothing.

The route's own dependency (`require` in app/api/deps.py) then checks the key's scope (403).
"""

from __future__ import annotations

from typing import cast

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import genai_error_response
from app.auth.authenticator import Authenticator
from app.auth.protected import is_protected
from app.auth.sessions import CSRF_HEADER, SESSION_COOKIE
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
        presented = Authenticator.presented(
            request.headers.get("authorization"), request.headers.get("x-api-key")
        )
        try:
            session_cookie = request.cookies.get(SESSION_COOKIE)
            if presented is None and session_cookie and runtime.console is not None:
                principal = await runtime.console.principal_of_call(
                    session_cookie, request.headers.get(CSRF_HEADER)
                )
            else:
                principal = await runtime.authenticator.authenticate(presented)
        except GenAIError as exc:  # 401, or 503 when the key store cannot be read
            await drain(scope, receive)  # so a client still uploading can read the refusal
            await genai_error_response(request, exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)
