"""`genai webhooks`, run in-process against a SQLite store in tmp_path: the delivery log is
listed and filtered, a failed delivery is made pending again, anything else is a one-line error."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest

from app.store.db import Database
from app.store.webhooks import DeliveryRepository, Settlement
from tests.support import run_cli as run


@pytest.fixture
def store(cli_env: Callable[..., None], tmp_path: Path) -> Path:
    data = tmp_path / "data"
    cli_env(GENAI_DATA_DIR=str(data))
    return data


async def _a_failed_and_a_pending_delivery(data: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{data / 'genai.db'}")
    try:
        repo = DeliveryRepository(database.sessions, postgres=False)
        now = dt.datetime.now(dt.UTC)
        for event in ("label.moved", "template.version_created"):
            await repo.add(
                event_id=event,
                event_type=event,
                urls=["https://hooks.example/x"],
                payload={},
                now=now,
            )
        [first, _] = await repo.claim(now=now, lease_seconds=60, limit=2)
        gone = Settlement(
            status="failed", at=now, status_code=410, error="receiver answered HTTP 410"
        )
        assert await repo.settle(first, gone)
    finally:
        await database.aclose()


def test_deliveries_are_listed_filtered_and_a_failed_one_retried(store: Path) -> None:
    empty = run("webhooks", "deliveries")  # also migrates the new store
    assert empty.exit_code == 0 and empty.stdout == "", empty.output
    asyncio.run(_a_failed_and_a_pending_delivery(store))

    listed = run("webhooks", "deliveries").stdout.splitlines()
    assert len(listed) == 2
    failed = run("webhooks", "deliveries", "--status", "failed").stdout.splitlines()
    assert len(failed) == 1 and "label.moved" in failed[0] and "last=410" in failed[0]
    delivery_id = failed[0].split()[0]

    retried = run("webhooks", "retry", delivery_id)
    assert retried.exit_code == 0 and "pending" in retried.stdout, retried.output
    assert run("webhooks", "deliveries", "--status", "failed").stdout == ""

    again = run("webhooks", "retry", delivery_id)
    assert again.exit_code == 1 and '"delivery_not_retriable"' in again.stderr
    missing = run("webhooks", "retry", "999")
    assert missing.exit_code == 1 and '"delivery_not_found"' in missing.stderr
    bad = run("webhooks", "deliveries", "--status", "lost")
    assert bad.exit_code == 2
