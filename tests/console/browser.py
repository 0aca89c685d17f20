"""Helpers every console browser test shares: sign in, screenshots, axe-core, page errors."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.async_playwright import Axe  # type: ignore[import-untyped]
from playwright.async_api import ConsoleMessage, Error, Page

# Debian's Chromium, never a browser build Playwright downloads (no network but registries).
CHROMIUM_INSTALL_HINT = "install Debian's Chromium: apt-get install chromium"
# Read at import: tests/conftest.py clears GENAI_* variables before each test runs.
CHROMIUM = os.environ.get("GENAI_CHROMIUM", "/usr/bin/chromium")
REPO_ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO_ROOT / "artifacts" / "console"
SHOT_WIDTHS = (1280, 390)  # a desktop and a phone
SHOT_HEIGHT = 900
# axe-core's impacts that fail a test; "minor" and "moderate" ones are left to review.
FAILING_IMPACTS = frozenset({"serious", "critical"})
TARGETS_SHOWN = 3
_FAVICON = re.compile(r"^[a-z]+://[^/]+/favicon\.ico$")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def chromium_path(path: str = CHROMIUM) -> str:
    """The Chromium to drive: GENAI_CHROMIUM, else Debian's; skipped (failed on CI) if missing."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        message = f"no Chromium at {path}: {CHROMIUM_INSTALL_HINT}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run the browser tests, so this fails)")
        pytest.skip(message)
    return path


@dataclass
class PageProblems:
    """What a page reported going wrong: console errors, uncaught exceptions, CSP violations."""

    problems: list[str] = field(default_factory=list)

    def on_console(self, message: ConsoleMessage) -> None:
        # The browser asks for /favicon.ico on its own, whatever the page says; only a 404 there
        # is no fault of the page (an icon the page links to and that fails still counts).
        if message.type == "error" and not _FAVICON.search(message.location.get("url", "")):
            self.problems.append(f"console error: {message.text} ({message.location['url']})")

    def on_page_error(self, error: Error) -> None:
        self.problems.append(f"uncaught exception: {error.name}: {error.message}")

    def on_csp_violation(self, directive: str, blocked: str, source: str) -> None:
        self.problems.append(f"CSP violation: {directive} blocked {blocked or 'inline'} ({source})")

    def take(self, fragment: str) -> list[str]:
        """Remove and return the problems mentioning `fragment`: those a test caused on purpose
        (a 403 page logs its status as a console error), so the page fixture's check passes."""
        taken = [p for p in self.problems if fragment in p]
        self.problems = [p for p in self.problems if fragment not in p]
        return taken

    def clear(self) -> None:
        """Forget what was seen, once a test has asserted on problems it caused on purpose."""
        self.problems.clear()

    def assert_none(self) -> None:
        assert not self.problems, "the page reported problems:\n" + "\n".join(self.problems)


# Runs in every document before its own scripts, CDP-injected so the page's CSP cannot stop it; on
# window, as document.open() (page.set_content) drops the listeners of the document.
_CSP_LISTENER = """
window.__genaiCspReported = 0;  // violations the test process has recorded, to wait on
window.addEventListener("securitypolicyviolation", async (event) => {
  await window.__genaiCspViolation(event.effectiveDirective, event.blockedURI,
    `${event.sourceFile || document.location.href}:${event.lineNumber}`);
  window.__genaiCspReported += 1;
});
"""
CSP_REPORTED = "window.__genaiCspReported"


async def watch_page(page: Page, seen: PageProblems) -> None:
    """Record into `seen` every console error, uncaught exception and CSP violation of the page."""
    page.on("console", seen.on_console)
    page.on("pageerror", seen.on_page_error)
    await page.expose_function("__genaiCspViolation", seen.on_csp_violation)
    await page.add_init_script(_CSP_LISTENER)


async def sign_in(page: Page, base_url: str, key: str) -> None:
    """Sign in through the login form as a person would, then wait to land inside the console."""
    await page.goto(base_url + "/console/login")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(lambda url: _inside_console(url, base_url))


def _inside_console(url: str, base_url: str) -> bool:
    """A console page other than the login form (which a wrong key lands on again)."""
    if not url.startswith(base_url):
        return False
    path = url[len(base_url) :].split("?", 1)[0].split("#", 1)[0]
    inside = path == "/console" or path.startswith("/console/")
    return inside and path.rstrip("/") != "/console/login"


async def shoot(page: Page, name: str) -> list[Path]:
    """Full-page screenshots at a desktop and a phone width, for review; returns their paths."""
    assert _NAME.fullmatch(name), f"a screenshot name is a plain file name, not {name!r}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    previous = page.viewport_size
    paths = []
    try:
        for width in SHOT_WIDTHS:
            await page.set_viewport_size({"width": width, "height": SHOT_HEIGHT})
            path = ARTIFACTS / f"{name}-{width}.png"
            await page.screenshot(path=path, full_page=True)
            paths.append(path)
    finally:
        if previous is not None:  # the test goes on at the size it had
            await page.set_viewport_size(previous)
    return paths


def _describe(violation: dict[str, Any]) -> str:
    targets = [" ".join(map(str, node["target"])) for node in violation["nodes"]]
    shown = ", ".join(targets[:TARGETS_SHOWN])
    more = f" (+{len(targets) - TARGETS_SHOWN} more)" if len(targets) > TARGETS_SHOWN else ""
    return f"{violation['id']} [{violation['impact']}]: {violation['help']} at {shown}{more}"


async def assert_accessible(page: Page) -> None:
    """Run axe-core (shipped inside its wheel) on the page; fail on serious or critical issues."""
    results = await Axe().run(page)
    violations: list[dict[str, Any]] = results.response["violations"]
    failing = [_describe(v) for v in violations if v.get("impact") in FAILING_IMPACTS]
    assert not failing, f"axe-core found on {page.url}:\n" + "\n".join(failing)
