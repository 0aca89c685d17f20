"""CounterRepository: budget and rate counters in the database (the embedded default).

A reservation is one statement in one transaction: an upsert of every counter it names that
raises an existing counter only while it is below its limit (`ON CONFLICT DO UPDATE … WHERE
amount < limit`); a counter at its limit changes no row, and the transaction is rolled back. On
PostgreSQL the conflicting row is locked and re-read before the WHERE is judged, so two replicas
cannot both charge the last dollar; SQLite serialises writers on the file. One statement, not
one per counter, because every limited request pays for it (bench/quotas.py).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import case, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store.db import store_seam
from app.store.tables import LimitCounter

#: A counter outlives its period by this much, so `GET /v1/keys/me` can still read the last one.
KEEP_AFTER_PERIOD = dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Charge:
    """Add `amount` to counter `name`, admitted only while the counter is below `limit`."""

    name: str
    amount: float
    limit: float
    ends_at: dt.datetime | None  # the counter's period end; None: it never ends


def _expiry(ends_at: dt.datetime | None) -> dt.datetime | None:
    return None if ends_at is None else ends_at + KEEP_AFTER_PERIOD


class CounterRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, postgres: bool) -> None:
        self._sessions = sessions
        self._insert: Any = postgresql.insert if postgres else sqlite.insert

    def _upsert(self, charges: Sequence[Charge], *, checked: bool) -> Any:
        """One statement for every counter: a missing counter is created with its charge, an
        existing one raised by it; `checked`: only while it is below its own limit."""
        rows = [
            {"name": charge.name, "amount": charge.amount, "expires_at": _expiry(charge.ends_at)}
            for charge in charges
        ]
        statement = self._insert(LimitCounter).values(rows)
        below = None
        if checked:
            limits = case({c.name: c.limit for c in charges}, value=LimitCounter.name)
            below = LimitCounter.amount < limits
        return statement.on_conflict_do_update(
            index_elements=[LimitCounter.name],
            set_={"amount": LimitCounter.amount + statement.excluded.amount},
            where=below,
        )

    @store_seam
    async def reserve(self, charges: Sequence[Charge]) -> int | None:
        """One upsert in one transaction: a counter at its limit is left alone by the upsert, so
        fewer rows change than were named, and the transaction is rolled back."""
        async with self._sessions() as session:
            async with session.begin():
                changed = await session.execute(self._upsert(charges, checked=True))
                if changed.rowcount == len(charges):  # type: ignore[attr-defined]
                    return None
                await session.rollback()
            amounts = await self.read([charge.name for charge in charges])
        # Only on a refusal: which counter was at its limit (the first, if several were).
        return next(
            (i for i, c in enumerate(charges) if amounts[c.name] >= c.limit), len(charges) - 1
        )

    @store_seam
    async def adjust(self, changes: Sequence[Charge]) -> None:
        if changes:
            async with self._sessions.begin() as session:
                await session.execute(self._upsert(changes, checked=False))

    @store_seam
    async def read(self, names: Sequence[str]) -> Mapping[str, float]:
        if not names:
            return {}
        async with self._sessions() as session:
            rows = await session.execute(
                select(LimitCounter.name, LimitCounter.amount).where(LimitCounter.name.in_(names))
            )
            found = {name: float(amount) for name, amount in rows}
        return {name: found.get(name, 0.0) for name in names}

    async def aclose(self) -> None:
        """The sessions belong to the database, which closes them."""

    @store_seam
    async def forget_expired(self, now: dt.datetime) -> None:
        """Delete counters whose period (and grace) is over: history, not state."""
        async with self._sessions.begin() as session:
            await session.execute(delete(LimitCounter).where(LimitCounter.expires_at < now))
