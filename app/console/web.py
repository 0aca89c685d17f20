"""How console pages are drawn: one autoescaping Jinja2 environment, the shared page context
(who is signed in, the CSRF token, the navigation) and the security headers of every answer."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from starlette.responses import HTMLResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth.sessions import Session

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
PREFIX = "/console"

# Nothing but the console's own files: no inline script or style, no other origin, no framing.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),  # pages hold prompts and answers: no copy on disk
)


@dataclass(frozen=True, slots=True)
class NavItem:
    path: str
    title: str
    admin_only: bool
    also: tuple[str, ...] = ()  # other paths that belong to this page (its current marker)

    def covers(self, path: str) -> bool:
        return any(path == root or path.startswith(root + "/") for root in (self.path, *self.also))


# The pages in the order the issue builds them; a `complete` key sees the catalog, the
# playground and its own usage.
NAVIGATION = (
    NavItem("/console/patterns", "Patterns", admin_only=False, also=("/console/templates",)),
    NavItem("/console/playground", "Playground", admin_only=False),
    NavItem("/console/snippets", "Snippets", admin_only=True),
    NavItem("/console/jobs", "Jobs", admin_only=True),
    NavItem("/console/keys", "Keys and teams", admin_only=True, also=("/console/teams",)),
    NavItem("/console/usage", "Usage", admin_only=False),
    NavItem("/console/integrity", "Integrity", admin_only=True),
)


def _when(value: Any) -> str:
    """An ISO timestamp (or datetime) as `2026-11-27 08:03:11 UTC`; anything else as given."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _environment() -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,  # every value is text, whatever it holds
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["when"] = _when
    environment.filters["pretty_json"] = _pretty_json
    return environment


class Pages:
    """Renders a template with the context every page shares."""

    def __init__(self) -> None:
        self._environment = _environment()

    def render(
        self,
        template: str,
        *,
        path: str,
        session: Session | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        navigation = [
            item
            for item in NAVIGATION
            if session is not None and (session.is_admin or not item.admin_only)
        ]
        html = self._environment.get_template(template).render(
            path=path,
            session=session,
            csrf=session.csrf if session is not None else context.pop("csrf", ""),
            navigation=navigation,
            **context,
        )
        return HTMLResponse(html, status_code=status)


class ConsoleHeaders:
    """Adds the console's security headers to every answer under /console."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] not in dict(_HEADERS)]
                message["headers"] = [*headers, *_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
