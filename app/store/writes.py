"""The audit writer's transactions: on SQLite, on a connection the writer owns in its own thread.

aiosqlite runs every statement of a transaction (BEGIN, INSERT, COMMIT, the pool's reset) as a
separate hop to its worker thread and back; profiled under load, those hops were the largest
cost the gateway added to a completion. `OwnedSqliteWrites` keeps one plain (pysqlite)
connection in one dedicated thread and runs a whole transaction there: one hop per batch.
Other work (reads, keys, templates) keeps the async engine; WAL lets them read beside it and the
busy timeout orders the rare concurrent writes.

On PostgreSQL asyncpg needs no thread at all, so `PooledWrites` runs the same unit of work on a
pooled async session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import Session

T = TypeVar("T")


class Writes(Protocol):
    """Runs `work` in one transaction and commits it; raises the driver's error as is."""

    async def transaction(self, work: Callable[[Session], T]) -> T: ...

    async def aclose(self) -> None: ...


class PooledWrites:
    """A pooled async session per transaction (PostgreSQL, and repositories built in tests)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def transaction(self, work: Callable[[Session], T]) -> T:
        async with self._sessions.begin() as session:
            return await session.run_sync(work)

    async def aclose(self) -> None:
        return None


class OwnedSqliteWrites:
    """One SQLite connection, used only from one thread: a transaction costs one thread hop."""

    def __init__(self, url: URL, *, tune: Callable[[Any, Any], None]) -> None:
        self._engine: Engine = create_engine(
            url.set(drivername="sqlite+pysqlite"),
            hide_parameters=True,  # parameters may hold personal data
            pool_size=1,
            max_overflow=0,
        )
        event.listen(self._engine, "connect", tune)
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="audit-sqlite")

    def _run(self, work: Callable[[Session], T]) -> T:
        with Session(self._engine) as session, session.begin():
            return work(session)

    async def transaction(self, work: Callable[[Session], T]) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._run, work)

    async def aclose(self) -> None:
        """Waits for a transaction in progress (never cut mid-commit), then closes."""
        await asyncio.get_running_loop().run_in_executor(self._thread, self._engine.dispose)
        self._thread.shutdown(wait=True)
