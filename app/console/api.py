"""ConsoleApi: the service's own `/v1` API, called in process as the signed-in key.

A page never reaches past the API into repositories: what it shows and what it changes go
through the same routes, scope checks, validation, error bodies and admin event log as curl.
The call carries the browser's session cookie and CSRF token, so the API authenticates it the
way it authenticates the page's own scripts (app/middleware/auth.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request

from app.auth.sessions import CSRF_HEADER, SESSION_COOKIE, Session

_INTERNAL_BASE = "http://console.internal"
_TIMEOUT_SECONDS = 300.0  # a playground run lasts as long as a completion may


@dataclass(frozen=True)
class ApiError(Exception):
    """A `/v1` call answered with an error: its status and the service's own error body."""

    status: int
    type: str
    message: str
    failures: tuple[str, ...] = ()  # `tests_failed`: each failing case, as the API names it

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.message}"


def _error_of(response: httpx.Response) -> ApiError:
    try:
        error = response.json().get("error", {})
    except ValueError:
        error = {}
    if not isinstance(error, dict):
        error = {}
    failures = error.get("failures")
    return ApiError(
        status=response.status_code,
        type=str(error.get("type", "error")),
        message=str(error.get("message", response.reason_phrase)),
        failures=tuple(map(str, failures)) if isinstance(failures, list) else (),
    )


class ConsoleApi:
    def __init__(self, request: Request, token: str, session: Session) -> None:
        client = request.client
        self._transport = httpx.ASGITransport(
            app=request.app, client=(client.host, client.port) if client else ("127.0.0.1", 0)
        )
        self._headers = {
            "cookie": f"{SESSION_COOKIE}={token}",
            CSRF_HEADER: session.csrf,
            "user-agent": request.headers.get("user-agent", "genai-console")[:200],
        }

    async def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
    ) -> Any:
        """The JSON answer of `method path`, or ApiError with the API's status and message."""
        response = await asyncio.create_task(self._send(method, path, params, json))
        if response.status_code >= 400:
            raise _error_of(response)
        return None if response.status_code == 204 or not response.content else response.json()

    async def get(self, path: str, **params: Any) -> Any:
        kept = {name: value for name, value in params.items() if value not in (None, "")}
        return await self.call("GET", path, params=kept)

    async def _send(
        self, method: str, path: str, params: Mapping[str, Any] | None, json: Any
    ) -> httpx.Response:
        # Its own task: the inner request's log context and request facts stay its own.
        async with httpx.AsyncClient(
            transport=self._transport,
            base_url=_INTERNAL_BASE,
            headers=self._headers,
            timeout=_TIMEOUT_SECONDS,
            trust_env=False,
        ) as http:
            return await http.request(method, path, params=params, json=json)
