"""Concurrency limits with a bounded FIFO wait queue: beyond it, 503 `overloaded` at once.

A request that finds every slot busy waits in line; one that finds the line full too is shed
before it awaits anything, so overload costs a quick answer instead of memory and latency. The
limits are plain counters and one future per waiter: nothing is allocated for a request that
gets a slot at once, and a waiter that is cancelled (client gone, deadline) leaves the line
without keeping or losing a slot.

    limits = ConcurrencyLimits(settings.limits, metrics=metrics)
    async with limits.completion():          # the global slot of one completion
        async with limits.provider("openai"):  # a slot for one upstream call
            ...
"""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Final

from app.config import LimitSettings
from app.errors import ConfigurationError, Overloaded
from app.observability.metrics import Metrics

GLOBAL_LIMIT: Final = "global"
PROVIDER_LIMIT_PREFIX: Final = "provider:"


class Limit:
    """At most `capacity` holders and `max_queued` waiters, served first come, first served.

    The limit is its own async context manager (`async with limit:`), so entering it allocates
    nothing beyond the future of a waiter.
    """

    def __init__(
        self,
        name: str,
        *,
        capacity: int,
        max_queued: int,
        retry_after_seconds: float,
        metrics: Metrics | None = None,
    ) -> None:
        if capacity < 1 or max_queued < 0:
            raise ValueError(f"limit {name!r}: capacity must be ≥ 1 and max_queued ≥ 0")
        self.name = name
        self.capacity = capacity
        self.max_queued = max_queued
        self.retry_after_seconds = retry_after_seconds
        self._holders = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Label lookups done once, not per request.
        self._shed = metrics.shed.labels(name) if metrics else None
        self._inflight = metrics.inflight.labels(name) if metrics else None
        self._waiting = metrics.queue_waiting.labels(name) if metrics else None

    @property
    def holders(self) -> int:
        return self._holders

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def refuse_if_full(self) -> None:
        """Raise Overloaded when a caller arriving now would be shed; lets the HTTP layer shed
        before it reads a body or checks a key, which is what keeps overload cheap."""
        if self._holders >= self.capacity and len(self._waiters) >= self.max_queued:
            if self._shed is not None:
                self._shed.inc()
            raise self._overloaded()

    async def acquire(self) -> None:
        """Take a slot, waiting in line if need be; raise Overloaded at once if the line is full."""
        if self._holders < self.capacity and not self._waiters:
            self._holders += 1
            self._show_holders()
            return
        if len(self._waiters) >= self.max_queued:
            if self._shed is not None:
                self._shed.inc()
            raise self._overloaded()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._show_waiting()
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                # The slot was handed over just as this waiter gave up: pass it on.
                self.release()
            else:
                self._waiters.remove(waiter)
                self._show_waiting()
            raise
        # `release` handed its slot straight to this waiter: the holder count did not change.

    def release(self) -> None:
        """Give the slot to the longest waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._show_waiting()
                return
        self._holders -= 1
        self._show_holders()
        self._show_waiting()

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()

    def _overloaded(self) -> Overloaded:
        if self.name == GLOBAL_LIMIT:
            what, setting = "completions", "GENAI_LIMITS__MAX_CONCURRENT"
        else:
            what = f"calls to {self.name.removeprefix(PROVIDER_LIMIT_PREFIX)}"
            setting = "GENAI_LIMITS__PER_PROVIDER"
        return Overloaded(
            f"The gateway is at capacity ({self.capacity} {what} in flight and {self.max_queued} "
            f"waiting); retry after {self.retry_after_seconds:g} s (operators: {setting}, "
            "GENAI_LIMITS__MAX_QUEUED).",
            retry_after=self.retry_after_seconds,
            limit=self.name,
        )

    def _show_holders(self) -> None:
        if self._inflight is not None:
            self._inflight.set(self._holders)

    def _show_waiting(self) -> None:
        if self._waiting is not None:
            self._waiting.set(len(self._waiters))


class _Unlimited:
    """A provider without a configured limit: entering costs nothing and never waits."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        return None


_UNLIMITED: Final = _Unlimited()


class ConcurrencyLimits:
    """The global completion limit and the per-provider upstream limits of one process."""

    def __init__(self, settings: LimitSettings, *, metrics: Metrics | None = None) -> None:
        for provider, capacity in settings.per_provider.items():
            if capacity < 1:
                raise ConfigurationError(
                    "GENAI_LIMITS__PER_PROVIDER",
                    f"{provider}: {capacity} allows no call at all; give 1 or more, or leave "
                    "the provider out to leave it unlimited",
                )
        self._global = Limit(
            GLOBAL_LIMIT,
            capacity=settings.max_concurrent,
            max_queued=settings.max_queued,
            retry_after_seconds=settings.retry_after_seconds,
            metrics=metrics,
        )
        # A provider's calls wait in a line as long as the global one.
        self._providers = {
            provider: Limit(
                PROVIDER_LIMIT_PREFIX + provider,
                capacity=capacity,
                max_queued=settings.max_queued,
                retry_after_seconds=settings.retry_after_seconds,
                metrics=metrics,
            )
            for provider, capacity in settings.per_provider.items()
        }

    def completion(self) -> Limit:
        """`async with limits.completion():` around one whole completion."""
        return self._global

    def provider(self, name: str) -> AbstractAsyncContextManager[None]:
        """`async with limits.provider(name):` around one upstream call; unlimited if not set."""
        return self._providers.get(name, _UNLIMITED)
