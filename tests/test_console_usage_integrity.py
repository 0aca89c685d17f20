"""The console's usage and integrity pages over HTTP (issue 21): charts drawn from real
completions, a complete key seeing its own usage only, the admin-only integrity page verifying
the chain on request and reporting a tampered job, CSRF, escaping and API errors shown."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from app.config import AuditSettings
from tests.clock import days_ago, iso_day
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for
from tests.test_console_sessions import csrf_of, sign_in

SUMMARIZE = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "Hi."}


@dataclass(frozen=True)
class Site:
    app: FastAPI
    web: httpx.AsyncClient  # a browser: cookies, no key header
    admin_key: str
    keys: dict[str, dict[str, Any]]  # "a", "b": complete keys that made completions
    jobs: list[str]
    seqs: list[int]  # the jobs' audit chain entries


@pytest.fixture
async def site(fake: FakeProviderServer) -> AsyncIterator[Site]:
    settings = settings_for(fake, audit=AuditSettings(chain_seconds=0.05))
    async with running_app(settings) as (app, api):
        admin = await api.post("/v1/keys", json={"scope": "admin", "name": "console admin"})
        keys = {}
        jobs = []
        for who, count in (("a", 2), ("b", 1)):
            keys[who] = (await api.post("/v1/keys", json={"scope": "complete", "name": who})).json()
            for _ in range(count):
                resp = await api.post(
                    "/v1/completions",
                    json=SUMMARIZE,
                    headers={"Authorization": f"Bearer {keys[who]['key']}"},
                )
                assert resp.status_code == 200, resp.text
                jobs.append(resp.json()["job_id"])
        await app.state.runtime.writer.catch_up()
        await app.state.runtime.chainer.run_once(wait=True)
        seqs = [(await api.get(f"/v1/jobs/{job}")).json()["chain_seq"] for job in jobs]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as web:
            yield Site(app, web, admin.json()["key"], keys, jobs, seqs)


async def test_the_usage_page_charts_every_key_for_an_admin(site: Site) -> None:
    await sign_in(site.web, site.admin_key)
    page = await site.web.get("/console/usage", params={"group_by": "key", "bucket": "hour"})
    assert page.status_code == 200, page.text
    html = page.text
    for figure in ("requests", "errors", "overhead", "tokens", "cost"):
        assert f'id="{figure}-chart"' in html
    # Each chart's numbers as a table too; no job failed, so the errors table is left out.
    for figure in ("requests", "overhead", "tokens", "cost"):
        assert f'id="{figure}-table"' in html
    assert 'id="errors-table"' not in html and "All zero in this window." in html
    assert site.keys["a"]["id"] in html and site.keys["b"]["id"] in html
    assert '<title id="requests-title">Requests per hour</title>' in html
    assert "style=" not in html and "<script>" not in html.split("</head>")[1]


async def test_a_complete_key_sees_its_own_usage_only(site: Site) -> None:
    await sign_in(site.web, site.keys["a"]["key"])
    page = await site.web.get("/console/usage", params={"group_by": "key", "bucket": "day"})
    assert page.status_code == 200, page.text
    assert site.keys["a"]["id"] in page.text
    assert site.keys["b"]["id"] not in page.text
    assert "Your key's jobs only" in page.text
    # Requests total: its own two completions, not the three in all.
    assert "<dt>Requests</dt><dd>2</dd>" in page.text


async def test_bad_usage_input_is_shown_as_the_api_error_escaped(site: Site) -> None:
    await sign_in(site.web, site.admin_key)
    hostile = await site.web.get("/console/usage", params={"since": "<script>alert(1)</script>"})
    assert hostile.status_code == 200
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile.text
    assert "<script>alert(1)" not in hostile.text
    too_long = await site.web.get(
        "/console/usage", params={"bucket": "hour", "since": iso_day(days_ago(60))}
    )
    assert "422" in too_long.text and "31 days" in too_long.text


async def test_the_integrity_page_is_admin_only_and_verification_needs_the_token(
    site: Site,
) -> None:
    await sign_in(site.web, site.keys["a"]["key"])
    assert (await site.web.get("/console/integrity")).status_code == 403
    await sign_in(site.web, site.admin_key)
    forged = await site.web.post("/console/integrity/verify", data={"csrf": "guess"})
    assert forged.status_code == 403 and "security token" in forged.text


async def test_the_integrity_page_shows_state_keys_events_and_escapes_them(site: Site) -> None:
    await sign_in(site.web, site.admin_key)
    page = await site.web.get("/console/integrity")
    assert page.status_code == 200, page.text
    html = page.text
    head = re.search(r"head at entry (\d+)", html)  # the jobs and key events, chained
    assert head is not None and int(head[1]) >= max(site.seqs)
    assert "key.created" in html  # the admin event log
    assert 'id="counters"' in html and "Fallback prompts used" in html
    assert 'id="signing-keys"' in html or "Signing is off" in html
    # A made-up cursor: the API's refusal shown in its section, the value escaped.
    hostile = await site.web.get("/console/integrity", params={"cursor": "<script>x</script>"})
    assert hostile.status_code == 200
    assert "<script>x" not in hostile.text and "key.created" not in hostile.text
    assert 'class="error" role="alert">422' in hostile.text


async def test_verification_reports_ok_then_the_tampered_job(site: Site) -> None:
    await sign_in(site.web, site.admin_key)
    token = csrf_of((await site.web.get("/console/integrity")).text)
    ok = await site.web.post("/console/integrity/verify", data={"csrf": token})
    assert ok.status_code == 200, ok.text
    # The chain has grown since (sign-ins are admin events): every entry up to its head.
    found = re.search(r"OK:</span> entries 1 to (\d+) verify", ok.text)
    assert found is not None, ok.text
    assert int(found[1]) >= max(site.seqs)
    assert f"<dt>Entries checked</dt><dd>{found[1]}</dd>" in ok.text

    async with site.app.state.runtime.database.sessions.begin() as session:
        await session.execute(
            text("UPDATE jobs SET cost_usd = 99 WHERE id = :id"), {"id": site.jobs[1]}
        )
    bad = await site.web.post("/console/integrity/verify", data={"csrf": token})
    assert "Problem:" in bad.text and f"edited at seq <code>{site.seqs[1]}</code>" in bad.text
    assert site.jobs[1] in bad.text
