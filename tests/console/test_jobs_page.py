"""The Jobs page in a real browser: completions run through the fake provider are found with the
filter form (by keyboard), a job whose prompt holds markup, a very long line and right-to-left
text is shown inert and wrapped, its chain entry verifies, replay shows the verdict, and reveal
shows the raw prompt with a notice while the API records the admin event."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService

HOSTILE = (
    "<script>alert('x')</script><img src=x onerror=alert(1)> reply to bob@example.com "
    + "W" * 2000
    + " \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627"
)
CHAINED_WITHIN_SECONDS = 30.0
# What sticks out of the viewport (named in the failure, so a fix knows where to look).
WIDER_THAN_THE_PAGE = """[...document.querySelectorAll('main *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .slice(0, 5).map(e => e.tagName + '.' + e.className)"""


async def _chained(http: httpx.AsyncClient, job_id: str, admin: dict[str, str]) -> None:
    """Returns once the job has its audit-chain entry (polled: the chainer runs elsewhere)."""
    linked = False
    while not linked:
        record = (await http.get(f"/v1/jobs/{job_id}", headers=admin)).json()
        linked = record["chain_seq"] is not None
        if not linked:
            await asyncio.sleep(0.2)


async def _run_jobs(service: ConsoleService) -> tuple[str, list[str]]:
    """A fresh key (so this test reads only its own jobs), two completions made with it, and
    their ids newest first, once the chainer has linked both."""
    admin = {"Authorization": f"Bearer {service.admin_key}"}
    async with httpx.AsyncClient(base_url=service.base_url, timeout=30) as http:
        made = await http.post("/v1/keys", json={"scope": "complete"}, headers=admin)
        key: dict[str, Any] = made.json()
        caller = {"Authorization": f"Bearer {key['key']}"}
        ids: list[str] = []
        for prompt in ("Fix this sentance.", HOSTILE):
            body = {"pattern_key": "proofread", "user_prompt": prompt}
            done = await http.post("/v1/completions", json=body, headers=caller)
            assert done.status_code == 200, done.text
            ids.insert(0, done.json()["job_id"])
        # The chainer links a finished job about a second later; the page offers the check then.
        async with asyncio.timeout(CHAINED_WITHIN_SECONDS):
            for job_id in ids:
                await _chained(http, job_id, admin)
    return str(key["id"]), ids


async def test_find_open_replay_and_reveal_a_job(
    page: Page, console_service: ConsoleService
) -> None:
    console_service.fake.reset()
    key_id, (hostile, plain) = await _run_jobs(console_service)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: dialogs.append(dialog.message))
    base = console_service.base_url
    await sign_in(page, base, console_service.admin_key)

    await (
        page.get_by_role("navigation", name="Console pages")
        .get_by_role("link", name="Jobs")
        .click()
    )
    await expect(page.get_by_role("heading", level=1)).to_have_text("Jobs")
    await page.get_by_label("Status").select_option("completed")
    await page.get_by_label("Key id").fill(key_id)
    await page.keyboard.press("Enter")  # the filter form submits from the keyboard
    rows = page.locator("table.jobs tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.first.get_by_role("link")).to_have_text(hostile[:12])
    await expect(rows.nth(1).get_by_role("link")).to_have_text(plain[:12])
    await assert_accessible(page)
    await shoot(page, "jobs-list")

    await rows.first.get_by_role("link").click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(hostile)
    turn = page.locator("pre.text", has_text="reply to").first  # the prompt (then the echo)
    await expect(turn).to_contain_text("<script>alert('x')</script>")  # text, not markup
    await expect(turn).to_contain_text("\u05e9\u05dc\u05d5\u05dd")
    assert await page.locator("main script, main img").count() == 0

    await page.get_by_role("button", name="Verify audit-chain entry").click()
    await expect(page.get_by_role("status")).to_contain_text("Verified:")

    replay = page.get_by_role("button", name="Replay", exact=True)
    await replay.focus()
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Replay verdict")).to_be_visible()
    await expect(page.get_by_role("status").first).to_contain_text("Reproduced:")
    await assert_accessible(page)
    await shoot(page, "job-detail")
    # At phone width the long line wraps: the page never scrolls sideways.
    await page.set_viewport_size({"width": 390, "height": 900})
    wide = await page.evaluate("document.documentElement.scrollWidth")
    offenders = await page.evaluate(WIDER_THAN_THE_PAGE)
    assert wide <= 390, offenders

    await page.get_by_role("button", name="Reveal raw prompt").click()
    await expect(page.get_by_role("alert")).to_contain_text("Raw prompt revealed.")
    await expect(page.locator("main")).to_contain_text("bob@example.com")
    await assert_accessible(page)
    await shoot(page, "job-revealed")
    assert dialogs == []

    admin = {"Authorization": f"Bearer {console_service.admin_key}"}
    params = {"action": "job.replayed", "target": f"job:{hostile}"}
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        events = (await http.get("/v1/audit/events", params=params, headers=admin)).json()
    assert [event["detail"] for event in events["events"]] == [
        {"reveal": True},
        {"reveal": False},
    ]
