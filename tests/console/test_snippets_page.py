"""The snippets page in a real browser: create a snippet, see bad metadata flagged as it is
typed, save an edit as a new version, and the list, the snippet page, screenshots and axe."""

from __future__ import annotations

import uuid

from playwright.async_api import Page, expect

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService


async def test_create_then_edit_a_snippet_with_metadata_checked_as_typed(
    page: Page, console_service: ConsoleService
) -> None:
    base = console_service.base_url
    identifier = f"tone-{uuid.uuid4().hex[:8]}"  # the service is shared by every browser test
    await sign_in(page, base, console_service.admin_key)
    await page.goto(f"{base}/console/snippets")
    await page.get_by_role("link", name="New snippet").click()
    await page.get_by_label("Identifier").fill(identifier)
    await page.get_by_label("Name", exact=True).fill("Warm tone <b>")
    await page.get_by_label("Tags (comma-separated)").fill("tone, warm")
    await page.get_by_label("Text", exact=True).fill("Write warmly.\n<script>alert(1)</script>")
    await page.get_by_label("Metadata (a JSON object)").fill('{"voice": "nova"}')
    await expect(page.locator("#metadata-status")).to_have_text("Valid JSON")
    await page.get_by_role("button", name="Create snippet").click()

    await expect(page).to_have_url(f"{base}/console/snippets/{identifier}")
    await expect(page.get_by_role("heading", level=1)).to_have_text("Warm tone <b>")
    await expect(page.locator("pre.text").first).to_contain_text("<script>alert(1)</script>")

    metadata = page.get_by_label("Metadata (a JSON object)")
    await metadata.fill('{"voice": "nova",')  # typed, not yet sent: flagged live
    await expect(page.locator("#metadata-status")).to_contain_text("Not valid")
    await expect(metadata).to_have_attribute("aria-invalid", "true")
    await metadata.fill('["not", "an object"]')
    await expect(page.locator("#metadata-status")).to_contain_text("must be a JSON object")
    await metadata.fill('{"voice": "aria", "warmth": 3}')
    await expect(page.locator("#metadata-status")).to_have_text("Valid JSON")
    await page.get_by_label("Text", exact=True).fill("Write warmly, version two.")
    await page.get_by_role("button", name="Save as a new version").focus()
    await page.keyboard.press("Enter")  # saved from the keyboard

    await expect(page.get_by_role("status")).to_have_text("Saved as version 2.")
    rows = page.locator("table tbody tr")
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_contain_text("live")  # newest first: version 2 is served
    await expect(page.locator("pre.text").nth(1)).to_contain_text('"warmth": 3')
    await assert_accessible(page)
    await shoot(page, "snippet")

    await page.get_by_role("link", name="All snippets").click()
    await (
        page.get_by_role("navigation", name="Snippet tags")
        .get_by_role("link", name="warm (1)")
        .click()
    )
    await expect(page.get_by_role("heading", level=2, name="Tagged “warm” (1)")).to_be_visible()
    await expect(page.get_by_role("link", name="Warm tone <b>")).to_be_visible()
    await assert_accessible(page)
    await shoot(page, "snippets")
