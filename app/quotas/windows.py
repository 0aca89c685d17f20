"""Budget and rate windows: which period an instant falls in, and when that period ends.

Periods are UTC calendar periods (a `day` budget starts over at 00:00 UTC, a `month` budget on
the 1st), rate limits count per UTC minute, and `total` never starts over. A counter's name
carries its period, so a new period is simply a new counter: nothing resets anything.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

Window = Literal["minute", "day", "month", "total"]


@dataclass(frozen=True, slots=True)
class Period:
    """One window's current period: its label (part of a counter's name) and its end."""

    label: str
    ends_at: dt.datetime | None  # None: `total`, never ends


def period(window: Window, now: dt.datetime) -> Period:
    now = now.astimezone(dt.UTC)
    if window == "minute":
        start = now.replace(second=0, microsecond=0)
        return Period(start.strftime("%Y-%m-%dT%H:%M"), start + dt.timedelta(minutes=1))
    if window == "day":
        start = now.replace(hour=0, minute=0, second=0, microsecond=0)
        return Period(start.strftime("%Y-%m-%d"), start + dt.timedelta(days=1))
    if window == "month":
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        following = (start + dt.timedelta(days=32)).replace(day=1)
        return Period(start.strftime("%Y-%m"), following)
    return Period("all", None)
