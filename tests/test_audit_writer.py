"""The AuditWriter group-commits pending records (one bad row fails only its own request) and
batches outcomes, never dropping one, even when the store fails or refuses one record; a stop
(even with the store down) loses nothing."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import stat
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.ext.asyncio import create_async_engine

from app.errors import StoreUnavailable
from app.schemas import CallAttempt
from app.store.db import Database
from app.store.jobs import JobRepository
from app.store.records import JobOutcome, PendingJob
from app.store.tables import Job
from app.store.writer import AuditWriter
from tests.support import pending_job


class FlakyJobs:
    """A job repository whose first `failures` writes fail, recording every batch it accepts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.batches: list[list[dict[str, Any]]] = []

    async def apply(self, outcomes: Sequence[JobOutcome]) -> None:
        if self.failures:
            self.failures -= 1
            raise OperationalError("UPDATE jobs", {}, Exception("database is locked"))
        self.batches.append([{"id": o.id, "status": o.status} for o in outcomes])


def _outcome(job_id: str, status: Any = "completed", **fields: Any) -> JobOutcome:
    return JobOutcome(
        id=job_id, status=status, completed_at=dt.datetime.now(dt.UTC), redaction_map={}, **fields
    )


async def test_a_later_outcome_replaces_an_earlier_one_and_batches_respect_the_size_limit() -> None:
    jobs = FlakyJobs(failures=0)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=2)  # type: ignore[arg-type]
    writer.submit(_outcome("a", "failed"))
    writer.submit(_outcome("a", "completed"))
    writer.submit(_outcome("b", "failed"))
    writer.submit(_outcome("c", "cancelled"))
    await writer.flush()
    assert jobs.batches == [
        [{"id": "a", "status": "completed"}, {"id": "b", "status": "failed"}],
        [{"id": "c", "status": "cancelled"}],
    ]
    assert writer.backlog == 0


async def test_a_failed_flush_keeps_the_batch_and_a_later_one_writes_it() -> None:
    jobs = FlakyJobs(failures=1)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=10)  # type: ignore[arg-type]
    writer.submit(_outcome("a", "failed"))
    with pytest.raises(OperationalError):
        await writer.flush()
    assert writer.backlog == 1
    writer.submit(_outcome("a", "completed"))  # a newer outcome, while the first is queued
    await writer.flush()
    assert jobs.batches == [[{"id": "a", "status": "completed"}]]


async def test_the_background_loop_retries_until_the_store_recovers_and_close_drains() -> None:
    jobs = FlakyJobs(failures=2)
    writer = AuditWriter(jobs, flush_seconds=0.001, batch_size=10)  # type: ignore[arg-type]
    writer.start()
    writer.submit(_outcome("a"))
    for _ in range(500):  # the loop backs off 0.05 s, then 0.2 s; no timing is asserted
        if jobs.batches:
            break
        await asyncio.sleep(0.01)
    writer.submit(_outcome("b", "failed"))
    await writer.aclose()
    written = [change["id"] for batch in jobs.batches for change in batch]
    assert written == ["a", "b"]


# --- on the real backends: a refused record, a stop mid-flush, a stop with the store down ----


def _completion(job_id: str, text: str) -> JobOutcome:
    call = CallAttempt(provider="openai", model=text, outcome="completed", duration_ms=1.0)
    return _outcome(job_id, response_redacted=text, attempts=(call,))


@contextlib.asynccontextmanager
async def _store(database_url: str, *ids: str) -> AsyncIterator[Database]:
    database = Database(database_url)
    await database.migrate()
    jobs = JobRepository(database.sessions, database.lane)
    for job_id in ids:
        await jobs.insert(pending_job(job_id))
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
        writer = AuditWriter(
            JobRepository(database.sessions, database.lane), flush_seconds=3600, batch_size=50
        )
        for job_id in ids:
            # Submitted raw, past the escaping AuditTrail applies: this is what a bug would send.
            writer.submit(_completion(job_id, poison if job_id == "job3" else "fine"))
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
        async def apply(self, outcomes: Sequence[JobOutcome]) -> None:
            raise DataError("UPDATE jobs", {}, Exception("invalid byte sequence"))

        async def ping(self) -> None:
            raise OperationalError("SELECT", {}, Exception("connection refused"))

    writer = AuditWriter(DownAfterRefusal(0), flush_seconds=3600, batch_size=10)  # type: ignore[arg-type]
    writer.submit(_outcome("a"))
    writer.submit(_outcome("b"))
    with pytest.raises(OperationalError):
        await writer.flush()
    assert writer.backlog == 2


async def test_the_backlog_is_stuck_while_nothing_is_written_and_not_after() -> None:
    jobs = FlakyJobs(failures=1)
    writer = AuditWriter(jobs, flush_seconds=3600, batch_size=10, stuck_after_seconds=0)  # type: ignore[arg-type]
    assert not writer.stuck
    writer.submit(_outcome("a"))
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

    async def apply(self, outcomes: Sequence[JobOutcome]) -> None:
        try:
            async with self._sessions.begin() as session:
                await session.execute(update(Job), [outcome.as_row() for outcome in outcomes])
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
            writer.submit(_completion(job_id, "first batch"))
        await asyncio.wait_for(jobs.inside.wait(), 10)  # the loop's flush holds a transaction
        for job_id in ids[5:]:
            writer.submit(_completion(job_id, "queued meanwhile"))
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
            JobRepository(database.sessions, database.lane),
            flush_seconds=3600,
            batch_size=10,
            spool_dir=spool,
        )
        writer.start()
        for job_id in ids:
            writer.submit(_completion(job_id, f"answer for {job_id}"))
        await _rename_jobs(database_url, "jobs", "jobs_away")  # the store cannot be written
        await writer.aclose()
        [spooled] = list(spool.glob("audit-spool-*.jsonl"))
        assert stat.S_IMODE(spooled.stat().st_mode) == 0o600
        assert len(spooled.read_text().splitlines()) == 3
        await _rename_jobs(database_url, "jobs_away", "jobs")
        assert set((await _statuses(database)).values()) == {("pending", None)}

        restarted = AuditWriter(
            JobRepository(database.sessions, database.lane),
            flush_seconds=3600,
            batch_size=10,
            spool_dir=spool,
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
        jobs = JobRepository(database.sessions, database.lane)
        await jobs.insert(pending_job("old", dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)))
        await jobs.insert(pending_job("fresh"))
        count = await jobs.interrupt_pending(
            created_before=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1), message="stopped"
        )
        statuses = await _statuses(database)
    assert count == 1
    assert statuses == {"old": ("interrupted", "interrupted"), "fresh": ("pending", None)}


# --- group commit of pending records -----------------------------------------------------------


class _CountingJobs(JobRepository):
    """The real repository, noting the size of every insert transaction and able to hold one."""

    def __init__(self, database: Database) -> None:
        super().__init__(database.sessions)
        self.insert_batches: list[int] = []
        self.inserting = asyncio.Event()
        self.hold: asyncio.Event | None = None

    async def insert_many(self, jobs: Sequence[PendingJob]) -> None:
        self.insert_batches.append(len(jobs))
        self.inserting.set()
        if self.hold is not None:
            await self.hold.wait()
        await super().insert_many(jobs)


async def test_concurrent_pending_records_share_one_transaction(database_url: str) -> None:
    ids = [f"job{i}" for i in range(20)]
    async with _store(database_url) as database:
        jobs = _CountingJobs(database)
        writer = AuditWriter(jobs, flush_seconds=3600, batch_size=200)
        writer.start()
        await asyncio.gather(*(writer.insert(pending_job(job_id)) for job_id in ids))
        await writer.aclose()
        statuses = await _statuses(database)
    assert jobs.insert_batches == [20]
    assert statuses == {job_id: ("pending", None) for job_id in ids}


async def test_a_pending_record_the_backend_refuses_fails_only_its_own_request(
    database_url: str,
) -> None:
    ids = [f"job{i}" for i in range(7)]
    async with _store(database_url) as database:
        jobs = _CountingJobs(database)
        writer = AuditWriter(jobs, flush_seconds=3600, batch_size=200)
        # Raw, past the escaping AuditTrail applies: a lone surrogate no driver can encode.
        rows = [pending_job(i, source_name="bad\ud800" if i == "job3" else "ok") for i in ids]
        results = await asyncio.gather(
            *(writer.insert(row) for row in rows), return_exceptions=True
        )
        await writer.aclose()
        statuses = await _statuses(database)
    assert isinstance(results[3], StoreUnavailable)
    assert results[:3] + results[4:] == [None] * 6
    assert set(statuses) == set(ids) - {"job3"}
    assert len(jobs.insert_batches) > 1 and jobs.insert_batches[0] == 7  # bisected


async def test_with_the_store_down_every_waiting_insert_fails_with_store_unavailable(
    database_url: str,
) -> None:
    async with _store(database_url) as database:
        writer = AuditWriter(
            JobRepository(database.sessions, database.lane), flush_seconds=3600, batch_size=10
        )
        await _rename_jobs(database_url, "jobs", "jobs_away")
        results = await asyncio.gather(
            *(writer.insert(pending_job(f"job{i}")) for i in range(5)), return_exceptions=True
        )
        await writer.aclose()
    assert all(isinstance(result, StoreUnavailable) for result in results)


async def test_an_outcome_waits_for_its_insert_and_is_dropped_if_the_insert_fails(
    database_url: str,
) -> None:
    async with _store(database_url) as database:
        jobs = _CountingJobs(database)
        jobs.hold = asyncio.Event()
        writer = AuditWriter(jobs, flush_seconds=3600, batch_size=10)
        record = pending_job("job0")
        durable = writer.insert(record)
        writer.submit(_completion("job0", "early answer"))  # the UPDATE must not overtake
        await jobs.inserting.wait()  # the insert is under way
        await writer.flush()
        assert writer.backlog == 1  # held back, not applied to a row that does not exist yet
        jobs.hold.set()
        await durable
        await writer.flush()
        held_back = await _statuses(database)

        # The same record again: refused. (Same created_at too: on PostgreSQL the key is
        # (id, created_at) since jobs is partitioned by month, migration 0013.)
        failing = writer.insert(record)
        writer.submit(_completion("job0", "never stored"))
        with pytest.raises(StoreUnavailable):
            await failing
        backlog_after_failure = writer.backlog
        await writer.aclose()
    assert held_back == {"job0": ("completed", None)}
    assert backlog_after_failure == 0


# --- typed records at the storage seam ---------------------------------------------------------


async def test_the_repository_returns_typed_records_not_rows(database_url: str) -> None:
    from app.schemas import JobRecord
    from app.store.records import SourceUse, StoredJob

    async with _store(database_url, "job0", "job1") as database:
        jobs = JobRepository(database.sessions, database.lane)
        await jobs.insert(pending_job("job2", replay_inputs=b"sealed", source_name="other"))
        stored = await jobs.get("job2")
        sources = await jobs.sources(10)
        missing = await jobs.get("nope")
    assert isinstance(stored, StoredJob) and stored.replay_inputs == b"sealed"
    record = stored.record()
    assert type(record) is JobRecord and record.replay_available
    assert "replay_inputs" not in record.model_dump()
    assert missing is None
    assert sources == [
        SourceUse("pattern", "note", "patterns", None, None, "sha256:x", jobs=2),
        SourceUse("pattern", "other", "patterns", None, None, "sha256:x", jobs=1),
    ]


def test_made_storable_escapes_refused_characters_and_lists_the_fields() -> None:
    pending = pending_job("j", source_name="a\x00b", params={"stop": ["\ud800"]})
    stored = pending.made_storable()
    assert stored.source_name == "a\\u0000b" and stored.params == {"stop": ["\\ud800"]}
    assert stored.escaped_fields == ("params", "source_name")
    outcome = _completion("j", "ok").made_storable(also_escaped=stored.escaped_fields)
    assert outcome.as_row()["escaped_fields"] == ["params", "source_name"]
    assert _completion("j", "ok").made_storable().as_row()["escaped_fields"] is None
