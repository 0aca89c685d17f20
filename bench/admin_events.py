"""What the admin event log costs: ms to record one event (one INSERT in its own transaction,
after the action commits) and to read a page, first and deep (keyset on (at, id)), with and
without a filter, over a log of --rows events, on SQLite and PostgreSQL.

    .venv/bin/python -m bench.admin_events --rows 100000

Admin actions are rare (people, not traffic), so recording stays off the completion hot path
entirely; the numbers say what an admin request and an operator's page of the log wait for.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from sqlalchemy import insert

from app.audit.events import CLI, AdminEvents
from app.store.db import Database
from app.store.events import AdminEventRepository, EventFilter
from app.store.tables import AuditEvent

from .stores import scratch_postgres

ACTIONS = ("key.created", "key.updated", "label.moved", "snippet.updated", "job.replayed")


async def _fill(database: Database, rows: int) -> None:
    """`rows` events, one second apart, in batches (the bench's set-up, not what it measures)."""
    start = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=rows)
    batch = []
    for n in range(rows):
        batch.append(
            {
                "id": uuid.uuid4().hex,
                "at": start + dt.timedelta(seconds=n),
                "actor": "key",
                "actor_key_id": f"key{n % 20:02d}",
                "action": ACTIONS[n % len(ACTIONS)],
                "target": f"key:{n % 500}",
                "detail": {"name": "bench", "n": n},
                "remote_addr": "10.0.0.1",
            }
        )
        if len(batch) == 5000 or n == rows - 1:
            async with database.sessions.begin() as session:
                await session.execute(insert(AuditEvent), batch)
            batch = []


async def _ms(work: Callable[[], Awaitable[object]], n: int) -> tuple[float, float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await work()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


async def _bench(url: str, rows: int, n: int) -> list[tuple[str, float, float]]:
    database = Database(url)
    try:
        await database.migrate()
        await _fill(database, rows)
        events = AdminEvents(AdminEventRepository(database.sessions))
        everything, one_action = EventFilter(), EventFilter(action="label.moved")
        deep = await events.page(everything, limit=100)
        for _ in range(20):  # 2,000 events in: the cursor of page 21
            assert deep.next_cursor is not None
            deep = await events.page(everything, limit=100, cursor=deep.next_cursor)
        cursor = deep.next_cursor

        async def record() -> object:
            return await events.record(CLI, "key.updated", target="key:x", detail={"rpm": 60})

        steps: list[tuple[str, Callable[[], Awaitable[object]]]] = [
            ("record one event", record),
            ("first page of 100", lambda: events.page(everything, limit=100)),
            ("page 21 of 100 (cursor)", lambda: events.page(everything, limit=100, cursor=cursor)),
            ("first 100 of one action", lambda: events.page(one_action, limit=100)),
            (
                "an action never taken",
                lambda: events.page(EventFilter(action="retention.pruned"), limit=100),
            ),
            (
                "100 of one key's",
                lambda: events.page(EventFilter(actor_key_id="key07"), limit=100),
            ),
        ]
        return [(name, *await _ms(work, n)) for name, work in steps]
    finally:
        await database.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="events in the log")
    parser.add_argument("--n", type=int, default=200, help="timed calls per step")
    args = parser.parse_args()
    print(f"rows={args.rows} n={args.n} (ms: median, p95)")
    with tempfile.TemporaryDirectory() as tmp:
        sqlite = f"sqlite+aiosqlite:///{Path(tmp) / 'genai.db'}"
        for name, median, p95 in asyncio.run(_bench(sqlite, args.rows, args.n)):
            print(f"sqlite    {name:28} {median:7.2f} {p95:7.2f}")
    with scratch_postgres() as postgres:
        for name, median, p95 in asyncio.run(_bench(postgres, args.rows, args.n)):
            print(f"postgres  {name:28} {median:7.2f} {p95:7.2f}")


if __name__ == "__main__":
    main()
