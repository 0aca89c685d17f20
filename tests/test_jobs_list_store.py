"""The job list below HTTP, on SQLite and PostgreSQL: every filter narrows, pages are newest
first on (created_at, id) with no row lost or repeated (ties included), and every filter
combination is read in order from an index instead of sorting what matched."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from typing import Any

from sqlalchemy import text, update

from app.store.db import Database
from app.store.jobs import JobFilter, JobRepository
from app.store.keyset import Position
from app.store.tables import Job
from tests.clock import days_ago
from tests.support import pending_job

T0 = days_ago(200)
KEY_A, KEY_B = "a" * 16, "b" * 16


def _spec(n: int) -> dict[str, object]:
    """Job n: two share each instant (ties on created_at), and the values cycle."""
    return {
        "created_at": T0 + dt.timedelta(minutes=n // 2),
        "status": ("completed", "failed", "cached")[n % 3],
        "source_name": ("note", "summarize")[n % 2],
        "provider": ("openai", "anthropic")[n % 4 // 2],
        "model": "m",
        "key_id": (KEY_A, KEY_B)[n % 5 // 3],
    }


async def _seed(
    repo: JobRepository, database: Database, count: int
) -> dict[str, dict[str, object]]:
    jobs = {f"{n:02d}" + "0" * 30: _spec(n) for n in range(count)}
    for job_id, spec in jobs.items():
        created_at = spec["created_at"]
        assert isinstance(created_at, dt.datetime)
        await repo.insert(pending_job(job_id, created_at))
        async with database.sessions.begin() as session:
            fields = {k: v for k, v in spec.items() if k != "created_at"}
            await session.execute(update(Job).where(Job.id == job_id).values(**fields))
    return jobs


def _newest_first(jobs: dict[str, dict[str, object]]) -> list[str]:
    return sorted(jobs, key=lambda job_id: (jobs[job_id]["created_at"], job_id), reverse=True)


async def test_filters_narrow_and_pages_cover_every_job_once_newest_first(
    database: Database,
) -> None:
    repo = JobRepository(database.sessions, database.lane)
    jobs = await _seed(repo, database, 20)
    everything = _newest_first(jobs)

    # Pages of three walk the whole list in order, ties on created_at broken by id.
    seen: list[str] = []
    after: Position | None = None
    while True:
        page = await repo.page(JobFilter(), limit=3, after=after)
        seen += [job.id for job in page]
        if len(page) < 3:
            break
        after = Position(page[-1].created_at, page[-1].id)
        if len(seen) == 6:  # a job written meanwhile is newer: it shifts nothing
            await repo.insert(pending_job("late" + "0" * 28, T0 + dt.timedelta(days=1)))
    assert seen == everything

    def expected(**want: object) -> list[str]:
        return [j for j in everything if all(jobs[j][k] == v for k, v in want.items())]

    cases = [
        (JobFilter(status="failed"), expected(status="failed")),
        (JobFilter(source_name="summarize"), expected(source_name="summarize")),
        (JobFilter(provider="anthropic", model="m"), expected(provider="anthropic")),
        (JobFilter(key_id=KEY_B), expected(key_id=KEY_B)),
        (
            JobFilter(status="completed", source_name="note", key_id=KEY_A),
            expected(status="completed", source_name="note", key_id=KEY_A),
        ),
        (JobFilter(provider="openai", model="other"), []),
    ]
    for where, want in cases:
        assert want or where.model == "other"
        assert [job.id for job in await repo.page(where, limit=100)] == want, where

    # A window: `since` inclusive, `until` exclusive (minutes 2 to 4: jobs 4 to 7).
    window = JobFilter(since=T0 + dt.timedelta(minutes=2), until=T0 + dt.timedelta(minutes=4))
    assert [job.id for job in await repo.page(window, limit=100)] == everything[-8:-4]
    summary = (await repo.page(JobFilter(key_id=KEY_B), limit=1))[0]
    assert summary.key_id == KEY_B and summary.status in {"completed", "failed", "cached"}
    assert "prompt_redacted" not in summary.model_dump()


async def _plan(database: Database, where: JobFilter, after: Position | None) -> str:
    """The backend's plan for the repository's own query (PostgreSQL: with sequential scans
    and full sorts made as dear as it can, so any index path that avoids a sort is taken)."""
    query = JobRepository.page_query(where, limit=51, after=after)
    compiled = query.compile(dialect=database.engine.dialect)
    postgres = database.engine.dialect.name == "postgresql"
    async with database.engine.begin() as conn:
        if postgres:
            await conn.execute(text("SET LOCAL enable_seqscan = off"))
            await conn.execute(text("SET LOCAL enable_sort = off"))
        prefix = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
        params = (
            tuple(compiled.params[name] for name in compiled.positiontup or ())
            if compiled.positional
            else compiled.params
        )
        rows = (await conn.exec_driver_sql(prefix + str(compiled), params)).all()
    return "\n".join(str(row[-1]) for row in rows)


async def test_every_filter_combination_reads_an_index_in_order(database: Database) -> None:
    filters: dict[str, dict[str, Any]] = {
        "status": {"status": "failed"},
        "pattern": {"source_name": "note"},
        "model": {"provider": "openai", "model": "m"},
        "key": {"key_id": KEY_A},
        "window": {"since": T0, "until": T0 + dt.timedelta(days=1)},
    }
    postgres = database.engine.dialect.name == "postgresql"
    for size in range(len(filters) + 1):
        for names in itertools.combinations(filters, size):
            fields: dict[str, Any] = {}
            for name in names:
                fields.update(filters[name])
            where = JobFilter(**fields)
            for after in (None, Position(T0, "5" * 32)):
                plan = await _plan(database, where, after)
                if postgres:
                    # Only a sort of the rows sharing one created_at (Incremental Sort) is fine.
                    assert not re.search(r"(?m)^\s*(->\s*)?Sort\s+\(cost", plan), (names, plan)
                    assert "Seq Scan" not in plan, (names, plan)
                else:
                    assert "TEMP B-TREE FOR ORDER BY" not in plan, (names, plan)
                    assert all(
                        "USING" in line and "INDEX" in line
                        for line in plan.splitlines()
                        if line.startswith(("SCAN", "SEARCH"))
                    ), (names, plan)
