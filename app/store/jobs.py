"""JobRepository: the `jobs` table behind typed records (PendingJob, JobOutcome, StoredJob,
JobSummary)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, func, insert, select, update
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.schemas import JobSummary, SnippetUse
from app.store.db import store_seam
from app.store.keyset import Position, newest_first
from app.store.lane import PooledLane, WriteLane
from app.store.records import SOURCE_COLUMNS, JobOutcome, PendingJob, SourceUse, StoredJob
from app.store.tables import Job

_INSERT_JOB = insert(Job.metadata.tables[Job.__tablename__])
_COLUMNS = tuple(column.name for column in Job.__table__.columns)
# The list reads only these narrow columns: never a prompt, an answer or the sealed inputs.
_SUMMARY = tuple(getattr(Job, name) for name in JobSummary.model_fields)


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which jobs to list; every field given narrows the result (`until` is exclusive).

    Each equality filter leads an index that continues (created_at, id) (migration 0015;
    ix_jobs_key_created for the key), so any combination is read in order from one index and
    stops at the page's end instead of sorting what matched.
    """

    status: str | None = None
    source_name: str | None = None
    provider: str | None = None
    model: str | None = None
    key_id: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def _stored(row: Job) -> StoredJob:
    values = {name: getattr(row, name) for name in _COLUMNS}
    return StoredJob.model_validate({**values, "replay_available": row.replay_inputs is not None})


class JobRepository:
    """Typed records in, typed records out; no ORM object leaves this class.

    `insert_many` and `apply` are not behind the storage seam on purpose: the AuditWriter reads
    the raw error to tell a record the store refuses from a store that is down.
    """

    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], lane: WriteLane | None = None
    ) -> None:
        self._sessions = sessions
        self._lane = lane or PooledLane(sessions)

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """For the table's other readers (usage reports, app/store/usage.py)."""
        return self._sessions

    async def insert_many(self, jobs: Sequence[PendingJob]) -> None:
        """Many pending records in one transaction (one executemany), through the write lane.

        A prebuilt Core INSERT with the rows as parameters: measured faster than both the ORM
        unit of work and a per-call `insert().values()` (bench/README.md).
        """
        await self._lane.execute(_INSERT_JOB, [job.as_row() for job in jobs])

    @store_seam
    async def insert(self, job: PendingJob) -> None:
        """One pending record in its own transaction (tools and tests; requests group-commit)."""
        await self.insert_many([job])

    async def apply(self, outcomes: Sequence[JobOutcome]) -> None:
        """Many outcomes (bulk UPDATE by primary key) through the write lane. On PostgreSQL
        each group of rows with the same columns is its own implicit transaction; re-applying
        an outcome is harmless, so the writer may retry a batch that was partly written."""
        await self._lane.execute(update(Job), [outcome.as_row() for outcome in outcomes])

    async def set_aside(self, job_id: str, *, message: str, completed_at: dt.datetime) -> None:
        """Marks one record `failed` (audit_write_failed) when its outcome cannot be stored."""
        query = (
            update(Job)
            .where(Job.id == job_id)
            .values(
                status="failed",
                error_type="audit_write_failed",
                error_message=message,
                completed_at=completed_at,
            )
            .execution_options(synchronize_session=False)
        )
        async with self._sessions.begin() as session:
            await session.execute(query)

    @store_seam
    async def interrupt_pending(self, *, created_before: dt.datetime, message: str) -> int:
        """Marks `interrupted` every record still pending that was created before the cut-off."""
        query = (
            update(Job)
            .where(Job.status == "pending", Job.created_at < created_before)
            .values(
                status="interrupted",
                error_type="interrupted",
                error_message=message,
                completed_at=dt.datetime.now(dt.UTC),
            )
            .execution_options(synchronize_session=False)
        )
        async with self._sessions.begin() as session:
            result = await session.execute(query)
        return int(getattr(result, "rowcount", 0) or 0)

    @store_seam
    async def ping(self) -> None:
        """Touch the table records are written to; raises when it cannot be read."""
        async with self._sessions() as session:
            await session.execute(select(Job.id).limit(0))

    @store_seam
    async def get(self, job_id: str) -> StoredJob | None:
        async with self._sessions() as session:
            row = await session.get(Job, job_id)
            return None if row is None else _stored(row)

    @store_seam
    async def recent(
        self, *, limit: int, status: str | None = None, source_name: str | None = None
    ) -> list[StoredJob]:
        """The newest `limit` jobs, newest first, optionally of one status or one source."""
        query = select(Job).order_by(Job.created_at.desc(), Job.id.desc()).limit(limit)
        if status is not None:
            query = query.where(Job.status == status)
        if source_name is not None:
            query = query.where(Job.source_name == source_name)
        async with self._sessions() as session:
            return [_stored(row) for row in (await session.scalars(query))]

    @store_seam
    async def page(
        self, where: JobFilter, *, limit: int, after: Position | None = None
    ) -> list[JobSummary]:
        """Up to `limit` jobs matching `where`, newest first, older than `after` if given."""
        query = self.page_query(where, limit=limit, after=after)
        async with self._sessions() as session:
            rows = await session.execute(query)
            return [JobSummary.model_validate(row._asdict()) for row in rows]

    @staticmethod
    def page_query(where: JobFilter, *, limit: int, after: Position | None = None) -> Select[Any]:
        """The SELECT `page` runs (a test EXPLAINs it on both backends)."""
        equal = (
            (Job.status, where.status),
            (Job.source_name, where.source_name),
            (Job.provider, where.provider),
            (Job.model, where.model),
            (Job.key_id, where.key_id),
        )
        return newest_first(
            select(*_SUMMARY),
            Job.created_at,
            Job.id,
            equal=equal,
            since=where.since,
            until=where.until,
            after=after,
        ).limit(limit)

    @store_seam
    async def sources(self, limit: int) -> list[SourceUse]:
        """Each distinct source seen in the newest `limit` jobs, with how many of them used it."""
        recent = select(Job).order_by(Job.created_at.desc()).limit(limit).subquery()
        key = tuple(recent.c[name] for name in SOURCE_COLUMNS)
        query = select(*key, func.count()).group_by(*key).order_by(recent.c.source_name)
        async with self._sessions() as session:
            rows = await session.execute(query)
            return [
                SourceUse(**dict(zip(SOURCE_COLUMNS, row[:-1], strict=True)), jobs=row[-1])
                for row in rows
            ]

    @store_seam
    async def snippet_uses(self, limit: int) -> list[tuple[SnippetUse, int]]:
        """Each distinct snippet version seen in the newest `limit` jobs, with how many of them
        used it (jobs from before snippet versions record none)."""
        recent = select(Job.snippet_versions).order_by(Job.created_at.desc()).limit(limit)
        query = select(recent.subquery().c.snippet_versions)
        counts: Counter[SnippetUse] = Counter()
        async with self._sessions() as session:
            for used in await session.scalars(query):
                counts.update({SnippetUse.model_validate(item) for item in used or []})
        return sorted(counts.items(), key=lambda pair: (pair[0].identifier, pair[0].version or 0))


def record_refused(exc: BaseException) -> bool:
    """The store answered and refused this data (SQLSTATE class 22/23, or the driver could not
    encode a value), as opposed to being down, locked or slow: structured fields, not messages."""
    if isinstance(exc, DBAPIError):
        state = str(getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None) or "")
        return isinstance(exc, DataError | IntegrityError) or state[:2] in {"22", "23"}
    if isinstance(exc, StatementError):  # raised while binding a parameter, before any I/O
        return True
    return isinstance(exc, ValueError | TypeError) and not isinstance(exc, OSError)
