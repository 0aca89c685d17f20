"""The console test harness proves itself without the console: local pages and the live service."""

from __future__ import annotations

import struct
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Page, Route

from tests.console.browser import (
    CSP_REPORTED,
    PageProblems,
    assert_accessible,
    chromium_path,
    shoot,
    sign_in,
)
from tests.console.conftest import ConsoleService

CLEAN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Clean</title></head>
<body><main><h1>Patterns</h1><label for="q">Search</label><input id="q" type="search">
<button type="button">Find</button></main></body></html>"""

# An image without a text alternative and a button without a name: axe-core calls both critical.
BROKEN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Broken</title></head>
<body><main><h1>Patterns</h1>
<img src="data:image/gif;base64,R0lGODlhAQABAAAAACH5BAEKAAEALAAAAAABAAEAAAICTAEAOw==">
<button type="button"></button></main></body></html>"""

# The console's CSP forbids inline script; a page breaking it must fail its test. Served from a
# routed origin (no network): a navigation, as the console's pages are, with the header they send.
CSP_ORIGIN = "http://harness.invalid"
CSP_HEADER = "default-src 'self'"
CSP_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>CSP</title></head>
<body><main><h1>CSP</h1><script>document.title = "ran";</script></main></body></html>"""


async def serve_with_csp(route: Route) -> None:
    await route.fulfill(
        status=200,
        headers={"Content-Type": "text/html", "Content-Security-Policy": CSP_HEADER},
        body=CSP_PAGE,
    )


def png_width(path: Path) -> int:
    """The width a PNG's IHDR chunk declares (bytes 16-19, big-endian)."""
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is no PNG"
    return int(struct.unpack(">I", header[16:20])[0])


async def test_shoot_writes_a_desktop_and_a_phone_screenshot(page: Page) -> None:
    await page.set_content(CLEAN_PAGE)
    paths = await shoot(page, "harness-clean")
    assert [p.name for p in paths] == ["harness-clean-1280.png", "harness-clean-390.png"]
    assert [png_width(p) for p in paths] == [1280, 390]
    assert all(p.parent.parts[-2:] == ("artifacts", "console") for p in paths)
    assert page.viewport_size == {"width": 1280, "height": 900}, "the test goes on at its size"


async def test_a_clean_page_passes_axe(page: Page) -> None:
    await page.set_content(CLEAN_PAGE)
    await assert_accessible(page)


async def test_axe_fails_naming_every_serious_violation(page: Page) -> None:
    await page.set_content(BROKEN_PAGE)
    with pytest.raises(AssertionError) as failed:
        await assert_accessible(page)
    report = str(failed.value)
    assert "image-alt [critical]" in report and "img" in report
    assert "button-name [critical]" in report and "button" in report


async def test_a_csp_violation_and_a_console_error_are_caught(
    page: Page, page_problems: PageProblems
) -> None:
    await page.route(f"{CSP_ORIGIN}/**", serve_with_csp)
    await page.goto(f"{CSP_ORIGIN}/page")
    await page.evaluate("console.error('boom')")
    assert await page.title() == "CSP", "the inline script was blocked"
    await page.wait_for_function(f"{CSP_REPORTED} > 0")  # recorded on the test's side
    with pytest.raises(AssertionError):
        page_problems.assert_none()
    assert page_problems.take("CSP violation: script-src"), page_problems.problems
    assert page_problems.take("console error: boom"), page_problems.problems
    # Chromium also logs the blocked script as a console error; nothing else went wrong.
    assert all("Content Security Policy" in p for p in page_problems.problems)
    page_problems.clear()


async def test_an_uncaught_exception_is_caught(page: Page, page_problems: PageProblems) -> None:
    await page.set_content("<!doctype html><title>x</title><p>x</p>")
    async with page.expect_event("pageerror"):
        await page.evaluate("setTimeout(() => { throw new Error('kaboom'); }, 0)")
    assert page_problems.take("uncaught exception: Error: kaboom"), page_problems.problems
    page_problems.assert_none()


# A login form as the console's is meant to be: a labelled key field, a "Sign in" button, a
# redirect into the console once the key is right.
LOGIN_ORIGIN = "http://login.invalid"
LOGIN_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in</title></head>
<body><main><h1>Sign in</h1><form method="post" action="/console/login">
<label for="key">API key</label><input id="key" name="key" type="password">
<button type="submit">Sign in</button></form></main></body></html>"""
HOME_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Console</title></head>
<body><main><h1>Console</h1></main></body></html>"""


async def serve_login(route: Route) -> None:
    request = route.request
    if request.url.endswith("/console/login") and request.method == "POST":
        right = request.post_data == "key=gsk_right"
        where = "/console/" if right else "/console/login"
        await route.fulfill(status=303, headers={"Location": LOGIN_ORIGIN + where})
        return
    body = LOGIN_PAGE if request.url.endswith("/console/login") else HOME_PAGE
    await route.fulfill(status=200, headers={"Content-Type": "text/html"}, body=body)


async def test_sign_in_fills_the_form_and_lands_in_the_console(page: Page) -> None:
    await page.route(f"{LOGIN_ORIGIN}/**", serve_login)
    await sign_in(page, LOGIN_ORIGIN, "gsk_right")
    assert page.url == f"{LOGIN_ORIGIN}/console/"
    assert await page.title() == "Console"


def test_a_missing_chromium_skips_locally_and_fails_on_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium_path("/nonexistent/chromium")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium"):
        chromium_path("/nonexistent/chromium")


def test_the_service_answers_and_each_key_has_its_scope(console_service: ConsoleService) -> None:
    base = console_service.base_url
    assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
    expected = {
        (console_service.admin_key, "/v1/patterns"): 200,
        (console_service.complete_key, "/v1/patterns"): 200,
        (console_service.admin_key, "/v1/keys"): 200,
        (console_service.complete_key, "/v1/keys"): 403,
    }
    for (key, path), status in expected.items():
        resp = httpx.get(base + path, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        assert resp.status_code == status, (path, resp.status_code, resp.text)
