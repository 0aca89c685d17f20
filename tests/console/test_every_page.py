"""Every console page, by keyboard: each link, button and field a page shows is reached by Tab
alone, and axe-core finds no serious or critical violation, for an admin and a `complete` key."""

from __future__ import annotations

import httpx
from playwright.async_api import Page

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService

# What Tab should stop on. Radio buttons are left out: Tab enters a group once, arrows move in it.
FOCUSABLE = (
    "a[href], button:not([disabled]), input:not([type=hidden]):not([type=radio]):not([disabled]), "
    "select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex='-1'])"
)
_VISIBLE_FOCUSABLE = f"""() => [...document.querySelectorAll("{FOCUSABLE}")].filter(
  e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden")"""
_MARK_ACTIVE = """() => { const e = document.activeElement;
  if (e && e !== document.body) e.dataset.tabbed = "1"; }"""
_UNREACHED = f"""() => ({_VISIBLE_FOCUSABLE})().filter(e => e.dataset.tabbed !== "1")
  .map(e => e.outerHTML.slice(0, 120))"""
ADMIN_PAGES = (
    "/console",
    "/console/patterns",
    "/console/patterns/summarize",
    "/console/playground?pattern=summarize",
    "/console/snippets",
    "/console/snippets/new",
    "/console/jobs",
    "/console/keys",
    "/console/usage",
    "/console/integrity",
)
COMPLETE_PAGES = ("/console", "/console/patterns", "/console/playground", "/console/usage")


async def assert_keyboard_reaches_everything(page: Page) -> None:
    """Tab from the top through the whole page: every visible control gets focus once."""
    count = await page.evaluate(f"() => ({_VISIBLE_FOCUSABLE})().length")
    await page.evaluate("() => document.activeElement && document.activeElement.blur()")
    for _ in range(count + 3):
        await page.keyboard.press("Tab")
        await page.evaluate(_MARK_ACTIVE)
    unreached = await page.evaluate(_UNREACHED)
    assert not unreached, f"{page.url}: Tab never reaches {unreached}"


def _complete_once(service: ConsoleService) -> str:
    """One job, so the jobs page and a job's page have something to show."""
    service.fake.reset()
    answer = httpx.post(
        f"{service.base_url}/v1/completions",
        headers={"Authorization": f"Bearer {service.admin_key}"},
        json={"pattern_key": "summarize", "user_prompt": "Tab order.", "model": "openai/gpt-4o"},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["job_id"])


async def test_every_admin_page_works_by_keyboard_and_passes_axe(
    page: Page, console_service: ConsoleService
) -> None:
    job_id = _complete_once(console_service)
    base = console_service.base_url
    await sign_in(page, base, console_service.admin_key)
    for path in (*ADMIN_PAGES, f"/console/jobs/{job_id}"):
        response = await page.goto(base + path)
        assert response is not None and response.status == 200, path
        await assert_keyboard_reaches_everything(page)
        await assert_accessible(page)
    await page.goto(f"{base}/console/snippets/new")
    await shoot(page, "snippet-new")


async def test_a_complete_keys_pages_work_by_keyboard_and_pass_axe(
    page: Page, console_service: ConsoleService
) -> None:
    base = console_service.base_url
    await sign_in(page, base, console_service.complete_key)
    for path in COMPLETE_PAGES:
        response = await page.goto(base + path)
        assert response is not None and response.status == 200, path
        await assert_keyboard_reaches_everything(page)
        await assert_accessible(page)
