"""The integrity page in a real browser: the audit chain verified on request (ok), then a job
row edited behind the service's back with sqlite3 and the problem reported by seq and record."""

from __future__ import annotations

import asyncio
import re
import sqlite3

from playwright.async_api import Page, expect

from tests.console.browser import assert_accessible, shoot, sign_in
from tests.console.conftest import ConsoleService

SUMMARIZE = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "Hi."}


async def _chained_job(service: ConsoleService) -> tuple[str, int]:
    """A new job, once the chainer has linked it (it does so about once a second)."""
    async with service.live.client(service.admin_key) as http:
        resp = await http.post("/v1/completions", json=SUMMARIZE)
        assert resp.status_code == 200, resp.text
        job_id = resp.json()["job_id"]
        for _ in range(300):  # polled, not timed: the loop ends when the link exists
            record = (await http.get(f"/v1/jobs/{job_id}")).json()
            if record.get("chain_seq") is not None:
                return job_id, int(record["chain_seq"])
            await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} was never linked into the audit chain")


def _tamper(service: ConsoleService, job_id: str, by: int) -> None:
    with sqlite3.connect(service.live.data_dir / "genai.db", timeout=30) as db:
        db.execute("UPDATE jobs SET output_tokens = output_tokens + ? WHERE id = ?", (by, job_id))


async def test_the_chain_verifies_then_a_tampered_job_is_reported(
    page: Page, console_service: ConsoleService
) -> None:
    service = console_service
    service.fake.reset()
    job_id, seq = await _chained_job(service)

    await sign_in(page, service.base_url, service.admin_key)
    await (
        page.get_by_role("navigation", name="Console pages")
        .get_by_role("link", name="Integrity")
        .click()
    )
    await expect(page.get_by_role("heading", level=1)).to_have_text("Integrity")
    await expect(page.locator("#audit-state")).to_contain_text("Last checkpoint")
    await expect(page.get_by_role("table", name=re.compile("Newest first"))).to_be_visible()
    verify = page.get_by_role("button", name="Verify the chain")
    await verify.focus()
    await page.keyboard.press("Enter")
    await expect(page.locator("#verify-result")).to_contain_text("OK:")
    await assert_accessible(page)
    await shoot(page, "integrity-ok")

    _tamper(service, job_id, +1)
    try:
        await page.get_by_role("button", name="Verify the chain").click()
        result = page.locator("#verify-result")
        await expect(result).to_contain_text("Problem:")
        await expect(result).to_contain_text(f"edited at seq {seq}")
        await expect(result).to_contain_text(job_id)
        await assert_accessible(page)
        await shoot(page, "integrity-problem")
    finally:  # the service is shared: its chain verifies again for the tests after this one
        _tamper(service, job_id, -1)
