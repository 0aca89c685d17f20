"""The usage page in a real browser: completions through the fake provider drawn as charts
with their numbers beside them, the form used by keyboard, a complete key seeing its own only."""

from __future__ import annotations

import re

import httpx
from playwright.async_api import Page, expect

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService

SUMMARIZE = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "Hi."}
KEY_ID = re.compile(r"^gsk_([0-9a-f]{16})_")


def _key_id(key: str) -> str:
    found = KEY_ID.match(key)
    assert found is not None
    return found[1]


async def _complete(service: ConsoleService, key: str, times: int) -> None:
    async with service.live.client(key) as http:
        for _ in range(times):
            resp = await http.post("/v1/completions", json=SUMMARIZE)
            assert resp.status_code == 200, resp.text


async def test_usage_charts_show_completions_and_a_complete_key_sees_its_own_only(
    page: Page, console_service: ConsoleService
) -> None:
    service = console_service
    service.fake.reset()
    await _complete(service, service.admin_key, 2)
    await _complete(service, service.complete_key, 3)
    own, admin = _key_id(service.complete_key), _key_id(service.admin_key)

    await sign_in(page, service.base_url, service.admin_key)
    await (
        page.get_by_role("navigation", name="Console pages")
        .get_by_role("link", name="Usage")
        .click()
    )
    await expect(page.get_by_role("heading", level=1)).to_have_text("Usage")
    # Group by key from the keyboard: focus the select, choose, submit with Enter.
    await page.get_by_label("Group by").focus()
    await page.get_by_label("Group by").select_option("key")
    await page.get_by_label("Since (UTC date)").press("Enter")
    await expect(page).to_have_url(re.compile(r"group_by=key"))
    breakdown = page.get_by_role("table", name=re.compile("Per key"))
    await expect(breakdown.get_by_role("rowheader", name=own)).to_be_visible()
    await expect(breakdown.get_by_role("rowheader", name=admin)).to_be_visible()
    chart = page.get_by_role("img", name=re.compile("^Requests per hour"))
    await expect(chart).to_be_visible()
    # The chart's numbers, as a table behind a disclosure a keyboard opens.
    summary = page.locator("summary", has_text="Requests per hour")
    await summary.focus()
    await page.keyboard.press("Enter")
    requests = page.get_by_role("table", name=re.compile("^Requests per hour"))
    await expect(requests.get_by_role("columnheader", name=own)).to_be_visible()
    await assert_accessible(page)
    await shoot(page, "usage-admin")

    await page.get_by_role("button", name="Sign out").click()
    await sign_in(page, service.base_url, service.complete_key)
    await page.goto(f"{service.base_url}/console/usage?group_by=key&bucket=day")
    await expect(page.get_by_text("Your key's jobs only")).to_be_visible()
    breakdown = page.get_by_role("table", name=re.compile("Per key"))
    await expect(breakdown.get_by_role("rowheader")).to_have_count(1)
    await expect(breakdown.get_by_role("rowheader", name=own)).to_be_visible()
    assert admin not in await page.content()
    async with httpx.AsyncClient(base_url=service.base_url) as anonymous:
        assert (await anonymous.get("/console/usage")).status_code in (303, 307)
    await assert_accessible(page)
    await shoot(page, "usage-complete")
