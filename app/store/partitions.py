"""JobPartitions: the monthly partitions of `jobs` on PostgreSQL, made ahead and dropped whole.

Migration 0013 partitions `jobs` by RANGE (created_at): `jobs_YYYY_MM` per month plus
`jobs_default`, which takes any row no month partition covers (so an insert never fails). The
months ahead are made here, at start and on every retention round, under a transaction-scoped
advisory lock so replicas doing it at once take turns instead of colliding. PostgreSQL refuses to
create a partition whose range already has rows in DEFAULT; those rows (written while the
month's partition was missing) are moved into the new partition in the same transaction.
"""

from __future__ import annotations

import datetime as dt
import re

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.store.db import store_seam

log = structlog.get_logger(__name__)

DEFAULT_PARTITION = "jobs_default"
_MONTHLY = re.compile(r"^jobs_(\d{4})_(\d{2})$")
# One lock for every change to the partition set, whichever replica makes it.
_LOCK = text("SELECT pg_advisory_xact_lock(hashtext('genai:jobs_partitions'))")
_PARTITIONS = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = to_regclass('jobs') ORDER BY c.relname"
)
_IS_PARTITIONED = text("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass('jobs')")


def month_of(moment: dt.datetime | dt.date) -> dt.date:
    return dt.date(moment.year, moment.month, 1)


def next_month(month: dt.date) -> dt.date:
    return dt.date(month.year + month.month // 12, month.month % 12 + 1, 1)


def partition_name(month: dt.date) -> str:
    return f"jobs_{month:%Y_%m}"


def partition_month(name: str) -> dt.date | None:
    """The month a `jobs_YYYY_MM` partition holds; None for DEFAULT or anything else."""
    found = _MONTHLY.match(name)
    return dt.date(int(found[1]), int(found[2]), 1) if found else None


def _bound(month: dt.date) -> str:
    """A partition bound literal. DDL takes no parameters; every name and bound put into SQL
    here is built from a date or read from the catalog, never from user input (hence the
    `noqa: S608`s)."""
    return f"'{month.isoformat()} 00:00:00+00'"


class JobPartitions:
    """The partition set of `jobs`; every method is a no-op answer where `jobs` is a plain
    table (SQLite, or PostgreSQL before migration 0013)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def partitioned(self) -> bool:
        if self._engine.dialect.name != "postgresql":
            return False
        async with self._engine.connect() as conn:
            return bool(await conn.scalar(_IS_PARTITIONED))

    async def names(self) -> list[str]:
        if not await self.partitioned():
            return []
        async with self._engine.connect() as conn:
            return list(await conn.scalars(_PARTITIONS))

    @store_seam
    async def ensure(self, *, now: dt.datetime, ahead: int) -> list[str]:
        """This month's partition and the next `ahead` months'; the names it created."""
        if not await self.partitioned():
            return []
        month, created = month_of(now), []
        async with self._engine.begin() as conn:
            await conn.execute(_LOCK)
            existing = set(await conn.scalars(_PARTITIONS))
            for _ in range(ahead + 1):
                if partition_name(month) not in existing:
                    await self._create(conn, month)
                    created.append(partition_name(month))
                month = next_month(month)
        if created:
            log.info("jobs_partitions_created", partitions=created)
        return created

    @staticmethod
    async def _create(conn: AsyncConnection, month: dt.date) -> None:
        name, low, high = partition_name(month), _bound(month), _bound(next_month(month))
        in_range = f"created_at >= {low} AND created_at < {high}"
        count = f"SELECT count(*) FROM {DEFAULT_PARTITION} WHERE {in_range}"  # noqa: S608
        strays = await conn.scalar(text(count))
        if not strays:
            await conn.execute(
                text(f"CREATE TABLE {name} PARTITION OF jobs FOR VALUES FROM ({low}) TO ({high})")
            )
            return
        # Built beside the table, filled from DEFAULT, then attached: ATTACH checks DEFAULT no
        # longer holds the range, and builds the partition's share of every index.
        await conn.execute(
            text(f"CREATE TABLE {name} (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)")
        )
        await conn.execute(
            text(
                f"WITH moved AS (DELETE FROM {DEFAULT_PARTITION} WHERE {in_range} RETURNING *) "  # noqa: S608
                f"INSERT INTO {name} SELECT * FROM moved"
            )
        )
        await conn.execute(
            text(f"ALTER TABLE jobs ATTACH PARTITION {name} FOR VALUES FROM ({low}) TO ({high})")
        )
        log.warning("jobs_partition_took_default_rows", partition=name, rows=strays)

    async def droppable(self, cutoff: dt.datetime) -> list[str]:
        """Month partitions wholly older than the cut-off that hold no pending job."""
        if not await self.partitioned():
            return []
        async with self._engine.connect() as conn:
            old = await _old_names(conn, cutoff)
            return [name for name in old if not await _holds_pending(conn, name)]

    async def rows_in(self, names: list[str]) -> int:
        """How many jobs these partitions hold (a dry run's count of what dropping them takes)."""
        async with self._engine.connect() as conn:
            counts = [await conn.scalar(text(f"SELECT count(*) FROM {n}")) for n in names]  # noqa: S608
        return sum(int(count or 0) for count in counts)

    async def drop(self, name: str, cutoff: dt.datetime) -> int | None:
        """Detach and drop one partition, re-checked under the lock; the rows it held, or None
        when it stays (another replica dropped it first, or a pending job appeared)."""
        async with self._engine.begin() as conn:
            await conn.execute(_LOCK)
            if name not in await _old_names(conn, cutoff) or await _holds_pending(conn, name):
                return None
            rows = int(await conn.scalar(text(f"SELECT count(*) FROM {name}")) or 0)  # noqa: S608
            await conn.execute(text(f"ALTER TABLE jobs DETACH PARTITION {name}"))
            await conn.execute(text(f"DROP TABLE {name}"))
        log.info("jobs_partition_dropped", partition=name, rows=rows)
        return rows


async def _old_names(conn: AsyncConnection, cutoff: dt.datetime) -> list[str]:
    """Month partitions whose whole range lies before the cut-off."""
    return [
        name
        for name in await conn.scalars(_PARTITIONS)
        if (month := partition_month(name)) is not None
        and dt.datetime.combine(next_month(month), dt.time(), dt.UTC) <= cutoff
    ]


async def _holds_pending(conn: AsyncConnection, name: str) -> bool:
    query = text(f"SELECT EXISTS (SELECT 1 FROM {name} WHERE status = 'pending')")  # noqa: S608
    return bool(await conn.scalar(query))


def outside_partitions(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic's include_name: the month and DEFAULT partitions of `jobs` are not in the
    metadata (they are made at run time), so a schema comparison skips them."""
    if type_ != "table" or name is None:
        return True
    return name != DEFAULT_PARTITION and partition_month(name) is None
