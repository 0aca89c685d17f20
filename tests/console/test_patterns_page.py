"""The patterns and templates pages in a real browser: find a pattern by searching, open it and
run its tests; diff two template versions made through the API, move a label with a message and
read it back in the history. Each page is shot and checked by axe-core."""

from __future__ import annotations

import uuid

import httpx
from playwright.async_api import Page, expect

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService


def _two_template_versions(service: ConsoleService) -> str:
    """A template of its own (the service is shared) with two versions; returns its name."""
    name = f"console-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {service.admin_key}"}
    texts = (
        "You write replies for {{ brand }}.\nBe brief.\n",
        "You write replies for {{ brand }}.\nBe brief and kind.\nSign as {{ brand }}.\n",
    )
    for text in texts:
        body = {"name": name, "role": "writer", "template": text, "variables": ["brand"]}
        response = httpx.post(
            f"{service.base_url}/v1/templates", json=body, headers=headers, timeout=30
        )
        assert response.status_code == 201, response.text
    return name


async def test_a_pattern_is_found_by_search_opened_and_its_tests_run(
    page: Page, console_service: ConsoleService
) -> None:
    await sign_in(page, console_service.base_url, console_service.admin_key)
    await page.goto(f"{console_service.base_url}/console/patterns")
    await page.get_by_label("Search name, description or tags").fill("invoice")
    await page.keyboard.press("Enter")
    results = page.get_by_role("table").first.get_by_role("row")
    await expect(results).to_have_count(2)  # the header and extract_invoice
    await assert_accessible(page)
    await shoot(page, "patterns")

    await page.get_by_role("link", name="extract_invoice").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Pattern extract_invoice")
    await expect(page.get_by_text("write the date as {{ date_format }}")).to_be_visible()
    await page.get_by_role("button", name="Run tests").click()
    await expect(page.get_by_role("status")).to_contain_text("Passed")
    await assert_accessible(page)
    await shoot(page, "pattern-detail")


async def test_two_versions_are_diffed_and_a_label_is_moved_with_its_message(
    page: Page, console_service: ConsoleService
) -> None:
    name = _two_template_versions(console_service)
    await sign_in(page, console_service.base_url, console_service.admin_key)
    await page.goto(f"{console_service.base_url}/console/patterns")
    await page.get_by_role("link", name=name).click()
    await expect(page.get_by_role("heading", level=1)).to_contain_text(name)
    diff = page.locator("table.diff")
    await expect(diff.locator("tr.changed")).to_have_count(1)
    await expect(diff.locator("tr.added")).to_contain_text("Sign as {{ brand }}.")

    await page.get_by_label("Label", exact=True).fill("staging")
    await page.get_by_label("Version", exact=True).select_option("2")
    await page.get_by_label("Message (why; kept in the history)").fill("v2 reads kinder")
    await page.get_by_role("button", name="Move label").click()
    await expect(page.get_by_role("status")).to_have_text("Label staging moved.")
    history = page.get_by_role("table").last
    await expect(history.get_by_role("row").nth(1)).to_contain_text("v2 reads kinder")
    await assert_accessible(page)
    await shoot(page, "template-diff")
