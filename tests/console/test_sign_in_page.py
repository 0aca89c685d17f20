"""Signing in and out of the console in a real browser: a wrong key is told why, the right one
lands on the home page, a complete key sees only its pages, and signing out ends the session."""

from __future__ import annotations

from playwright.async_api import Page, expect

from tests.console.browser import PageProblems, assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService


async def test_a_wrong_key_is_refused_on_the_page_and_the_right_one_signs_in(
    page: Page, page_problems: PageProblems, console_service: ConsoleService
) -> None:
    base = console_service.base_url
    await page.goto(f"{base}/console")
    await expect(page).to_have_url(f"{base}/console/login?next=/console")
    await assert_accessible(page)
    await shoot(page, "sign-in")

    await page.get_by_label("API key").fill("gsk_0000000000000000_not-a-key")
    await page.keyboard.press("Enter")  # the form works from the keyboard
    await expect(page.get_by_role("alert")).to_contain_text("not valid")
    page_problems.take("401")

    await sign_in(page, base, console_service.admin_key)
    await expect(page.get_by_role("heading", level=1)).to_have_text("Console")
    nav = page.get_by_role("navigation", name="Console pages")
    await expect(nav.get_by_role("link")).to_have_count(7)
    await assert_accessible(page)
    await shoot(page, "home")

    await page.get_by_role("button", name="Sign out").click()
    await expect(page).to_have_url(f"{base}/console/login")
    await page.goto(f"{base}/console")
    await expect(page).to_have_url(f"{base}/console/login?next=/console")


async def test_a_complete_key_sees_the_catalog_playground_and_usage_only(
    page: Page, page_problems: PageProblems, console_service: ConsoleService
) -> None:
    await sign_in(page, console_service.base_url, console_service.complete_key)
    nav = page.get_by_role("navigation", name="Console pages")
    await expect(nav.get_by_role("link")).to_have_text(["Patterns", "Playground", "Usage"])
    response = await page.goto(f"{console_service.base_url}/console/keys")
    assert response is not None and response.status in (403, 404)
    page_problems.take("40")
