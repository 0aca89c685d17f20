"""RedisCounters: budget and rate counters in Redis, shared by every replica pointed at it."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from app.cache.redis_cache import redis_client
from app.errors import StoreUnavailable
from app.store.counters import KEEP_AFTER_PERIOD, Charge

T = TypeVar("T")

# KEYS: counters. ARGV: for each counter its amount, limit and time to live in ms ('': forever;
# not positive: the period is long over, and Redis deletes the key).
# Check all, then charge all: Redis runs a script alone, so no other client sees half of it.
_RESERVE = """
for i, name in ipairs(KEYS) do
  local current = tonumber(redis.call('GET', name) or '0')
  if current >= tonumber(ARGV[3 * i - 1]) then return i end
end
for i, name in ipairs(KEYS) do
  redis.call('INCRBYFLOAT', name, ARGV[3 * i - 2])
  if ARGV[3 * i] ~= '' then redis.call('PEXPIRE', name, ARGV[3 * i]) end
end
return 0
"""


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class RedisCounters:
    """Counters in Redis, shared by every replica pointed at it; each call bounded in time.

    A counter lives until a day after its period ends, reckoned by the gateway's clock and sent
    as a time to live, never as an instant: Redis's own clock then only counts the remainder
    down, so a gateway whose clock differs from Redis's (a skewed host, a test's moved clock)
    keeps its counters exactly as long as the database store would (issue 28)."""

    def __init__(
        self,
        client: Redis,
        *,
        timeout_seconds: float,
        prefix: str = "genai:quota:",
        clock: Callable[[], dt.datetime] = _utc_now,
    ):
        self._client = client
        self._timeout = timeout_seconds
        self._prefix = prefix
        self._clock = clock
        self._reserve = client.register_script(_RESERVE)

    def _ttl_ms(self, ends_at: dt.datetime) -> int:
        """What is left of the counter's life; not positive once it is over."""
        return int((ends_at + KEEP_AFTER_PERIOD - self._clock()).total_seconds() * 1000)

    async def reserve(self, charges: Sequence[Charge]) -> int | None:
        keys = [self._prefix + charge.name for charge in charges]
        args: list[str | int] = []
        for charge in charges:
            ttl = "" if charge.ends_at is None else self._ttl_ms(charge.ends_at)
            args += [repr(charge.amount), repr(charge.limit), ttl]
        refused = await self._call(self._reserve(keys=keys, args=args))
        return None if int(refused) == 0 else int(refused) - 1

    async def adjust(self, changes: Sequence[Charge]) -> None:
        pipeline = self._client.pipeline(transaction=False)
        for change in changes:
            name = self._prefix + change.name
            pipeline.incrbyfloat(name, change.amount)
            if change.ends_at is not None:
                pipeline.pexpire(name, self._ttl_ms(change.ends_at))
        await self._call(pipeline.execute())

    async def read(self, names: Sequence[str]) -> Mapping[str, float]:
        if not names:
            return {}
        values = await self._call(self._client.mget([self._prefix + name for name in names]))
        return {name: float(value or 0) for name, value in zip(names, values, strict=True)}

    @classmethod
    def from_url(cls, url: str, *, timeout_seconds: float) -> RedisCounters:
        """A lazily connecting client that never retries by itself (a refusal or a fail-open
        decision is the guard's, within `timeout_seconds`)."""
        client = redis_client(url, timeout_seconds=timeout_seconds, decode_responses=True)
        return cls(client, timeout_seconds=timeout_seconds)

    async def forget_expired(self, now: dt.datetime) -> None:
        """Nothing to do: every counter was given its expiry when it was charged."""

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, work: Awaitable[T]) -> T:
        try:
            async with asyncio.timeout(self._timeout):
                return await work
        except (RedisError, OSError, TimeoutError) as exc:
            raise StoreUnavailable(
                f"The quota counters in Redis cannot be reached ({type(exc).__name__})."
            ) from exc
