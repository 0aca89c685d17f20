"""The AuditWriter batches completions and never drops one, even when the store fails or
refuses one record, and a stop (even with the store down) loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from app.store.db import Database
from app.store.jobs import AuditWriter, JobRepository
from app.store.tables import Job


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


# --- on the real backends: a refused record, a stop mid-flush, a stop with the store down ----


def _pending_row(job_id: str, created_at: dt.datetime | None = None) -> dict[str, Any]:
    return {
        "id": job_id,
        "request_id": None,
        "created_at": created_at or dt.datetime.now(dt.UTC),
        "status": "pending",
        "source_kind": "pattern",
        "source_name": "note",
        "source_base_path": "patterns",
        "template_id": None,
        "template_role": None,
        "template_version": None,
        "template_sha256": "sha256:x",
        "pattern_content_hash": "sha256:x",
        "variables_hash": "sha256:x",
        "user_prompt_hash": "sha256:x",
        "provider": "openai",
        "model": "m",
        "params": {},
        "prompt_redacted": {"system": "", "messages": []},
        "redaction_map": {},
        "snippet_ids": [],
        "replay_inputs": None,
        "attempts": None,
    }


def _completion(text: str) -> dict[str, Any]:
    return {
        "status": "completed",
        "completed_at": dt.datetime.now(dt.UTC),
        "response_redacted": text,
        "attempts": [{"attempt": 1, "response": text}],
    }


@contextlib.asynccontextmanager
async def _store(database_url: str, *ids: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    await database.migrate()
    jobs = JobRepository(database.sessions)
    for job_id in ids:
        await jobs.insert(_pending_row(job_id))
    try:
        yield database
    finally:
        await database.aclose()


async def _statuses(database: Database) -> dict[str, tuple[str, str | None]]:
    async with database.engine.connect() as conn:
        rows = await conn.execute(text("SELECT id, status, error_type FROM jobs"))
        return {row.id: (row.status, row.error_type) for row in rows}


@pytest.mark.parametrize("poison", ["a\ud800b", "a\x00b"])
async def test_a_record_the_backend_refuses_is_set_aside_and_the_rest_is_written(
    database_url: str, poison: str
) -> None:
    ids = [f"job{i}" for i in range(7)]
    async with _store(database_url, *ids) as database:
        writer = AuditWriter(JobRepository(database.sessions), flush_seconds=3600, batch_size=50)
        for job_id in ids:
            # Submitted raw, past the escaping AuditTrail applies: this is what a bug would send.
            writer.submit(job_id, _completion(poison if job_id == "job3" else "fine"))
        is_sqlite = database.is_sqlite
        await writer.flush()
        statuses = await _statuses(database)
    assert writer.backlog == 0
    if is_sqlite and poison == "a\x00b":  # SQLite stores NUL: nothing to set aside
        assert set(statuses.values()) == {("completed", None)}
        return
    assert statuses.pop("job3") == ("failed", "audit_write_failed")
    assert set(statuses.values()) == {("completed", None)}


async def test_a_store_that_is_down_keeps_a_refused_record_instead_of_setting_it_aside() -> None:
    class DownAfterRefusal(FlakyJobs):
        async def apply(self, changes: list[dict[str, Any]]) -> None:
            raise DataError("UPDATE jobs", {}, Exception("invalid byte sequence"))

        async def ping(self) -> None:
            raise OperationalError("SELECT", {}, Exception("connection refused"))

    writer = AuditWriter(DownAfterRefusal(0), flush_seconds=3600, batch_size=10)  # type: ignore[arg-type]
    writer.submit("a", {"status": "completed"})
    writer.submit("b", {"status": "completed"})
    with pytest.raises(OperationalError):
        await writer.flush()
    assert writer.backlog == 2


async def test_the_backlog_is_stuck_while_nothing_is_written_and_not_after() -> None:
    jobs = FlakyJobs(failures=1)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=10, stuck_after_seconds=0)  # type: ignore[arg-type]
    assert not writer.stuck
    writer.submit("a", {"status": "completed"})
    with pytest.raises(OperationalError):
        await writer.flush()
    await asyncio.sleep(0.001)  # some time passes with nothing written
    assert writer.stuck
    await writer.flush()
    assert not writer.stuck and writer.backlog == 0


class _HeldInTransaction(JobRepository):
    """Holds each write's transaction open until released, and notes if one was cancelled."""

    def __init__(self, database: Database) -> None:
        super().__init__(database.sessions)
        self.inside = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def apply(self, changes: list[dict[str, Any]]) -> None:
        try:
            async with self._sessions.begin() as session:
                await session.execute(update(Job), changes)
                self.inside.set()
                await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


async def test_close_lets_a_running_flush_finish_and_loses_nothing(database_url: str) -> None:
    ids = [f"job{i}" for i in range(12)]
    async with _store(database_url, *ids) as database:
        jobs = _HeldInTransaction(database)
        writer = AuditWriter(jobs, flush_seconds=0.001, batch_size=5)
        writer.start()
        for job_id in ids[:5]:
            writer.submit(job_id, _completion("first batch"))
        await asyncio.wait_for(jobs.inside.wait(), 10)  # the loop's flush holds a transaction
        for job_id in ids[5:]:
            writer.submit(job_id, _completion("queued meanwhile"))
        closing = asyncio.create_task(writer.aclose())
        await asyncio.sleep(0.05)
        assert not closing.done()  # close waits for the flush instead of cancelling it
        jobs.release.set()
        await asyncio.wait_for(closing, 10)
        statuses = await _statuses(database)
    assert not jobs.cancelled
    assert statuses == {job_id: ("completed", None) for job_id in ids}


async def _rename_jobs(database_url: str, old: str, new: str) -> None:
    engine = create_async_engine(database_url)
    async with engine.begin() as conn:
        await conn.execute(text(f"ALTER TABLE {old} RENAME TO {new}"))
    await engine.dispose()


async def test_a_stop_with_the_store_down_spools_and_the_next_start_applies_it(
    database_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "data"
    ids = ["job0", "job1", "job2"]
    async with _store(database_url, *ids) as database:
        writer = AuditWriter(
            JobRepository(database.sessions), flush_seconds=3600, batch_size=10, spool_dir=spool
        )
        writer.start()
        for job_id in ids:
            writer.submit(job_id, _completion(f"answer for {job_id}"))
        await _rename_jobs(database_url, "jobs", "jobs_away")  # the store cannot be written
        await writer.aclose()
        [spooled] = list(spool.glob("audit-spool-*.jsonl"))
        assert stat.S_IMODE(spooled.stat().st_mode) == 0o600
        assert len(spooled.read_text().splitlines()) == 3
        await _rename_jobs(database_url, "jobs_away", "jobs")
        assert set((await _statuses(database)).values()) == {("pending", None)}

        restarted = AuditWriter(
            JobRepository(database.sessions), flush_seconds=3600, batch_size=10, spool_dir=spool
        )
        assert await restarted.restore_spooled() == 3
        statuses = await _statuses(database)
    assert statuses == {job_id: ("completed", None) for job_id in ids}
    assert list(spool.glob("audit-spool-*")) == []
    assert restarted.backlog == 0


async def test_stale_pending_rows_are_interrupted_and_fresh_ones_left_alone(
    database_url: str,
) -> None:
    async with _store(database_url) as database:
        jobs = JobRepository(database.sessions)
        await jobs.insert(_pending_row("old", dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)))
        await jobs.insert(_pending_row("fresh"))
        count = await jobs.interrupt_pending(
            created_before=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1), message="stopped"
        )
        statuses = await _statuses(database)
    assert count == 1
    assert statuses == {"old": ("interrupted", "interrupted"), "fresh": ("pending", None)}
