"""Webhooks end to end against a real loopback receiver, on SQLite and PostgreSQL: every delivery
is signed (the receiver checks the HMAC), failures are retried on a durable back-off schedule,
leases keep two dispatchers from sending one row twice, and `emit` never waits for a receiver."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from app.errors import StoreUnavailable
from app.observability.metrics import Metrics
from app.store.db import Database
from app.store.webhooks import DeliveryRepository, Settlement
from app.webhooks import signing
from app.webhooks.dispatcher import DispatchTuning, WebhookDispatcher
from tests.clock import tomorrow_at
from tests.fakes.webhook_receiver import (
    HANG,
    Received,
    WebhookReceiver,
    eventually,
    running_receiver,
)

SECRET = b"test-webhook-secret"
START = tomorrow_at(12)
TUNING = DispatchTuning(
    timeout_seconds=5.0, max_attempts=3, backoff_initial_seconds=10.0, backoff_max_seconds=60.0
)


class Clock:
    """The dispatcher's notion of now, moved by the test: schedules are checked, never waited."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with running_receiver() as server:
        yield server


@pytest.fixture
def repo(database: Database) -> DeliveryRepository:
    return DeliveryRepository(database.sessions, postgres=not database.is_sqlite)


@pytest.fixture
async def make_dispatcher(
    repo: DeliveryRepository, receiver: WebhookReceiver
) -> AsyncIterator[Any]:
    made: list[WebhookDispatcher] = []

    def make(*, clock: Clock | None = None, urls: list[str] | None = None, **tuning: Any) -> Any:
        """A dispatcher to the receiver; `clock=None`: real time (for the running task)."""
        dispatcher = WebhookDispatcher(
            deliveries=repo,
            urls=urls or [receiver.url],
            secret=SECRET,
            tuning=dataclasses.replace(TUNING, **tuning),
            metrics=Metrics(),
            clock=clock or (lambda: dt.datetime.now(dt.UTC)),
            jitter=lambda: 1.0,  # the top of each back-off window: exact expectations
        )
        made.append(dispatcher)
        return dispatcher

    yield make
    for dispatcher in made:
        await dispatcher.aclose()


def verified(request: Received) -> dict[str, Any]:
    """What a receiver does: check the signature (and its age), then trust the body."""
    header = request.headers[signing.SIGNATURE_HEADER]
    assert signing.verify(SECRET, request.body, header), "the HMAC signature does not verify"
    body: dict[str, Any] = json.loads(request.body)
    assert request.headers[signing.EVENT_ID_HEADER] == body["id"]
    assert request.headers[signing.EVENT_HEADER] == body["type"]
    return body


def metric(dispatcher: WebhookDispatcher, result: str) -> float:
    metrics = dispatcher._metrics
    assert metrics is not None
    value = metrics.registry.get_sample_value("genai_webhook_deliveries_total", {"result": result})
    return value or 0.0


async def test_a_delivery_reaches_the_receiver_signed_and_is_logged_delivered(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    dispatcher: WebhookDispatcher = make_dispatcher()
    dispatcher.start()
    data = {"template": {"name": "summary", "role": "system"}, "label": "prod", "to": 3}
    await dispatcher.emit("label.moved", data)

    async def delivered() -> bool:
        rows = await repo.recent(limit=5)
        return len(rows) == 1 and rows[0].status == "delivered"

    await eventually(delivered)
    assert len(receiver.received) == 1
    body = verified(receiver.received[0])
    assert body["type"] == "label.moved"
    assert body["data"] == data
    assert set(body) == {"id", "type", "created_at", "data"}
    [row] = await repo.recent(limit=5)
    assert (row.attempts, row.last_status_code, row.event_id) == (1, 200, body["id"])
    assert row.delivered_at is not None
    assert metric(dispatcher, "delivered") == 1


async def test_a_receiver_failing_twice_gets_the_event_on_the_third_attempt_after_back_off(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    clock = Clock()
    dispatcher: WebhookDispatcher = make_dispatcher(clock=clock)
    receiver.reply(500, 503)
    await dispatcher.emit("template.version_created", {"template": "summary", "version": 2})

    assert await dispatcher.run_once() == 1
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, 500)
    assert row.last_error == "receiver answered HTTP 500"
    assert row.next_attempt_at == START + dt.timedelta(seconds=10)  # initial, jitter at top

    clock.advance(9)
    assert await dispatcher.run_once() == 0  # not due yet: the schedule is durable
    clock.advance(1)
    assert await dispatcher.run_once() == 1
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 2, 503)
    assert row.next_attempt_at == clock.now + dt.timedelta(seconds=20)  # doubled

    clock.advance(20)
    assert await dispatcher.run_once() == 1
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts, row.last_status_code) == ("delivered", 3, 200)
    bodies = [verified(request) for request in receiver.received]
    assert len(bodies) == 3 and len({body["id"] for body in bodies}) == 1  # one event, re-sent
    assert (metric(dispatcher, "retry"), metric(dispatcher, "delivered")) == (2, 1)


async def test_retry_after_from_the_receiver_is_honoured(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    clock = Clock()
    dispatcher: WebhookDispatcher = make_dispatcher(clock=clock)
    receiver.reply(429, headers={"Retry-After": "120"})
    await dispatcher.emit("webhook.test", {})
    await dispatcher.run_once()
    [row] = await repo.recent(limit=1)
    assert row.status == "pending"
    assert row.next_attempt_at == START + dt.timedelta(seconds=120)  # later than the back-off


@pytest.mark.parametrize("status", [400, 401, 404, 410])
async def test_a_permanent_4xx_fails_the_delivery_at_once(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository, status: int
) -> None:
    dispatcher: WebhookDispatcher = make_dispatcher(clock=Clock())
    receiver.reply(status)
    await dispatcher.emit("webhook.test", {})
    await dispatcher.run_once()
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts, row.last_status_code) == ("failed", 1, status)
    assert metric(dispatcher, "failed") == 1


async def test_after_the_last_attempt_the_delivery_fails(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    clock = Clock()
    dispatcher: WebhookDispatcher = make_dispatcher(clock=clock, max_attempts=2)
    receiver.reply(500, 500, 500)
    await dispatcher.emit("webhook.test", {})
    await dispatcher.run_once()
    clock.advance(3600)
    await dispatcher.run_once()
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts) == ("failed", 2)
    assert row.last_error is not None and "the last" in row.last_error
    clock.advance(3600)
    assert await dispatcher.run_once() == 0
    assert len(receiver.received) == 2


async def test_emit_returns_while_the_receiver_hangs(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    receiver.reply(HANG)
    dispatcher: WebhookDispatcher = make_dispatcher(timeout_seconds=60.0)
    dispatcher.start()
    await dispatcher.emit("label.moved", {"label": "prod"})

    async def stuck() -> bool:
        return receiver.hanging == 1

    await eventually(stuck)
    # The receiver holds the first delivery open; a second action's emit still returns.
    await dispatcher.emit("label.moved", {"label": "staging"})
    assert receiver.hanging == 1 and not receiver._released.is_set()
    rows = await repo.recent(limit=5)
    assert len(rows) == 2 and all(row.status == "pending" for row in rows)
    receiver.release()


async def test_a_receiver_that_is_down_is_retried_and_emit_is_unaffected(
    make_dispatcher: Any, repo: DeliveryRepository
) -> None:
    dispatcher: WebhookDispatcher = make_dispatcher(clock=Clock(), urls=["http://127.0.0.1:9/hook"])
    await dispatcher.emit("webhook.test", {})
    await dispatcher.run_once()
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts, row.last_status_code) == ("pending", 1, None)
    assert row.last_error == "request failed: ConnectError"


async def test_emit_never_raises_when_the_store_fails(receiver: WebhookReceiver) -> None:
    class DownStore(DeliveryRepository):
        async def add(self, **_: Any) -> None:
            raise StoreUnavailable("The database cannot be reached.")

    metrics = Metrics()
    dispatcher = WebhookDispatcher(
        deliveries=DownStore.__new__(DownStore),
        urls=[receiver.url],
        secret=SECRET,
        tuning=TUNING,
        metrics=metrics,
    )
    try:
        assert await dispatcher.queue("label.moved", {"label": "prod"}) is None
        await dispatcher.emit("label.moved", {"label": "prod"})  # does not raise
    finally:
        await dispatcher.aclose()
    lost = metrics.registry.get_sample_value("genai_webhook_events_not_queued_total")
    assert lost == 2


async def test_an_expired_lease_is_claimed_again_and_the_old_claim_cannot_settle(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    clock = Clock()
    dispatcher: WebhookDispatcher = make_dispatcher(clock=clock)
    await dispatcher.emit("webhook.test", {})
    lease = TUNING.lease_seconds
    # A dispatcher claims the row, then dies before it posts (no outcome is ever written).
    [lost] = await repo.claim(now=clock.now, lease_seconds=lease, limit=10)
    assert (
        await repo.claim(
            now=clock.now + dt.timedelta(seconds=lease - 1), lease_seconds=lease, limit=10
        )
        == []
    )
    clock.advance(lease)
    assert await dispatcher.run_once() == 1  # the lease ran out: claimed again, delivered
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts) == ("delivered", 2)
    assert len(receiver.received) == 1
    late = Settlement(status="failed", at=clock.now, error="late")
    assert await repo.settle(lost, late) is False  # fenced off by the attempt count
    [row] = await repo.recent(limit=1)
    assert row.status == "delivered"


async def test_two_dispatchers_on_one_database_never_send_a_row_twice(
    make_dispatcher: Any, receiver: WebhookReceiver, database: Database
) -> None:
    clock = Clock()
    first: WebhookDispatcher = make_dispatcher(clock=clock, batch_size=3)
    # A second replica: its own repository and dispatcher over the same database.
    other_repo = DeliveryRepository(database.sessions, postgres=not database.is_sqlite)
    second = WebhookDispatcher(
        deliveries=other_repo,
        urls=[receiver.url],
        secret=SECRET,
        tuning=DispatchTuning(batch_size=3),
        clock=clock,
    )
    try:
        for n in range(12):
            await first.emit("webhook.test", {"n": n})
        rounds = 0
        while rounds < 10:
            claimed = await asyncio.gather(first.run_once(), second.run_once())
            rounds += 1
            if sum(claimed) == 0:
                break
    finally:
        await second.aclose()
    bodies = [verified(request) for request in receiver.received]
    assert sorted(body["data"]["n"] for body in bodies) == list(range(12))  # each exactly once
    rows = await other_repo.recent(limit=20)
    assert all(row.status == "delivered" and row.attempts == 1 for row in rows)


async def test_claims_racing_on_the_same_rows_split_them(
    repo: DeliveryRepository, database: Database
) -> None:
    for n in range(20):
        await repo.add(
            event_id=f"e{n}", event_type="webhook.test", urls=["http://x/"], payload={}, now=START
        )
    repos = [
        DeliveryRepository(database.sessions, postgres=not database.is_sqlite) for _ in range(4)
    ]
    results = await asyncio.gather(*(r.claim(now=START, lease_seconds=60, limit=7) for r in repos))
    ids = [delivery.id for claimed in results for delivery in claimed]
    assert len(ids) == len(set(ids))  # no row leased to two claimers
    assert len(ids) == 20


async def test_a_stop_during_a_hanging_attempt_leaves_the_row_to_be_claimed_again(
    make_dispatcher: Any, receiver: WebhookReceiver, repo: DeliveryRepository
) -> None:
    receiver.reply(HANG)
    dispatcher: WebhookDispatcher = make_dispatcher(timeout_seconds=60.0, stop_grace_seconds=0.1)
    dispatcher.start()
    await dispatcher.emit("label.moved", {"label": "prod"})

    async def stuck() -> bool:
        return receiver.hanging == 1

    await eventually(stuck)
    await dispatcher.aclose()  # returns though the receiver never answered
    [row] = await repo.recent(limit=1)
    assert (row.status, row.attempts) == ("pending", 1)
    lease = dataclasses.replace(TUNING, timeout_seconds=60.0).lease_seconds
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=lease + 1)
    [again] = await repo.claim(now=later, lease_seconds=60, limit=5)  # the next process's claim
    assert (again.id, again.attempt) == (row.id, 2)
    receiver.release()


async def test_a_receivers_answer_body_is_never_read(
    make_dispatcher: Any, repo: DeliveryRepository
) -> None:
    """The status is the answer: a receiver that promises a gigabyte and sends none of it (or
    sends it all) neither holds the attempt until the timeout nor fills the dispatcher's memory."""
    finished = asyncio.Event()

    async def answer_headers_only(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
        await writer.drain()
        await finished.wait()  # the promised body never comes
        writer.close()

    server = await asyncio.start_server(answer_headers_only, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        dispatcher: WebhookDispatcher = make_dispatcher(
            clock=Clock(), urls=[f"http://127.0.0.1:{port}/hook"]
        )
        await dispatcher.emit("webhook.test", {})
        assert await dispatcher.run_once() == 1
        [row] = await repo.recent(limit=1)
        assert (row.status, row.last_status_code, row.last_error) == ("delivered", 200, None)
    finally:
        finished.set()
        server.close()
        await server.wait_closed()
