"""DeliveryRepository: the `webhook_deliveries` outbox, its leases and its log.

A delivery is claimed by one conditional UPDATE … RETURNING that sets a lease and counts the
attempt; on PostgreSQL the candidate rows are picked `FOR UPDATE SKIP LOCKED`, so replicas
claiming at once take different rows instead of queueing behind each other. `attempts` doubles
as the fencing token: an outcome is written only by the claim that made that attempt, so a
dispatcher whose lease ran out (and whose row another claimed) cannot overwrite the newer one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import case, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.schemas import WebhookDeliveryInfo
from app.store.db import store_seam
from app.store.tables import WebhookDelivery

_COLUMNS = tuple(column.name for column in WebhookDelivery.__table__.columns)
_INFO_FIELDS = frozenset(WebhookDeliveryInfo.model_fields)


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery this dispatcher may attempt until its lease ends; `attempt` counts from 1."""

    id: int
    event_id: str
    event_type: str
    url: str
    payload: dict[str, Any]
    attempt: int


@dataclass(frozen=True, slots=True)
class Settlement:
    """What one attempt came to: delivered, pending again at `next_attempt_at`, or failed."""

    status: Literal["delivered", "pending", "failed"]
    at: dt.datetime
    status_code: int | None = None
    error: str | None = None
    next_attempt_at: dt.datetime | None = None


def _info(row: WebhookDelivery) -> WebhookDeliveryInfo:
    return WebhookDeliveryInfo.model_validate(
        {name: getattr(row, name) for name in _COLUMNS if name in _INFO_FIELDS}
    )


class DeliveryRepository:
    """Typed records in and out; the dispatcher and the delivery-log routes share it."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, postgres: bool) -> None:
        self._sessions = sessions
        self._postgres = postgres

    @store_seam
    async def add(
        self,
        *,
        event_id: str,
        event_type: str,
        urls: Sequence[str],
        payload: dict[str, Any],
        now: dt.datetime,
    ) -> None:
        """One pending row per URL, in one transaction: an event is queued for all or none."""
        rows = [
            {
                "event_id": event_id,
                "event_type": event_type,
                "url": url,
                "payload": payload,
                "status": "pending",
                "attempts": 0,
                "next_attempt_at": now,
                "created_at": now,
            }
            for url in urls
        ]
        async with self._sessions.begin() as session:
            await session.execute(insert(WebhookDelivery), rows)

    @store_seam
    async def claim(
        self, *, now: dt.datetime, lease_seconds: float, limit: int
    ) -> list[ClaimedDelivery]:
        """Up to `limit` due pending rows whose lease is free (or ran out), leased to the caller."""
        free = or_(WebhookDelivery.lease_until.is_(None), WebhookDelivery.lease_until <= now)
        due = (WebhookDelivery.status == "pending", WebhookDelivery.next_attempt_at <= now, free)
        candidates = (
            select(WebhookDelivery.id)
            .where(*due)
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
            .limit(limit)
        )
        if self._postgres:
            candidates = candidates.with_for_update(skip_locked=True)
        # The conditions again on the UPDATE itself: on SQLite the one statement is atomic, and
        # a row another claim took in between no longer matches.
        query = (
            update(WebhookDelivery)
            .where(WebhookDelivery.id.in_(candidates.scalar_subquery()), *due)
            .values(
                lease_until=now + dt.timedelta(seconds=lease_seconds),
                attempts=WebhookDelivery.attempts + 1,
            )
            .returning(
                WebhookDelivery.id,
                WebhookDelivery.event_id,
                WebhookDelivery.event_type,
                WebhookDelivery.url,
                WebhookDelivery.payload,
                WebhookDelivery.attempts,
            )
            .execution_options(synchronize_session=False)
        )
        async with self._sessions.begin() as session:
            rows = (await session.execute(query)).all()
        claimed = [
            ClaimedDelivery(
                id=row.id,
                event_id=row.event_id,
                event_type=row.event_type,
                url=row.url,
                payload=row.payload,
                attempt=row.attempts,
            )
            for row in rows
        ]
        return sorted(claimed, key=lambda delivery: delivery.id)

    @store_seam
    async def settle(self, delivery: ClaimedDelivery, outcome: Settlement) -> bool:
        """Write the attempt's outcome and free the lease; False when the claim was lost."""
        values: dict[str, Any] = {
            "status": outcome.status,
            "last_status_code": outcome.status_code,
            "last_error": outcome.error[:300] if outcome.error else None,
            "lease_until": None,
        }
        if outcome.status == "delivered":
            values["delivered_at"] = outcome.at
        if outcome.next_attempt_at is not None:
            values["next_attempt_at"] = outcome.next_attempt_at
        query = (
            update(WebhookDelivery)
            .where(
                WebhookDelivery.id == delivery.id,
                WebhookDelivery.status == "pending",
                WebhookDelivery.attempts == delivery.attempt,
            )
            .values(**values)
            .execution_options(synchronize_session=False)
        )
        async with self._sessions.begin() as session:
            result = await session.execute(query)
        return int(getattr(result, "rowcount", 0) or 0) == 1

    @store_seam
    async def next_due(self) -> dt.datetime | None:
        """When the earliest pending row can next be claimed: when it is due, or when its lease
        runs out if it is leased."""
        row = WebhookDelivery
        free_at = case(
            (row.lease_until > row.next_attempt_at, row.lease_until), else_=row.next_attempt_at
        )
        query = select(func.min(free_at)).where(row.status == "pending")
        async with self._sessions() as session:
            value = await session.scalar(query)
        if isinstance(value, str):  # SQLite: an aggregate bypasses the column type
            value = dt.datetime.fromisoformat(value)
        if isinstance(value, dt.datetime) and value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value if isinstance(value, dt.datetime) else None

    @store_seam
    async def get(self, delivery_id: int) -> WebhookDeliveryInfo | None:
        async with self._sessions() as session:
            row = await session.get(WebhookDelivery, delivery_id)
            return None if row is None else _info(row)

    @store_seam
    async def recent(
        self, *, limit: int, status: str | None = None, event_type: str | None = None
    ) -> list[WebhookDeliveryInfo]:
        """The newest `limit` deliveries, newest first, optionally of one status or event type."""
        query = (
            select(WebhookDelivery)
            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id.desc())
            .limit(limit)
        )
        if status is not None:
            query = query.where(WebhookDelivery.status == status)
        if event_type is not None:
            query = query.where(WebhookDelivery.event_type == event_type)
        async with self._sessions() as session:
            return [_info(row) for row in await session.scalars(query)]

    @store_seam
    async def retry(self, delivery_id: int, *, now: dt.datetime) -> WebhookDeliveryInfo | None:
        """A failed delivery pending again with a fresh count of attempts, due now; None when
        it is not failed (or does not exist): the caller tells which by `get`."""
        query = (
            update(WebhookDelivery)
            .where(WebhookDelivery.id == delivery_id, WebhookDelivery.status == "failed")
            .values(status="pending", attempts=0, next_attempt_at=now, lease_until=None)
            .execution_options(synchronize_session=False)
        )
        async with self._sessions.begin() as session:
            result = await session.execute(query)
            if not int(getattr(result, "rowcount", 0) or 0):
                return None
            row = await session.get(WebhookDelivery, delivery_id)
            return None if row is None else _info(row)
