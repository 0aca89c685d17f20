"""WriteLane: the audit writer's way to the database (pending records and outcomes).

Every request waits for its pending record to be durable before the provider is called, so the
cost of that INSERT is on every request's path. Through a pooled session on PostgreSQL it is a
checkout with a ping, BEGIN, the statement and COMMIT: four round trips. The PostgreSQL lane
holds one connection in autocommit instead; asyncpg's executemany sends every row and a single
Sync, so a batch is one implicit transaction, atomic, in one round trip (one pending record:
2.8-3.1 ms → 1.3 ms p50, `python -m bench.audit_writes`). A connection idle for a while is
pinged before use (a restarted server costs no failed request), and one that failed is dropped
and reopened on the next batch.

SQLite keeps the pooled session (`PooledLane`). A synchronous connection in a thread of its own,
one call per batch, halved the cost of one record (1.74 → 0.73 ms) but, under 32 concurrent
requests, put multi-second waits in the tail (p99 0.37 s → 2.4 s, and a request failed): a
second connection writing the same file contends with the pool's for the lock, and a thread
of its own competes with the busy event loop for the interpreter. Measured and set aside; see
bench/RESULTS.md.

Errors are the driver's, wrapped by SQLAlchemy as through the pool, so the AuditWriter tells a
refused record from a store that is down the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import Executable, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

Rows = Sequence[dict[str, Any]]

#: A held PostgreSQL connection unused for this long is pinged before the next batch.
PING_AFTER_IDLE_SECONDS = 1.0


class WriteLane(Protocol):
    async def execute(self, statement: Executable, rows: Rows) -> None:
        """The statement (Core, or an ORM bulk UPDATE by primary key) once per row, in one
        transaction (on PostgreSQL, one per group of rows with the same columns)."""
        ...

    async def aclose(self) -> None: ...


class HeldConnectionLane:
    """One autocommit connection from the async engine's pool, held between batches."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._connection: AsyncConnection | None = None
        self._last_used = 0.0
        self._lock = asyncio.Lock()  # one statement at a time on the connection

    async def _open(self) -> AsyncConnection:
        connection = self._connection
        if connection is not None and time.monotonic() - self._last_used > PING_AFTER_IDLE_SECONDS:
            try:
                await connection.execute(text("SELECT 1"))
            except Exception:
                await self._drop()
                connection = None
        if connection is None:
            opened = await self._engine.connect()
            connection = await opened.execution_options(isolation_level="AUTOCOMMIT")
            self._connection = connection
        return connection

    async def _drop(self, *, broken: bool = True) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        try:
            if broken:  # never back into the pool: its state is unknown
                await connection.invalidate()
        finally:
            await connection.close()

    async def execute(self, statement: Executable, rows: Rows) -> None:
        async with self._lock:
            connection = await self._open()
            try:
                async with AsyncSession(bind=connection) as session:
                    await session.execute(statement, list(rows))
            except BaseException:
                # Its state is unknown (a broken socket, a cancelled round trip): start afresh.
                await asyncio.shield(self._drop())
                raise
            finally:
                self._last_used = time.monotonic()

    async def aclose(self) -> None:
        async with self._lock:
            await self._drop(broken=False)


class PooledLane:
    """A pooled session per batch: for in-memory SQLite, whose every connection is a database
    of its own, and for tests that build a repository from sessions alone."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def execute(self, statement: Executable, rows: Rows) -> None:
        async with self._sessions.begin() as session:
            await session.execute(statement, list(rows))

    async def aclose(self) -> None:
        return None
