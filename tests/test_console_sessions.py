"""The console's front door over HTTP: sign-in with a key, the session cookie and its CSRF
token, sign-out, the security headers, and the cookie's use on `/v1` (issue 21)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.schemas import ApiKeyCreate
from app.store.events import EventFilter
from tests.support import running_app, settings_for

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass(frozen=True)
class Console:
    app: FastAPI
    web: httpx.AsyncClient  # a browser: cookies, no key header
    key: str  # an admin key to sign in with

    def __iter__(self) -> Iterator[Any]:
        return iter((self.app, self.web, self.key))


@pytest.fixture
async def console() -> AsyncIterator[Console]:
    """The app, a browser-like client (no key header), and an admin key to sign in with."""
    async with running_app(settings_for(None)) as (app, _):
        admin = await app.state.runtime.authenticator.create(
            ApiKeyCreate(scope="admin", name="console-admin")
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as web:
            yield Console(app, web, admin.key)


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found is not None, html
    return found[1]


async def sign_in(web: httpx.AsyncClient, key: str, next_path: str = "/console") -> httpx.Response:
    form = await web.get("/console/login")
    return await web.post(
        "/console/login", data={"key": key, "csrf": csrf_of(form.text), "next": next_path}
    )


async def test_a_page_without_a_session_sends_the_browser_to_sign_in_and_back(
    console: Console,
) -> None:
    _, web, key = console
    first = await web.get("/console?status=failed")
    assert first.status_code == 303
    assert first.headers["location"] == "/console/login?next=/console%3Fstatus%3Dfailed"

    signed = await sign_in(web, key, next_path="/console?status=failed")
    assert signed.status_code == 303
    assert signed.headers["location"] == "/console?status=failed"
    cookie = signed.headers["set-cookie"]
    assert "genai_console=" in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # plain HTTP here; behind TLS the cookie is Secure

    home = await web.get("/console")
    assert home.status_code == 200
    assert "Keys and teams" in home.text  # an admin sees every page


async def test_every_console_answer_carries_a_strict_content_security_policy(
    console: Console,
) -> None:
    _, web, _ = console
    for path in ("/console/login", "/console", "/console/static/console.css"):
        response = await web.get(path)
        policy = response.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy
        assert "'unsafe-inline'" not in policy
        assert response.headers["x-frame-options"] == "DENY"


async def test_sign_in_refuses_a_bad_key_a_forged_form_and_a_redirect_elsewhere(
    console: Console,
) -> None:
    _, web, key = console
    wrong = await sign_in(web, "gsk_not_a_key")
    assert wrong.status_code == 401
    assert "not valid" in wrong.text and "genai_console=" not in wrong.headers.get("set-cookie", "")

    endless = await sign_in(web, "gsk_" + "x" * 5000)  # told on the page, not a JSON 422
    assert endless.status_code == 401 and "text/html" in endless.headers["content-type"]

    forged = await web.post("/console/login", data={"key": key, "csrf": "forged"})
    assert forged.status_code == 403 and "expired" in forged.text

    elsewhere = await sign_in(web, key, next_path="//evil.example/console")
    assert elsewhere.headers["location"] == "/console"


async def test_the_session_cookie_works_on_v1_only_with_its_csrf_token(console: Console) -> None:
    _, web, key = console
    await sign_in(web, key)
    token = csrf_of((await web.get("/console")).text)

    assert (await web.get("/v1/patterns")).status_code == 401  # the cookie alone: no
    refused = await web.get("/v1/patterns", headers={"x-csrf-token": "guess"})
    assert refused.status_code == 401
    assert refused.json()["error"]["type"] == "unauthenticated"
    assert (await web.get("/v1/patterns", headers={"x-csrf-token": token})).status_code == 200


async def test_sign_out_needs_the_token_and_ends_the_session_everywhere(console: Console) -> None:
    app, web, key = console
    await sign_in(web, key)
    token = csrf_of((await web.get("/console")).text)
    session_cookie = web.cookies["genai_console"]

    assert (await web.post("/console/logout", data={"csrf": "nope"})).status_code == 403
    out = await web.post("/console/logout", data={"csrf": token})
    assert out.status_code == 303 and out.headers["location"] == "/console/login"

    web.cookies.set("genai_console", session_cookie)  # a copy kept by someone: still dead
    assert (await web.get("/console")).status_code == 303
    stale = await web.get("/v1/patterns", headers={"x-csrf-token": token})
    assert stale.status_code == 401
    actions = [
        e.action
        for e in (await app.state.runtime.admin_events.page(EventFilter(), limit=50)).events
    ]
    assert actions.count("console.signed_in") == 1 and "console.signed_out" in actions


async def test_revoking_the_key_ends_its_console_sessions(console: Console) -> None:
    app, web, _ = console
    reader = await app.state.runtime.authenticator.create(
        ApiKeyCreate(scope="complete", name="reader")
    )
    await sign_in(web, reader.key)
    home = await web.get("/console")
    assert home.status_code == 200
    assert "Keys and teams" not in home.text  # a complete key sees the catalog, not the keys
    assert (await web.get("/console/keys")).status_code in (403, 404)

    await app.state.runtime.authenticator.revoke(reader.id)
    assert (await web.get("/console")).status_code == 303
