"""The console's Jobs page over HTTP: the list filters and pages through GET /v1/jobs, a job
shows its redacted record inert (markup, a long line, right-to-left text), replay shows the
verdict, reveal shows the raw prompt once and leaves an admin event; a complete key is refused,
a form without its CSRF token is refused, and API errors are shown, never a 500."""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from app.console.pages import jobs as page_module
from app.runtime import Runtime
from app.schemas import ApiKeyCreate
from app.store.events import EventFilter
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for
from tests.test_console_sessions import csrf_of, sign_in

HOSTILE = (
    "<script>alert('x')</script> write to bob@example.com "
    + "W" * 3000
    + " \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627"
)
LINK = re.compile(r'href="/console/jobs/([0-9a-f]{32})"')


@dataclass(frozen=True)
class JobsConsole:
    app: FastAPI
    runtime: Runtime
    api: httpx.AsyncClient  # the admin key's header: runs completions
    web: httpx.AsyncClient  # a browser signed in with another admin key
    caller_key: str  # a `complete` key


@pytest.fixture
async def jobs_console(fake: FakeProviderServer) -> AsyncIterator[JobsConsole]:
    async with running_app(settings_for(fake)) as (app, api):
        assert isinstance(app, FastAPI)
        runtime: Runtime = app.state.runtime
        admin = await runtime.authenticator.create(ApiKeyCreate(scope="admin", name="web"))
        caller = await runtime.authenticator.create(ApiKeyCreate(scope="complete", name="bot"))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as web:
            assert (await sign_in(web, admin.key)).status_code == 303
            yield JobsConsole(app, runtime, api, web, caller.key)


async def _complete(api: httpx.AsyncClient, prompt: str, pattern: str = "proofread") -> str:
    resp = await api.post("/v1/completions", json={"pattern_key": pattern, "user_prompt": prompt})
    assert resp.status_code == 200, resp.text
    return str(resp.json()["job_id"])


async def test_the_list_filters_and_pages_and_a_job_replays_and_reveals(
    jobs_console: JobsConsole, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, web = jobs_console.api, jobs_console.web
    plain = await _complete(api, "Fix this sentance.")
    hostile = await _complete(api, HOSTILE)

    listing = await web.get("/console/jobs")
    assert listing.status_code == 200
    assert LINK.findall(listing.text) == [hostile, plain]
    assert "bob@example.com" not in listing.text  # a list never holds a prompt
    filtered = await web.get("/console/jobs", params={"status": "failed"})
    assert LINK.findall(filtered.text) == [] and "No jobs match" in filtered.text
    assert '<option value="failed" selected>' in filtered.text

    # Pages of one: the "Next page" link carries the filters and the cursor.
    monkeypatch.setattr(page_module, "PAGE_SIZE", 1)
    first = await web.get("/console/jobs", params={"pattern": "proofread"})
    found = re.search(r'href="(/console/jobs\?[^"]+)" rel="next"', first.text)
    assert found is not None and "pattern=proofread" in found[1]
    second = await web.get(html.unescape(found[1]))
    assert LINK.findall(first.text) == [hostile] and LINK.findall(second.text) == [plain]
    assert 'rel="next"' not in second.text

    shown = await web.get(f"/console/jobs/{hostile}")
    assert shown.status_code == 200
    assert "<script>alert" not in shown.text and "&lt;script&gt;alert(" in shown.text
    assert "bob@example.com" not in shown.text and "[EMAIL_" in shown.text  # stored redacted
    assert "\u05e9\u05dc\u05d5\u05dd" in shown.text and 'dir="auto"' in shown.text

    replayed = await web.post(f"/console/jobs/{hostile}/replay", data={"csrf": csrf_of(shown.text)})
    assert replayed.status_code == 200
    assert "Reproduced:" in replayed.text and "badge bad" not in replayed.text
    assert "bob@example.com" not in replayed.text

    revealed = await web.post(f"/console/jobs/{hostile}/reveal", data={"csrf": csrf_of(shown.text)})
    assert revealed.status_code == 200
    assert "Raw prompt revealed." in revealed.text and "bob@example.com" in revealed.text
    assert "<script>alert" not in revealed.text and "&lt;script&gt;alert(" in revealed.text
    again = await web.get(f"/console/jobs/{hostile}")
    assert "bob@example.com" not in again.text  # shown on that answer only

    events = await jobs_console.runtime.admin_events.page(
        EventFilter(action="job.replayed", target=f"job:{hostile}"), limit=10
    )
    assert [event.detail for event in events.events] == [{"reveal": True}, {"reveal": False}]


async def test_a_complete_key_is_refused_every_jobs_page(jobs_console: JobsConsole) -> None:
    transport = httpx.ASGITransport(app=jobs_console.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway.test") as web:
        assert (await sign_in(web, jobs_console.caller_key)).status_code == 303
        for path in ("/console/jobs", "/console/jobs/" + "a" * 32):
            refused = await web.get(path)
            assert refused.status_code == 403 and "Admin only" in refused.text
        home = await web.get("/console")
        posted = await web.post(
            "/console/jobs/" + "a" * 32 + "/reveal", data={"csrf": csrf_of(home.text)}
        )
        assert posted.status_code == 403


async def test_a_replay_without_the_forms_token_is_refused_and_not_recorded(
    jobs_console: JobsConsole,
) -> None:
    job_id = await _complete(jobs_console.api, "Fix this sentance.")
    for action in ("replay", "reveal"):
        refused = await jobs_console.web.post(
            f"/console/jobs/{job_id}/{action}", data={"csrf": "forged"}
        )
        assert refused.status_code == 403 and "Form expired" in refused.text
    replays = EventFilter(action="job.replayed")
    events = await jobs_console.runtime.admin_events.page(replays, limit=5)
    assert events.events == []


async def test_api_errors_are_shown_on_the_page(jobs_console: JobsConsole) -> None:
    web = jobs_console.web
    bad = await web.get("/console/jobs", params={"since": "<b>last tuesday</b>"})
    assert bad.status_code == 422
    assert "Error 422" in bad.text and "&lt;b&gt;last tuesday&lt;/b&gt;" in bad.text
    bad_cursor = await web.get("/console/jobs", params={"cursor": "W10"})
    assert bad_cursor.status_code == 422 and "invalid_cursor" in bad_cursor.text

    missing = await web.get("/console/jobs/" + "0" * 32)
    assert missing.status_code == 404 and "job_not_found" in missing.text
    # An id that tries to reach another route is quoted whole: still just an unknown job.
    sneaky = await web.get("/console/jobs/x%3Freveal=true")
    assert sneaky.status_code in {404, 422} and "Raw prompt" not in sneaky.text
    form = await web.get("/console/jobs")
    refused = await web.post(
        "/console/jobs/" + "0" * 32 + "/replay", data={"csrf": csrf_of(form.text)}
    )
    assert refused.status_code == 404 and "Error 404" in refused.text


async def _chained(api: httpx.AsyncClient, job_id: str) -> None:
    """Returns once the chainer (a background task of the app) has linked the job."""
    linked = False
    async with asyncio.timeout(30):
        while not linked:
            linked = (await api.get(f"/v1/jobs/{job_id}")).json()["chain_seq"] is not None
            if not linked:
                await asyncio.sleep(0.1)


async def test_the_chain_check_verifies_the_jobs_own_entry_and_finds_an_edit(
    jobs_console: JobsConsole,
) -> None:
    job_id = await _complete(jobs_console.api, "Fix this sentance.")
    await _chained(jobs_console.api, job_id)
    checked = await jobs_console.web.get(f"/console/jobs/{job_id}/chain")
    assert checked.status_code == 200 and "Verified:" in checked.text

    async with jobs_console.runtime.database.engine.begin() as conn:
        await conn.execute(text("UPDATE jobs SET cost_usd = 0 WHERE id = :id"), {"id": job_id})
    edited = await jobs_console.web.get(f"/console/jobs/{job_id}/chain")
    assert "Does not verify:" in edited.text and "edited" in edited.text
