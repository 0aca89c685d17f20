"""The audit stores the service is measured on: an SQLite file, or a scratch PostgreSQL database.

Plain SQL through sqlite3 and asyncpg, not the app's store layer, so the harness keeps working
while app/ is reshaped. A scratch database is named `genai_bench_<pid>_<hex>`; one left by a
run that was killed (its pid is gone) is dropped by the next run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg

DEFAULT_ADMIN_DSN = "postgresql://postgres@127.0.0.1:5432/test"
_SCRATCH = re.compile(r"^genai_bench_(\d+)_[0-9a-f]{8}$")


def admin_dsn() -> str:
    return os.environ.get("GENAI_BENCH_POSTGRES_DSN", DEFAULT_ADMIN_DSN)


async def _execute(dsn: str, *statements: str) -> None:
    connection = await asyncpg.connect(dsn, timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


async def _drop_orphans(dsn: str) -> list[str]:
    connection = await asyncpg.connect(dsn, timeout=5)
    try:
        names = [r[0] for r in await connection.fetch("SELECT datname FROM pg_database")]
        orphans = [n for n in names if (m := _SCRATCH.match(n)) and not _alive(int(m.group(1)))]
        for name in orphans:
            await connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        return orphans
    finally:
        await connection.close()


@contextlib.contextmanager
def scratch_postgres() -> Iterator[str]:
    """A new, empty database (its SQLAlchemy URL for GENAI_DATABASE_URL); dropped afterwards."""
    dsn = admin_dsn()
    asyncio.run(_drop_orphans(dsn))
    name = f"genai_bench_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    asyncio.run(_execute(dsn, f'CREATE DATABASE "{name}"'))
    base = dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        asyncio.run(_execute(dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def _pg_counts(url: str) -> dict[str, int]:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        rows = await connection.fetch("SELECT status, count(*) FROM jobs GROUP BY status")
        return {row[0]: int(row[1]) for row in rows}
    finally:
        await connection.close()


def audit_rows(database_url: str) -> dict[str, int] | None:
    """Jobs by status after a run (every served completion leaves one), or None if unreadable."""
    try:
        if database_url.startswith("sqlite"):
            path = database_url.split(":///", 1)[1]
            with contextlib.closing(sqlite3.connect(path, timeout=10)) as db:
                rows = db.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall()
            return {str(status): int(count) for status, count in rows}
        return asyncio.run(_pg_counts(database_url))
    except (OSError, sqlite3.Error, asyncpg.PostgresError, IndexError):
        return None


@contextlib.contextmanager
def store_for(backend: str) -> Iterator[str | None]:
    """GENAI_DATABASE_URL for the backend: None (SQLite in the data dir) or a scratch database."""
    if backend == "sqlite":
        yield None
    else:
        with scratch_postgres() as url:
            yield url
