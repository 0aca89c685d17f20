"""The write lane: a batch is one transaction, a refused batch leaves nothing, a lost
connection costs at most the batch that was on it (tests on SQLite files and PostgreSQL)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.store import lane as lane_module
from app.store.db import Database
from app.store.jobs import JobRepository, record_refused
from app.store.lane import HeldConnectionLane, PooledLane
from app.store.records import JobOutcome, PendingJob
from tests.support import pending_job


def _pending(job_id: str) -> PendingJob:
    return pending_job(job_id, model="gpt-4o-mini")


async def _ids(database: Database) -> list[str]:
    async with database.engine.connect() as connection:
        rows = await connection.execute(text("SELECT id FROM jobs ORDER BY id"))
        return [row.id for row in rows]


def test_each_backend_gets_its_own_lane(tmp_path: object) -> None:
    assert isinstance(Database(f"sqlite+aiosqlite:///{tmp_path}/g.db").lane, PooledLane)
    assert isinstance(Database("postgresql+asyncpg://u@127.0.0.1/db").lane, HeldConnectionLane)


async def test_a_batch_with_a_refused_row_writes_none_of_it(database: Database) -> None:
    jobs = JobRepository(database.sessions, database.lane)
    first = _pending("a")
    await jobs.insert_many([first])
    with pytest.raises(IntegrityError) as refused:  # the same record again (id, created_at)
        await jobs.insert_many([_pending("b"), first, _pending("c")])
    assert record_refused(refused.value)  # the writer bisects it, as through the pool
    await jobs.insert_many([_pending("b"), _pending("c")])  # the lane still works
    assert await _ids(database) == ["a", "b", "c"]


async def test_outcomes_go_through_the_lane_and_can_be_applied_twice(database: Database) -> None:
    jobs = JobRepository(database.sessions, database.lane)
    await jobs.insert_many([_pending("a"), _pending("b")])
    done = dt.datetime.now(dt.UTC)
    outcomes = [
        JobOutcome(
            id=job_id,
            status="completed",
            completed_at=done,
            redaction_map={},
            response_redacted="ok",
        )
        for job_id in ("a", "b")
    ]
    await jobs.apply(outcomes)
    await jobs.apply([dataclasses.replace(outcomes[0], model="gpt-4o"), outcomes[1]])
    a, b = await jobs.get("a"), await jobs.get("b")
    assert a is not None and b is not None
    assert (a.status, a.model, a.response_redacted) == ("completed", "gpt-4o", "ok")
    assert (b.status, b.model) == ("completed", "gpt-4o-mini")  # an unset model is left alone


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_a_held_connection_the_server_closed_is_replaced(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = JobRepository(database.sessions, database.lane)
    await jobs.insert_many([_pending("a")])
    async with database.engine.connect() as admin:
        killed = await admin.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        )
        assert any(row[0] for row in killed)
    monkeypatch.setattr(lane_module, "PING_AFTER_IDLE_SECONDS", 0.0)  # idle: pinged first
    await jobs.insert_many([_pending("b")])
    assert await _ids(database) == ["a", "b"]


async def test_a_batch_cancelled_in_flight_leaves_the_lane_usable(database: Database) -> None:
    jobs = JobRepository(database.sessions, database.lane)
    task = asyncio.create_task(jobs.insert_many([_pending("a")]))
    await asyncio.sleep(0)  # the batch is on its way
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await jobs.insert_many([_pending("b")])
    ids = await _ids(database)
    assert ids[-1] == "b" and set(ids) <= {"a", "b"}
