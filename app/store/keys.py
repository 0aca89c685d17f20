"""ApiKeyRepository: stored keys (salt and digest only), their scopes, limits, team, revocation
and last use.

A key's team is checked in the transaction that stores the key, so a key naming a missing team
is refused with nothing stored (the foreign key catches a team deleted meanwhile).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import ApiKeyNotFound, no_such_team
from app.schemas import ApiKeyCreate, ApiKeyInfo, ApiKeyUpdate, TeamInfo
from app.store.db import store_seam
from app.store.tables import ApiKey, Team


@dataclass(frozen=True, slots=True)
class StoredKey:
    """What verification needs: the public record, its team's, plus the salt and digest."""

    info: ApiKeyInfo
    salt: str
    digest: str
    team: TeamInfo | None = None


def _info(row: ApiKey) -> ApiKeyInfo:
    return ApiKeyInfo.model_validate(row, from_attributes=True)


class ApiKeyRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def add(self, *, key_id: str, salt: str, digest: str, new: ApiKeyCreate) -> ApiKeyInfo:
        """A minted key's public id, salt and digest (app.auth.keys makes them; never the key),
        with the scope, name and limits asked for."""
        row = ApiKey(
            id=key_id,
            name=new.name,
            scope=new.scope,
            salt=salt,
            digest=digest,
            created_at=dt.datetime.now(dt.UTC),
            budgets=[],
        )
        return await self._write(row, new.changes())

    @store_seam
    async def update(self, key_id: str, changes: ApiKeyUpdate) -> ApiKeyInfo:
        """Only the fields the caller sent change (see `ApiKeyUpdate.changes`)."""
        return await self._write(key_id, changes.changes())

    async def _write(self, target: ApiKey | str, changes: dict[str, Any]) -> ApiKeyInfo:
        """Apply `changes` to a new key or the stored one with id `target`, in one transaction
        that also checks the team they name: a missing team stores nothing."""
        team = changes.get("team")
        try:
            async with self._sessions.begin() as session:
                if team is not None and await session.get(Team, team) is None:
                    raise no_such_team(team)
                row = target if isinstance(target, ApiKey) else await session.get(ApiKey, target)
                if row is None:
                    raise ApiKeyNotFound(str(target))
                for name, value in changes.items():
                    setattr(row, name, value)
                session.add(row)
        except IntegrityError as exc:  # the team was deleted between the check and the write
            if team is None:
                raise
            raise no_such_team(team) from exc
        return _info(row)

    @store_seam
    async def get(self, key_id: str) -> ApiKeyInfo:
        async with self._sessions() as session:
            row = await session.get(ApiKey, key_id)
            if row is None:
                raise ApiKeyNotFound(key_id)
            return _info(row)

    @store_seam
    async def find(self, key_id: str) -> StoredKey | None:
        async with self._sessions() as session:
            row = await session.get(ApiKey, key_id)
            if row is None:
                return None
            team = None if row.team is None else await session.get(Team, row.team)
            return StoredKey(
                _info(row),
                row.salt,
                row.digest,
                None if team is None else TeamInfo.model_validate(team, from_attributes=True),
            )

    @store_seam
    async def list(self) -> list[ApiKeyInfo]:
        async with self._sessions() as session:
            rows = await session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id))
            return [_info(row) for row in rows]

    @store_seam
    async def is_empty(self) -> bool:
        """True before the first key was ever made (revoked keys count as made)."""
        async with self._sessions() as session:
            return not await session.scalar(select(func.count()).select_from(ApiKey))

    @store_seam
    async def revoke(self, key_id: str) -> ApiKeyInfo:
        """Revoking twice keeps the first revocation time."""
        async with self._sessions.begin() as session:
            row = await session.get(ApiKey, key_id)
            if row is None:
                raise ApiKeyNotFound(key_id)
            if row.revoked_at is None:
                row.revoked_at = dt.datetime.now(dt.UTC)
            return _info(row)

    @store_seam
    async def record_use(self, last_used: dict[str, dt.datetime]) -> None:
        """Last-use times gathered in memory, written in one transaction."""
        if not last_used:
            return
        async with self._sessions.begin() as session:
            for key_id, when in last_used.items():
                await session.execute(
                    update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=when)
                )
