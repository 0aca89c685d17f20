"""CounterRepository: budget and rate counters in the database (the embedded default).

A reservation is one transaction: each counter row is created if missing, then raised by a
conditional UPDATE (`WHERE amount < limit`); a counter at its limit rolls the whole transaction
back. On PostgreSQL the UPDATE takes the row lock and re-reads the row after waiting for it, so
two replicas cannot both charge the last dollar; SQLite serialises writers on the file.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
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


class _Refused(Exception):
    """Raised inside the transaction to roll it back; carries the refused counter's index."""

    def __init__(self, index: int) -> None:
        self.index = index


class CounterRepository:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, postgres: bool) -> None:
        self._sessions = sessions
        self._insert: Any = postgresql.insert if postgres else sqlite.insert

    async def _ensure(self, session: AsyncSession, charges: Sequence[Charge]) -> None:
        rows = [
            {
                "name": charge.name,
                "amount": 0.0,
                "expires_at": None
                if charge.ends_at is None
                else charge.ends_at + KEEP_AFTER_PERIOD,
            }
            for charge in charges
        ]
        await session.execute(self._insert(LimitCounter).values(rows).on_conflict_do_nothing())

    @store_seam
    async def reserve(self, charges: Sequence[Charge]) -> int | None:
        try:
            async with self._sessions.begin() as session:
                await self._ensure(session, charges)
                for index, charge in enumerate(charges):
                    raised = await session.execute(
                        update(LimitCounter)
                        .where(LimitCounter.name == charge.name, LimitCounter.amount < charge.limit)
                        .values(amount=LimitCounter.amount + charge.amount)
                        .execution_options(synchronize_session=False)
                    )
                    if raised.rowcount == 0:  # type: ignore[attr-defined]
                        raise _Refused(index)
        except _Refused as refused:
            return refused.index
        return None

    @store_seam
    async def adjust(self, changes: Sequence[Charge]) -> None:
        if not changes:
            return
        async with self._sessions.begin() as session:
            await self._ensure(session, changes)
            for change in changes:
                await session.execute(
                    update(LimitCounter)
                    .where(LimitCounter.name == change.name)
                    .values(amount=LimitCounter.amount + change.amount)
                    .execution_options(synchronize_session=False)
                )

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
