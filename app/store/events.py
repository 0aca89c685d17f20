"""AdminEventRepository: the `audit_events` log, appended to and read newest first.

Pages are keyset-paginated on (at, id) (app/store/keyset.py): a page starts strictly after the
last row of the one before, so rows appended while an operator pages cannot shift or repeat them.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.schemas import AdminEvent
from app.store.db import store_seam
from app.store.keyset import Position, newest_first
from app.store.tables import AuditEvent

_FIELDS = tuple(AdminEvent.model_fields)


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events to read; every field given narrows the result (`until` is exclusive)."""

    action: str | None = None
    actor_key_id: str | None = None
    target: str | None = None
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def _event(row: AuditEvent) -> AdminEvent:
    return AdminEvent.model_validate({name: getattr(row, name) for name in _FIELDS})


class AdminEventRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def add(self, event: AdminEvent) -> None:
        async with self._sessions.begin() as session:
            await session.execute(insert(AuditEvent), [event.model_dump()])

    @store_seam
    async def page(
        self, where: EventFilter, *, limit: int, after: Position | None = None
    ) -> list[AdminEvent]:
        """Up to `limit` events matching `where`, newest first, older than `after` if given."""
        equal = (
            (AuditEvent.action, where.action),
            (AuditEvent.actor_key_id, where.actor_key_id),
            (AuditEvent.target, where.target),
        )
        query = newest_first(
            select(AuditEvent),
            AuditEvent.at,
            AuditEvent.id,
            equal=equal,
            since=where.since,
            until=where.until,
            after=after,
        )
        async with self._sessions() as session:
            return [_event(row) for row in await session.scalars(query.limit(limit))]
