"""WriteLane: the pending-record INSERT's own way to the database, one hop per batch.

Every request waits for its pending record to be durable before the provider is called, so the
cost of that INSERT is on every request's path. Through the pooled session it was a checkout
(with a ping on PostgreSQL), BEGIN, the statement and COMMIT, each a thread hop (aiosqlite) or
a round trip (asyncpg): 1.1 ms on SQLite and 2.3 ms on PostgreSQL per batch of one, measured.
The lane keeps the batch's whole transaction to one hop:

- SQLite: a synchronous connection owned by one thread; the transaction runs there in a single
  call, so the event loop hands off once, not once per statement (and the thread does not wait
  for the interpreter lock once per statement while the loop is busy).
- PostgreSQL: one connection held in autocommit; asyncpg's executemany sends every row and a
  single Sync, so the batch is one implicit transaction, atomic, in one round trip. A connection
  idle for a while is pinged before use (a restarted server costs no failed request), and one
  that failed is dropped and reopened on the next batch.

Errors are the driver's, wrapped by SQLAlchemy as through the pool, so the AuditWriter tells a
refused record from a store that is down the same way.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from sqlalchemy import Engine, Executable, create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

Rows = Sequence[dict[str, Any]]

#: A held PostgreSQL connection unused for this long is pinged before the next batch.
PING_AFTER_IDLE_SECONDS = 1.0


class WriteLane(Protocol):
    async def execute(self, statement: Executable, rows: Rows) -> None:
        """The statement (Core, or an ORM bulk UPDATE by primary key) once per row, in one
        transaction (on PostgreSQL, one per group of rows with the same columns)."""
        ...

    async def aclose(self) -> None: ...


class SqliteLane:
    """A synchronous SQLite connection in a thread of its own (`tune` sets its pragmas)."""

    def __init__(self, url: URL, *, engine_options: dict[str, Any]) -> None:
        self._engine: Engine = create_engine(
            url.set(drivername="sqlite"), pool_size=1, max_overflow=0, **engine_options
        )
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="genai-sqlite-lane")

    @property
    def engine(self) -> Engine:
        return self._engine

    def _run(self, statement: Executable, rows: Rows) -> None:
        with Session(self._engine) as session, session.begin():
            session.execute(statement, list(rows))

    async def execute(self, statement: Executable, rows: Rows) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._run, statement, rows)

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=True)


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
