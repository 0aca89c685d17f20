"""The playground in a real browser: render a hostile prompt (shown inert), run it streamed
from the page's own script and follow the job link, and compare two models side by side."""

from __future__ import annotations

import re

from playwright.async_api import Dialog, Page, expect

from tests.console.browser import PageProblems, assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService
from tests.fakes.provider_server import Reply

HOSTILE = "<script>alert(1)</script>"
LONG_LINE = "y" * 5000
RIGHT_TO_LEFT = "\u202etxt.exe"
JOB_ID = re.compile(r"^[0-9a-f]{32}$")


def _no_dialogs(page: Page) -> list[str]:
    """Every dialog the page opens; a hostile value that ran as script would open one."""
    opened: list[str] = []

    async def dismiss(dialog: Dialog) -> None:
        opened.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    return opened


async def _open(page: Page, service: ConsoleService, pattern: str) -> None:
    await sign_in(page, service.base_url, service.complete_key)
    nav = page.get_by_role("navigation", name="Console pages")
    await nav.get_by_role("link", name="Playground").click()
    await page.get_by_label("Pattern", exact=True).select_option(pattern)
    await page.get_by_role("button", name="Open pattern").click()
    await expect(page.get_by_role("heading", level=2, name=pattern)).to_be_visible()


async def test_a_hostile_prompt_renders_and_streams_inert_and_links_its_job(
    page: Page, page_problems: PageProblems, console_service: ConsoleService
) -> None:
    dialogs = _no_dialogs(page)
    await _open(page, console_service, "summarize")
    await page.get_by_label("audience").fill(HOSTILE)
    prompt = f"{HOSTILE}\n{LONG_LINE}\n{RIGHT_TO_LEFT}"
    await page.get_by_label("User prompt").fill(prompt)
    await page.get_by_role("button", name="Render").click()

    rendered = page.locator("#render-result")
    await expect(rendered.get_by_role("heading", name="Rendered prompt")).to_be_visible()
    await expect(page.locator("#rendered-system")).to_contain_text(
        f"Write for this audience: {HOSTILE}."
    )
    await expect(rendered.locator(".rendered-message")).to_have_text(prompt)
    await expect(rendered).to_contain_text("openai/gpt-4o-mini")
    await expect(page.locator("#fingerprints dd.hash")).to_have_count(3)
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280  # the 5,000-character line wraps instead of widening the page
    await assert_accessible(page)
    await shoot(page, "playground-render")

    fake = console_service.fake
    fake.reset()
    fake.script("openai", Reply.ok(chunks=("Streamed ", f"{HOSTILE} ", RIGHT_TO_LEFT)))
    await page.get_by_role("button", name="Run", exact=True).focus()
    await page.keyboard.press("Enter")
    answer = page.locator("#live-a-text")
    await expect(answer).to_have_text(f"Streamed {HOSTILE} {RIGHT_TO_LEFT}")
    await expect(page.locator("#live-a-status")).to_have_text("Done.")
    job = page.locator("#live-a-details a.job-link")
    await expect(job).to_have_text(JOB_ID)
    assert fake.calls("openai")[0].body["stream"] is True  # streamed, not the posted fallback
    await expect(page.locator("#live-a-details")).to_contain_text("11 in, 7 out")
    await assert_accessible(page)
    await shoot(page, "playground-run")

    job_id = await job.text_content()
    assert await job.get_attribute("href") == f"/console/jobs/{job_id}"
    assert dialogs == []


async def test_compare_streams_two_models_side_by_side_with_an_error_shown(
    page: Page, page_problems: PageProblems, console_service: ConsoleService
) -> None:
    await _open(page, console_service, "translate")
    await page.get_by_role("textbox", name="target_language (required)").fill("German")
    await page.get_by_label("User prompt").fill("Good morning")
    await page.locator("#model_a").select_option("openai/gpt-4o-mini")
    await page.locator("#model_b").select_option("anthropic/claude-sonnet-4-6")
    fake = console_service.fake
    fake.reset()
    fake.script("openai", Reply.ok("Guten Morgen"))
    fake.script("anthropic", Reply.ok("Guten Morgen!"))
    await page.get_by_role("button", name="Compare A and B").click()

    await expect(page.get_by_role("heading", level=2, name="Comparison")).to_be_visible()
    await expect(page.locator("#live-a-text")).to_have_text("Guten Morgen")
    await expect(page.locator("#live-b-text")).to_have_text("Guten Morgen!")
    await expect(page.locator("#live-a-details")).to_contain_text("gpt-4o-mini")
    await expect(page.locator("#live-b-details")).to_contain_text("claude-sonnet-4-6")
    await expect(page.locator("a.job-link")).to_have_count(2)
    await assert_accessible(page)
    await shoot(page, "playground-compare")

    fake.reset()
    fake.script("anthropic", Reply.error(400, message="scripted refusal"))
    await page.get_by_role("button", name="Compare A and B").click()
    failed = page.locator("#live-b-details").get_by_role("alert")
    await expect(failed).to_contain_text("scripted refusal")
    await expect(page.locator("#live-a-status")).to_have_text("Done.")
    page_problems.take("/v1/completions")  # the refused request's status, logged by Chromium
