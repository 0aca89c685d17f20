"""The keys page in a real browser: create a key (shown once, with a copy button), see its
limits, revoke it after confirming, and the API then refuses it; screenshots and axe."""

from __future__ import annotations

import uuid

import httpx
from playwright.async_api import Page, expect

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService


def _models_status(base_url: str, key: str) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.get(f"{base_url}/v1/models", headers=headers, timeout=30).status_code


async def test_create_copy_and_revoke_a_key(page: Page, console_service: ConsoleService) -> None:
    base = console_service.base_url
    name = f"ci-{uuid.uuid4().hex[:8]}"  # the service is shared by every browser test
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    await sign_in(page, base, console_service.admin_key)
    await page.goto(f"{base}/console/keys")
    await page.get_by_label("Name", exact=True).fill(name)
    await page.get_by_label("Scope").select_option("complete")
    await page.locator("#key-budget-month").fill("50")
    await page.locator("#key-rpm").fill("60")
    await page.get_by_role("button", name="Create key").click()

    await expect(page.get_by_role("heading", level=1)).to_have_text(f"Key “{name}” created")
    secret = await page.get_by_label("The new complete key").input_value()
    assert secret.startswith("gsk_") and secret not in page.url
    copy = page.locator('button[data-copy-target="new-key"]')
    await expect(copy).to_have_text("Copy key")
    await copy.click()
    await expect(copy).to_have_text("Copied")
    assert await page.evaluate("navigator.clipboard.readText()") == secret
    assert _models_status(base, secret) == 200

    await page.get_by_role("link", name="This key's limits").click()
    await expect(page.get_by_text("0.00 / 50.00 USD (0%) this month")).to_be_visible()
    assert secret not in await page.content()  # shown once: never again
    await page.get_by_role("link", name="All keys and teams").click()
    assert secret not in await page.content()
    await expect(page.get_by_role("link", name=name)).to_be_visible()
    await assert_accessible(page)
    await shoot(page, "keys")

    await page.get_by_role("link", name=name).click()
    await page.get_by_role("button", name=f"Revoke key {name}…").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(f"Revoke key “{name}”?")
    assert _models_status(base, secret) == 200  # asked, not yet revoked
    await page.get_by_role("button", name=f"Yes, revoke {name}").click()
    await expect(page.get_by_role("status")).to_contain_text("is revoked")
    assert _models_status(base, secret) == 401
