"""TeamRepository: teams, whose keys share the team's budgets and rate limits.

A team is deleted only while no unrevoked key belongs to it; its revoked keys are let go of it
(their jobs keep the team's name, so usage by team is not lost).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import TeamExists, TeamInUse, TeamNotFound
from app.schemas import TeamCreate, TeamInfo, TeamUpdate
from app.store.db import store_seam
from app.store.tables import ApiKey, Team


def _info(row: Team) -> TeamInfo:
    return TeamInfo.model_validate(row, from_attributes=True)


class TeamRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def add(self, new: TeamCreate) -> TeamInfo:
        now = dt.datetime.now(dt.UTC)
        row = Team(name=new.name, budgets=[], created_at=now, updated_at=now)
        for name, value in new.changes().items():
            setattr(row, name, value)
        try:
            async with self._sessions.begin() as session:
                if await session.get(Team, new.name) is not None:
                    raise TeamExists(new.name)
                session.add(row)
        except IntegrityError:  # made at the same moment by another caller
            raise TeamExists(new.name) from None
        return _info(row)

    @store_seam
    async def get(self, name: str) -> TeamInfo:
        async with self._sessions() as session:
            row = await session.get(Team, name)
            if row is None:
                raise TeamNotFound(name)
            return _info(row)

    @store_seam
    async def list(self) -> list[TeamInfo]:
        async with self._sessions() as session:
            return [_info(row) for row in await session.scalars(select(Team).order_by(Team.name))]

    @store_seam
    async def update(self, name: str, changes: TeamUpdate) -> TeamInfo:
        """Only the fields the caller sent change (see `TeamUpdate.changes`)."""
        async with self._sessions.begin() as session:
            row = await session.get(Team, name)
            if row is None:
                raise TeamNotFound(name)
            for field, value in changes.changes().items():
                setattr(row, field, value)
            row.updated_at = dt.datetime.now(dt.UTC)
            return _info(row)

    @store_seam
    async def delete(self, name: str) -> TeamInfo:
        """Refused (409) while an unrevoked key belongs to the team."""
        try:
            async with self._sessions.begin() as session:
                row = await session.get(Team, name)
                if row is None:
                    raise TeamNotFound(name)
                members = ApiKey.team == name
                live = await session.scalar(
                    select(func.count()).where(members, ApiKey.revoked_at.is_(None))
                )
                if live:
                    raise TeamInUse(name, live)
                await session.execute(update(ApiKey).where(members).values(team=None))
                await session.delete(row)
                return _info(row)
        except IntegrityError:  # a key joined the team meanwhile (the foreign key held)
            raise TeamInUse(name, 1) from None
