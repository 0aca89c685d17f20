"""Budget and rate counters, and the guard that reserves and settles against them.

Every counter store is tested for the same promises: a reservation charges all of its counters
or none, and concurrent reservations (from one process, or from two stores standing for two
replicas on one database or one Redis) never admit more than the limit allows. Windows roll
over by the guard's clock, moved by the test, never by sleeping.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
from redis.asyncio import Redis

from app.auth.keys import Scope
from app.auth.principal import Principal
from app.errors import BudgetExceeded, KeyRateLimited, QuotaStoreUnavailable
from app.quotas.counters import CounterStore
from app.quotas.guard import Estimate, QuotaGuard
from app.quotas.redis_counters import RedisCounters
from app.routing.prices import PriceTable
from app.schemas import Budget, Limits, Usage
from app.store.counters import Charge, CounterRepository
from app.store.db import Database
from tests.clock import tomorrow_at
from tests.test_cache import REDIS_URL, require_redis

CLOSED_PORT_REDIS = "redis://127.0.0.1:9/0"
NOON = tomorrow_at(12, 0, 30)  # relative to the real now: Redis expires counters by real time

StoreFactory = Callable[[], CounterStore]


@pytest.fixture(params=["database", "redis"])
async def stores(request: pytest.FixtureRequest, database_url: str) -> AsyncIterator[StoreFactory]:
    """Makes counter stores that share one backing store, as replicas do: each call opens a new
    connection (a new engine, or a new Redis client) to the same database or Redis."""
    prefix = f"genai:test:{uuid.uuid4().hex}:"
    if request.param == "database":
        migrated = Database(database_url)
        await migrated.migrate()
        databases = [migrated]

        def make() -> CounterStore:
            database = Database(database_url)
            databases.append(database)
            return CounterRepository(database.sessions, postgres=not database.is_sqlite)

        yield make
        for database in databases:
            await database.aclose()
        return
    await require_redis()
    clients: list[Redis] = []

    def make_redis() -> CounterStore:
        client = Redis.from_url(REDIS_URL, decode_responses=True)
        clients.append(client)
        return RedisCounters(client, timeout_seconds=10.0, prefix=prefix)  # a loaded CI machine

    yield make_redis
    cleanup = Redis.from_url(REDIS_URL)
    keys = [key async for key in cleanup.scan_iter(match=f"{prefix}*")]
    if keys:
        await cleanup.delete(*keys)
    await cleanup.aclose()
    for client in clients:
        await client.aclose()


def charge(name: str, amount: float, limit: float) -> Charge:
    return Charge(name, amount, limit, NOON + dt.timedelta(minutes=1))


async def test_a_reservation_charges_every_counter_or_none(stores: StoreFactory) -> None:
    store = stores()
    assert await store.reserve([charge("a", 1, 5), charge("b", 1, 1)]) is None
    # b is at its limit: the second reservation is refused at b, and a is not charged either.
    assert await store.reserve([charge("a", 1, 5), charge("b", 1, 1)]) == 1
    assert await store.read(["a", "b", "never"]) == {"a": 1.0, "b": 1.0, "never": 0.0}
    await store.adjust([charge("a", -0.25, 0)])
    assert (await store.read(["a"]))["a"] == pytest.approx(0.75)


async def test_concurrent_reservations_from_two_replicas_admit_exactly_the_limit(
    stores: StoreFactory,
) -> None:
    one, other = stores(), stores()

    async def attempt(store: CounterStore) -> bool:
        return await store.reserve([charge("rpm", 1, 10)]) is None

    admitted = await asyncio.gather(*(attempt(one if i % 2 else other) for i in range(40)))
    assert sum(admitted) == 10
    assert (await one.read(["rpm"]))["rpm"] == 10


async def test_a_budget_overshoots_by_less_than_one_reservation(stores: StoreFactory) -> None:
    """Admitted while below the budget: the last admitted call may cross it, by less than its
    own reservation, however many arrive at once."""
    one, other = stores(), stores()
    results = await asyncio.gather(
        *((one if i % 2 else other).reserve([charge("usd", 0.3, 1.0)]) for i in range(30))
    )
    assert sum(result is None for result in results) == 4  # 0, 0.3, 0.6, 0.9 were below 1.0
    spent = (await one.read(["usd"]))["usd"]
    assert 1.0 <= spent < 1.0 + 0.3


# --- the guard: reserve, settle, refuse, roll over --------------------------------------------


class Clock:
    def __init__(self, now: dt.datetime) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


def guard_on(store: CounterStore, clock: Clock, *, fail_open: bool = False) -> QuotaGuard:
    return QuotaGuard(
        store, PriceTable.load(), reserve_output_tokens=100, fail_open=fail_open, clock=clock
    )


def caller(limits: Limits, *, team: Limits | None = None) -> Principal:
    return Principal(
        key_id=uuid.uuid4().hex[:16],
        scope=Scope.complete,
        team="payments" if team is not None else None,
        limits=limits,
        team_limits=team or Limits(),
    )


async def test_rpm_refuses_with_retry_after_and_starts_over_next_minute(
    stores: StoreFactory,
) -> None:
    clock = Clock(NOON)
    guard = guard_on(stores(), clock)
    key = caller(Limits(rpm=2))
    for _ in range(2):
        await guard.reserve(key, Estimate(tokens=10, usd=0.0))
    with pytest.raises(KeyRateLimited) as refused:
        await guard.reserve(key, Estimate(tokens=10, usd=0.0))
    assert refused.value.limit == "rpm" and refused.value.owner == "key"
    assert refused.value.headers()["Retry-After"] == "30"  # 12:00:30 → the minute ends at 12:01
    clock.now += dt.timedelta(minutes=1)
    await guard.reserve(key, Estimate(tokens=10, usd=0.0))


async def test_a_day_budget_settles_to_the_real_cost_and_starts_over_at_midnight(
    stores: StoreFactory,
) -> None:
    clock = Clock(NOON)
    guard = guard_on(stores(), clock)
    key = caller(Limits(budgets=[Budget(usd=1.0, window="day")]))
    held = await guard.reserve(key, Estimate(tokens=1000, usd=0.9))
    held.settle(Usage(input_tokens=10, output_tokens=5), 0.2)  # the call cost less
    await guard.drain()
    status = await guard.status("key", key.key_id or "", key.limits)
    assert status.budgets[0].spent_usd == pytest.approx(0.2)
    for _ in range(2):
        held = await guard.reserve(key, Estimate(tokens=1000, usd=0.5))
        held.settle(Usage(input_tokens=10, output_tokens=5), 0.5)
        await guard.drain()
    with pytest.raises(BudgetExceeded) as refused:
        await guard.reserve(key, Estimate(tokens=1000, usd=0.1))
    assert refused.value.headers()["x-should-retry"] == "false"
    assert refused.value.limit == "day"
    clock.now = NOON.replace(hour=0, minute=0, second=1) + dt.timedelta(days=1)
    await guard.reserve(key, Estimate(tokens=1000, usd=0.1))


async def test_a_team_limit_binds_every_key_of_the_team(stores: StoreFactory) -> None:
    guard = guard_on(stores(), Clock(NOON))
    team = Limits(rpm=3)
    alice = Principal("a" * 16, Scope.complete, team="payments", team_limits=team)
    bob = Principal("b" * 16, Scope.complete, team="payments", team_limits=team)
    for who in (alice, bob, alice):
        await guard.reserve(who, Estimate(tokens=1, usd=0.0))
    with pytest.raises(KeyRateLimited) as refused:
        await guard.reserve(bob, Estimate(tokens=1, usd=0.0))
    assert refused.value.owner == "team"


async def test_a_released_reservation_gives_everything_back_but_the_request(
    stores: StoreFactory,
) -> None:
    guard = guard_on(stores(), Clock(NOON))
    key = caller(Limits(rpm=10, tpm=1000, budgets=[Budget(usd=5, window="month")]))
    held = await guard.reserve(key, Estimate(tokens=800, usd=2.0))
    held.release()
    await guard.drain()
    status = await guard.status("key", key.key_id or "", key.limits)
    assert status.budgets[0].spent_usd == 0
    assert status.tpm is not None and status.tpm.used == 0
    assert status.rpm is not None and status.rpm.used == 1


async def test_an_unlimited_key_never_touches_the_counters() -> None:
    guard = guard_on(RedisCounters.from_url(CLOSED_PORT_REDIS, timeout_seconds=0.2), Clock(NOON))
    held = await guard.reserve(caller(Limits()), Estimate(tokens=10, usd=1.0))
    held.settle(Usage(input_tokens=1, output_tokens=1), 1.0)
    await guard.drain()
    await guard.aclose()


@pytest.mark.parametrize("fail_open", [False, True])
async def test_unreachable_counters_refuse_or_serve_as_configured(fail_open: bool) -> None:
    guard = guard_on(
        RedisCounters.from_url(CLOSED_PORT_REDIS, timeout_seconds=0.2),
        Clock(NOON),
        fail_open=fail_open,
    )
    key = caller(Limits(rpm=5))
    try:
        if fail_open:
            held = await guard.reserve(key, Estimate(tokens=1, usd=0.0))
            assert not held.counters  # served unchecked: nothing to settle
        else:
            with pytest.raises(QuotaStoreUnavailable) as refused:
                await guard.reserve(key, Estimate(tokens=1, usd=0.0))
            assert refused.value.status_code == 503
    finally:
        await guard.aclose()


async def test_counters_of_periods_long_over_are_deleted(stores: StoreFactory) -> None:
    store = stores()
    guard = guard_on(store, Clock(NOON))
    old = Charge("old", 1, 5, NOON - dt.timedelta(days=3))
    current = charge("current", 1, 5)
    assert await store.reserve([old, current]) is None
    await guard.tidy()
    assert await store.read(["old", "current"]) == {"old": 0.0, "current": 1.0}
