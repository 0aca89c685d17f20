"""Budget and rate counters: what each store must do.

A reservation is all-or-nothing across every counter it names (the key's and its team's, every
window): either each counter was below its limit and all were charged, or nothing changed. That
one atomic step is what keeps concurrent requests, on one replica or many, from all passing a
check none of them has charged yet. The database store lives at the storage seam
(`app/store/counters.py`), the Redis one in `redis_counters.py` (imported only when
configured: redis-py pulls in the OpenTelemetry SDK); both answer the same questions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Mapping, Sequence
from typing import Protocol

from app.store.counters import Charge


class CounterStore(Protocol):
    def reserve(self, charges: Sequence[Charge]) -> Awaitable[int | None]:
        """Charge every counter, or none: the index of the first counter at its limit (nothing
        charged), or None (all charged)."""
        ...

    def adjust(self, changes: Sequence[Charge]) -> Awaitable[None]:
        """Add each (possibly negative) amount, unchecked: settling a reservation."""
        ...

    def read(self, names: Sequence[str]) -> Awaitable[Mapping[str, float]]:
        """The counters' current amounts (0 for one never charged)."""
        ...

    def forget_expired(self, now: dt.datetime) -> Awaitable[None]:
        """Delete counters whose period (and the day after it) is over."""
        ...

    def aclose(self) -> Awaitable[None]: ...
