"""Concurrency limits: capacity, a bounded FIFO line, immediate shedding, clean cancellation."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from typing import Any

import pytest

from app.concurrency.limits import ConcurrencyLimits, Limit
from app.config import LimitSettings
from app.errors import ConfigurationError, Overloaded
from app.observability.metrics import Metrics


async def settle() -> None:
    """Let every runnable task take its next step."""
    for _ in range(5):
        await asyncio.sleep(0)


def limits_of(
    max_concurrent: int = 2,
    max_queued: int = 2,
    *,
    per_provider: dict[str, int] | None = None,
    retry_after_seconds: float = 1.0,
    metrics: Metrics | None = None,
) -> ConcurrencyLimits:
    settings = LimitSettings(
        max_concurrent=max_concurrent,
        max_queued=max_queued,
        per_provider=per_provider or {},
        retry_after_seconds=retry_after_seconds,
    )
    return ConcurrencyLimits(settings, metrics=metrics)


class Holder:
    """A task that holds a slot of `limit` until told to let go."""

    def __init__(self, limit: Limit, name: str, log: list[str]) -> None:
        self.go = asyncio.Event()
        self.entered = asyncio.Event()
        self.task = asyncio.create_task(self._run(limit, name, log))

    async def _run(self, limit: Limit, name: str, log: list[str]) -> None:
        async with limit:
            log.append(name)
            self.entered.set()
            await self.go.wait()


def raises_without_awaiting(coroutine: Coroutine[Any, Any, None]) -> Overloaded:
    """Step the coroutine once: a shed caller must fail on that step, before any suspension."""
    try:
        coroutine.send(None)
    except Overloaded as error:
        return error
    finally:
        coroutine.close()
    raise AssertionError("the caller was suspended instead of being shed at once")


async def test_at_most_capacity_hold_a_slot_and_the_next_waits_its_turn() -> None:
    limit = limits_of(max_concurrent=2).completion()
    log: list[str] = []
    first, second, third = (Holder(limit, name, log) for name in ("a", "b", "c"))
    await settle()
    assert log == ["a", "b"]
    assert (limit.holders, limit.waiting) == (2, 1)

    first.go.set()
    await settle()
    assert log == ["a", "b", "c"]
    assert (limit.holders, limit.waiting) == (2, 0)

    second.go.set()
    third.go.set()
    await asyncio.gather(first.task, second.task, third.task)
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_a_full_line_sheds_at_once_with_the_configured_retry_after() -> None:
    limit = limits_of(max_concurrent=1, max_queued=2, retry_after_seconds=2.5).completion()
    log: list[str] = []
    holders = [Holder(limit, name, log) for name in ("holder", "waiter-1", "waiter-2")]
    await settle()
    assert (limit.holders, limit.waiting) == (1, 2)

    error = raises_without_awaiting(limit.acquire())
    assert error.status_code == 503
    assert error.error_type == "overloaded"
    assert error.retry_after == 2.5
    assert error.headers() == {"Retry-After": "3"}  # whole seconds, rounded up
    assert error.details() == {"limit": "global", "retry_after": 2.5}
    assert "retry after 2.5 s" in error.message
    assert (limit.holders, limit.waiting) == (1, 2)  # the shed caller left no trace

    for holder in holders:
        holder.go.set()
    await asyncio.gather(*(holder.task for holder in holders))
    assert log == ["holder", "waiter-1", "waiter-2"]
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_without_a_queue_a_busy_limit_sheds_the_next_caller() -> None:
    limit = limits_of(max_concurrent=1, max_queued=0).completion()
    holder = Holder(limit, "holder", [])
    await settle()
    raises_without_awaiting(limit.acquire())
    holder.go.set()
    await holder.task
    async with limit:  # free again
        assert limit.holders == 1


async def test_waiters_are_served_first_come_first_served() -> None:
    limit = limits_of(max_concurrent=1, max_queued=10).completion()
    log: list[str] = []
    holders = [Holder(limit, f"w{n}", log) for n in range(6)]
    await settle()
    for holder in holders:  # each lets go in turn; the line advances one at a time
        holder.go.set()
        await holder.task
        await settle()
    assert log == [f"w{n}" for n in range(6)]


async def test_a_newcomer_does_not_overtake_the_line_while_a_slot_is_handed_over() -> None:
    limit = limits_of(max_concurrent=1, max_queued=5).completion()
    log: list[str] = []
    holder = Holder(limit, "holder", log)
    await settle()
    waiter = Holder(limit, "waiter", log)
    await settle()
    holder.go.set()
    await holder.task  # the slot is handed to the waiter, which has not run yet
    newcomer = Holder(limit, "newcomer", log)
    await settle()
    assert log == ["holder", "waiter"]
    waiter.go.set()
    newcomer.go.set()
    await asyncio.gather(waiter.task, newcomer.task)
    assert log == ["holder", "waiter", "newcomer"]


async def test_a_cancelled_waiter_leaves_the_line_and_the_rest_keep_their_order() -> None:
    limit = limits_of(max_concurrent=1, max_queued=5).completion()
    log: list[str] = []
    holder = Holder(limit, "holder", log)
    await settle()
    first, gone, last = (Holder(limit, name, log) for name in ("first", "gone", "last"))
    await settle()
    assert limit.waiting == 3

    gone.task.cancel()
    await settle()
    assert gone.task.cancelled()
    assert (limit.holders, limit.waiting) == (1, 2)

    for each in (holder, first, last):
        each.go.set()
    await asyncio.gather(holder.task, first.task, last.task)
    assert log == ["holder", "first", "last"]
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_a_waiter_cancelled_just_after_being_handed_the_slot_passes_it_on() -> None:
    limit = limits_of(max_concurrent=1, max_queued=5).completion()
    log: list[str] = []
    await limit.acquire()
    handed, next_in_line = Holder(limit, "handed", log), Holder(limit, "next", log)
    await settle()

    limit.release()  # `handed` now owns the slot but has not resumed
    handed.task.cancel()  # ...and its client goes away before it does
    await settle()
    assert handed.task.cancelled()
    assert log == ["next"]
    assert (limit.holders, limit.waiting) == (1, 0)

    next_in_line.go.set()
    await next_in_line.task
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_a_handed_over_slot_cancelled_with_nobody_waiting_is_freed() -> None:
    limit = limits_of(max_concurrent=1, max_queued=5).completion()
    await limit.acquire()
    handed = Holder(limit, "handed", [])
    await settle()
    limit.release()
    handed.task.cancel()
    await settle()
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_a_holder_cancelled_inside_gives_its_slot_back() -> None:
    limit = limits_of(max_concurrent=1, max_queued=1).completion()
    holder = Holder(limit, "holder", [])
    await settle()
    assert limit.holders == 1
    holder.task.cancel()
    await settle()
    assert holder.task.cancelled()
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_a_waiter_whose_deadline_passes_leaves_the_line() -> None:
    limit = limits_of(max_concurrent=1, max_queued=1).completion()
    holder = Holder(limit, "holder", [])
    await settle()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await limit.acquire()
    assert (limit.holders, limit.waiting) == (1, 0)
    # The line has room again: a new waiter is queued, not shed.
    late = Holder(limit, "late", [])
    await settle()
    assert limit.waiting == 1
    holder.go.set()
    late.go.set()
    await asyncio.gather(holder.task, late.task)
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_cancellation_at_random_points_never_leaks_or_exceeds_a_slot() -> None:
    limit = limits_of(max_concurrent=3, max_queued=4).completion()
    rng = random.Random(9)
    inside = 0
    most_inside = 0
    shed = 0

    async def caller() -> None:
        nonlocal inside, most_inside, shed
        try:
            async with limit:
                inside += 1
                most_inside = max(most_inside, inside)
                try:
                    for _ in range(rng.randint(0, 8)):
                        await asyncio.sleep(0)
                finally:
                    inside -= 1
        except Overloaded:
            shed += 1

    tasks = []
    for _ in range(300):
        tasks.append(asyncio.create_task(caller()))
        for _ in range(rng.randint(0, 2)):
            await asyncio.sleep(0)
        if rng.random() < 0.4:
            rng.choice(tasks).cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert most_inside == 3
    assert shed > 0  # the line did fill, so the shed path ran amid cancellations
    assert (limit.holders, limit.waiting) == (0, 0)


async def test_provider_limits_are_independent_of_each_other_and_of_the_global_one() -> None:
    limits = limits_of(max_concurrent=5, max_queued=0, per_provider={"ollama": 1, "openai": 2})
    ollama = limits.provider("ollama")
    assert isinstance(ollama, Limit)
    holder = Holder(ollama, "ollama", [])
    await settle()

    error = raises_without_awaiting(ollama.acquire())
    assert error.limit == "provider:ollama"
    assert "calls to ollama" in error.message

    # No limit configured for anthropic: as many calls as asked, never shed.
    async with (
        limits.provider("openai"),
        limits.provider("openai"),
        limits.completion(),
        limits.provider("anthropic"),
        limits.provider("anthropic"),
    ):
        assert limits.completion().holders == 1
    holder.go.set()
    await holder.task


def test_a_provider_limit_below_one_is_refused_at_start() -> None:
    with pytest.raises(ConfigurationError) as caught:
        limits_of(per_provider={"ollama": 0})
    assert caught.value.setting == "GENAI_LIMITS__PER_PROVIDER"
    assert "ollama" in caught.value.problem


async def test_metrics_show_slots_in_use_waiters_and_shed_requests() -> None:
    metrics = Metrics()
    limit = limits_of(max_concurrent=1, max_queued=1, metrics=metrics).completion()

    def sample(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"limit": "global"})

    holder, waiter = Holder(limit, "holder", []), Holder(limit, "waiter", [])
    await settle()
    raises_without_awaiting(limit.acquire())
    raises_without_awaiting(limit.acquire())
    assert sample("genai_inflight") == 1
    assert sample("genai_queue_waiting") == 1
    assert sample("genai_shed_total") == 2

    holder.go.set()
    waiter.go.set()
    await asyncio.gather(holder.task, waiter.task)
    assert sample("genai_inflight") == 0
    assert sample("genai_queue_waiting") == 0
