"""When a failed delivery is tried again: exponential back-off with jitter, or Retry-After.

The schedule is durable (a `next_attempt_at` in the outbox), so it is computed here rather
than by an in-memory retry library: a restart or another replica picks it up where it stood.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import random
from collections.abc import Callable

#: A Retry-After longer than this is capped: a receiver cannot park a delivery for days.
MAX_RETRY_AFTER_SECONDS = 3600.0


def delay_seconds(
    attempt: int,
    *,
    initial: float,
    maximum: float,
    jitter: Callable[[], float] = random.random,
) -> float:
    """The wait after failed attempt `attempt` (1-based): initial·2^(attempt-1), capped at
    `maximum`, then jittered into its upper half so replicas do not retry in lockstep."""
    ceiling = min(maximum, initial * 2.0 ** max(0, attempt - 1))
    return float(ceiling / 2 + ceiling / 2 * jitter())


def retry_after_seconds(value: str | None, *, now: dt.datetime) -> float | None:
    """Retry-After as seconds (a number or an HTTP date), None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        seconds = (when - now).total_seconds()
    return min(max(0.0, seconds), MAX_RETRY_AFTER_SECONDS)


def next_attempt_at(
    attempt: int,
    *,
    now: dt.datetime,
    initial: float,
    maximum: float,
    retry_after: float | None = None,
    jitter: Callable[[], float] = random.random,
) -> dt.datetime:
    """When to try again: the back-off, or the receiver's Retry-After when that is later."""
    wait = delay_seconds(attempt, initial=initial, maximum=maximum, jitter=jitter)
    if retry_after is not None:
        wait = max(wait, retry_after)
    return now + dt.timedelta(seconds=wait)
