"""Fixtures for console browser tests: the real service, a headless Chromium, a watched page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright

from tests.console.browser import SHOT_HEIGHT, SHOT_WIDTHS, PageProblems, chromium_path, watch_page
from tests.fakes.provider_server import FakeProviderServer
from tests.security.live import LiveService, live_service, service_env


@dataclass(frozen=True)
class ConsoleService:
    """A running `genai serve` (SQLite, loopback fake providers) and a key of each kind for it."""

    base_url: str
    admin_key: str
    complete_key: str
    fake: FakeProviderServer  # shared by the session: reset() it before scripting it
    live: LiveService  # its process, log and data directory


def _mint_key(base_url: str, admin_key: str, scope: str, name: str) -> str:
    headers = {"Authorization": f"Bearer {admin_key}"}
    resp = httpx.post(
        f"{base_url}/v1/keys", json={"scope": scope, "name": name}, headers=headers, timeout=30
    )
    assert resp.status_code == 201, resp.text
    return str(resp.json()["key"])


@pytest.fixture(scope="session")
def console_service(
    fake_server: FakeProviderServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleService]:
    """One service for every browser test (starting one takes seconds): each test makes the
    records it needs and reads only those, so the tests share it without depending on order."""
    workdir = tmp_path_factory.mktemp("console")
    with live_service(service_env(fake_server, workdir / "data"), workdir) as live:
        admin_key = live.first_admin_key()
        complete_key = _mint_key(live.base_url, admin_key, "complete", "console-complete")
        yield ConsoleService(live.base_url, admin_key, complete_key, fake_server, live)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless; closed (its processes with it) however the test ends."""
    executable = chromium_path()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=executable, headless=True)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def page_problems() -> PageProblems:
    """What the test's page reported going wrong; `page` fails the test on any at teardown."""
    return PageProblems()


@pytest.fixture
async def page(browser: Browser, page_problems: PageProblems) -> AsyncIterator[Page]:
    """A fresh page at desktop size whose console errors and CSP violations fail the test."""
    context = await browser.new_context(viewport={"width": SHOT_WIDTHS[0], "height": SHOT_HEIGHT})
    try:
        opened = await context.new_page()
        await watch_page(opened, page_problems)
        yield opened
    finally:
        await context.close()
    page_problems.assert_none()
