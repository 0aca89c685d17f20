"""ConsoleSessionRepository: the web console's sessions, found by the hash of their cookie."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store.db import store_seam
from app.store.tables import ConsoleSession


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A live session: the key it acts as (None with auth disabled) and its CSRF token."""

    key_id: str | None
    csrf: str
    expires_at: dt.datetime


class ConsoleSessionRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def add(self, token_sha256: str, session: StoredSession, now: dt.datetime) -> None:
        async with self._sessions() as db, db.begin():
            db.add(
                ConsoleSession(
                    token_sha256=token_sha256,
                    key_id=session.key_id,
                    csrf=session.csrf,
                    created_at=now,
                    expires_at=session.expires_at,
                )
            )

    @store_seam
    async def find(self, token_sha256: str) -> StoredSession | None:
        async with self._sessions() as db:
            row = await db.get(ConsoleSession, token_sha256)
        if row is None:
            return None
        return StoredSession(key_id=row.key_id, csrf=row.csrf, expires_at=row.expires_at)

    @store_seam
    async def remove(self, token_sha256: str) -> None:
        async with self._sessions() as db, db.begin():
            await db.execute(
                delete(ConsoleSession).where(ConsoleSession.token_sha256 == token_sha256)
            )

    @store_seam
    async def remove_expired(self, now: dt.datetime) -> int:
        """Sessions past their end are useless; signing in sweeps them away."""
        async with self._sessions() as db, db.begin():
            result = await db.execute(
                delete(ConsoleSession).where(ConsoleSession.expires_at <= now)
            )
        return int(getattr(result, "rowcount", 0) or 0)
