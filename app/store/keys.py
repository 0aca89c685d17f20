"""ApiKeyRepository: stored keys (salt and digest only), their scopes, revocation and last use."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import ApiKeyNotFound
from app.schemas import ApiKeyInfo, TeamInfo
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
    async def add(
        self, *, key_id: str, salt: str, digest: str, name: str, scope: str
    ) -> ApiKeyInfo:
        """A minted key's public id, salt and digest (app.auth.keys makes them; never the key)."""
        row = ApiKey(
            id=key_id,
            name=name,
            scope=scope,
            salt=salt,
            digest=digest,
            created_at=dt.datetime.now(dt.UTC),
        )
        async with self._sessions.begin() as session:
            session.add(row)
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
