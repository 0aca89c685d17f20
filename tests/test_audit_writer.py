"""The AuditWriter batches completions and never drops one, even when the store fails."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from app.store.jobs import AuditWriter


class FlakyJobs:
    """A job repository whose first `failures` writes fail, recording every batch it accepts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.batches: list[list[dict[str, Any]]] = []

    async def apply(self, changes: list[dict[str, Any]]) -> None:
        if self.failures:
            self.failures -= 1
            raise OperationalError("UPDATE jobs", {}, Exception("database is locked"))
        self.batches.append([dict(change) for change in changes])


async def test_changes_to_one_job_merge_and_batches_respect_the_size_limit() -> None:
    jobs = FlakyJobs(failures=0)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=2)  # type: ignore[arg-type]
    writer.submit("a", {"status": "completed"})
    writer.submit("a", {"output_tokens": 3})
    writer.submit("b", {"status": "failed"})
    writer.submit("c", {"status": "cancelled"})
    await writer.flush()
    assert jobs.batches == [
        [{"id": "a", "status": "completed", "output_tokens": 3}, {"id": "b", "status": "failed"}],
        [{"id": "c", "status": "cancelled"}],
    ]
    assert writer.backlog == 0


async def test_a_failed_flush_keeps_the_batch_and_a_later_one_writes_it() -> None:
    jobs = FlakyJobs(failures=1)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=10)  # type: ignore[arg-type]
    writer.submit("a", {"status": "completed"})
    with pytest.raises(OperationalError):
        await writer.flush()
    assert writer.backlog == 1
    writer.submit("a", {"latency_ms": 5.0})  # arrives while the first write is pending
    await writer.flush()
    assert jobs.batches == [[{"id": "a", "status": "completed", "latency_ms": 5.0}]]


async def test_the_background_loop_retries_until_the_store_recovers_and_close_drains() -> None:
    jobs = FlakyJobs(failures=2)
    writer = AuditWriter(jobs, flush_seconds=0.001, batch_size=10)  # type: ignore[arg-type]
    writer.start()
    writer.submit("a", {"status": "completed"})
    for _ in range(500):  # the loop backs off 0.05 s, then 0.2 s; no timing is asserted
        if jobs.batches:
            break
        await asyncio.sleep(0.01)
    writer.submit("b", {"status": "failed"})
    await writer.aclose()
    written = [change["id"] for batch in jobs.batches for change in batch]
    assert written == ["a", "b"]
