"""Retention (issue 20): `genai jobs prune`, the background policy, and the month partitions of
`jobs` on PostgreSQL (made ahead, rows adopted from DEFAULT, dropped whole), on both backends."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, text

from app.audit.events import AdminEvents
from app.audit.retention import retention_round
from app.cli.jobs import prune_lines
from app.config import RetentionSettings
from app.schemas import AdminEvent
from app.store.db import Database
from app.store.events import AdminEventRepository, EventFilter
from app.store.jobs import JobRepository
from app.store.partitions import DEFAULT_PARTITION, month_of, partition_name
from app.store.retention import JobPruner
from app.store.tables import WebhookDelivery
from tests.support import pending_job, run_cli, serve_app, settings_for

NOW = dt.datetime.now(dt.UTC)
CUTOFF = NOW - dt.timedelta(days=30)
# id → (created_at, status). What a 30-day prune keeps: pending ones and the newer ones.
JOBS = {
    "old-done": (NOW - dt.timedelta(days=120), "completed"),
    "old-pending": (NOW - dt.timedelta(days=200), "pending"),
    "old-failed": (NOW - dt.timedelta(days=200, hours=-1), "failed"),
    "ancient": (dt.datetime(2001, 1, 1, tzinfo=dt.UTC), "completed"),  # DEFAULT on PostgreSQL
    "edge": (NOW - dt.timedelta(days=31), "cached"),
    "recent": (NOW - dt.timedelta(days=29), "completed"),
    "fresh-pending": (NOW - dt.timedelta(days=1), "pending"),
}
KEPT = {"old-pending", "recent", "fresh-pending"}
# Webhook deliveries: (created_at, status); settled and old ones go.
DELIVERIES = [
    (NOW - dt.timedelta(days=90), "delivered"),
    (NOW - dt.timedelta(days=90), "failed"),
    (NOW - dt.timedelta(days=90), "pending"),
    (NOW - dt.timedelta(days=1), "delivered"),
]


async def seed(database: Database, jobs: dict[str, tuple[dt.datetime, str]] = JOBS) -> None:
    repo = JobRepository(database.sessions, database.lane)
    await repo.insert_many([pending_job(job_id, created) for job_id, (created, _) in jobs.items()])
    async with database.engine.begin() as conn:
        for job_id, (_, status) in jobs.items():
            await conn.execute(
                text("UPDATE jobs SET status = :s WHERE id = :i"), {"s": status, "i": job_id}
            )
        for created, status in DELIVERIES:
            await conn.execute(
                insert(WebhookDelivery),
                {
                    "event_id": "e",
                    "event_type": "label.moved",
                    "url": "https://example.test/hook",
                    "payload": {},
                    "status": status,
                    "attempts": 1,
                    "next_attempt_at": created,
                    "created_at": created,
                },
            )


async def job_ids(database: Database) -> set[str]:
    async with database.engine.connect() as conn:
        return set((await conn.scalars(text("SELECT id FROM jobs"))).all())


async def delivery_statuses(database: Database) -> list[str]:
    async with database.engine.connect() as conn:
        return sorted((await conn.scalars(text("SELECT status FROM webhook_deliveries"))).all())


async def relation_exists(database: Database, name: str) -> bool:
    async with database.engine.connect() as conn:
        return bool(await conn.scalar(text("SELECT to_regclass(:n) IS NOT NULL"), {"n": name}))


async def backfill_partitions(pruner: JobPruner) -> list[str]:
    """Month partitions from eight months back to now, as if the service had run all along."""
    return await pruner.partitions.ensure(now=NOW - dt.timedelta(days=240), ahead=9)


class RecordingProof:
    """A ProofKeeper that notes the cut-off and how many jobs existed when it was asked."""

    def __init__(self, database: Database, *, fail: bool = False) -> None:
        self.database, self.fail = database, fail
        self.calls: list[tuple[dt.datetime, int]] = []

    async def before_prune(self, cutoff: dt.datetime) -> None:
        self.calls.append((cutoff, len(await job_ids(self.database))))
        if self.fail:
            raise RuntimeError("the chain could not sign a checkpoint")


async def test_prune_removes_exactly_the_finished_jobs_older_than_the_cutoff(
    database: Database,
) -> None:
    await seed(database)
    pruner = JobPruner(database.engine, proof=RecordingProof(database), batch_size=2)
    postgres = not database.is_sqlite
    if postgres:  # the old rows sit in DEFAULT until their months get partitions
        created = await backfill_partitions(pruner)
        assert partition_name(month_of(NOW - dt.timedelta(days=120))) in created
    report = await pruner.prune(CUTOFF)
    assert await job_ids(database) == KEPT
    assert report.jobs_pruned == len(JOBS) - len(KEPT)
    assert await delivery_statuses(database) == ["delivered", "pending"]
    assert report.webhook_deliveries_deleted == 2
    if postgres:
        dropped_month = partition_name(month_of(NOW - dt.timedelta(days=120)))
        pending_month = partition_name(month_of(NOW - dt.timedelta(days=200)))
        assert dropped_month in report.partitions_dropped
        assert not await relation_exists(database, dropped_month)  # dropped whole
        assert pending_month not in report.partitions_dropped  # it holds a pending job
        assert await relation_exists(database, pending_month)
        assert await relation_exists(database, DEFAULT_PARTITION)
        assert report.jobs_deleted >= 2  # ancient (in DEFAULT) and old-failed, in batches
    else:
        assert (report.partitions_dropped, report.jobs_deleted) == ([], len(JOBS) - len(KEPT))
        assert report.vacuum == "incremental"  # a database this service created


async def test_the_proof_is_asked_first_and_a_refusal_prunes_nothing(database: Database) -> None:
    await seed(database)
    proof = RecordingProof(database)
    await JobPruner(database.engine, proof=proof).prune(CUTOFF)
    assert proof.calls == [(CUTOFF, len(JOBS))]  # before anything was deleted
    await seed(database, {"late": (NOW - dt.timedelta(days=60), "completed")})
    refusing = RecordingProof(database, fail=True)
    with pytest.raises(RuntimeError):
        await JobPruner(database.engine, proof=refusing).prune(CUTOFF)
    assert "late" in await job_ids(database)


async def test_a_dry_run_counts_what_a_prune_removes_and_changes_nothing(
    database: Database,
) -> None:
    await seed(database)
    proof = RecordingProof(database)
    pruner = JobPruner(database.engine, proof=proof)
    await backfill_partitions(pruner)  # PostgreSQL: some partitions would go whole
    dry = await pruner.prune(CUTOFF, dry_run=True)
    assert await job_ids(database) == set(JOBS)
    assert len(await delivery_statuses(database)) == len(DELIVERIES)
    assert proof.calls == []  # no checkpoint for a prune that did not happen
    assert (dry.dry_run, dry.jobs_pruned, dry.webhook_deliveries_deleted) == (True, 4, 2)
    real = await pruner.prune(CUTOFF)
    counted = ("jobs_deleted", "partitions_dropped", "jobs_in_dropped_partitions")
    assert [getattr(dry, name) for name in counted] == [getattr(real, name) for name in counted]
    assert bool(real.partitions_dropped) is not database.is_sqlite


async def test_the_policy_prunes_only_when_set_and_makes_partitions_ahead(
    database: Database,
) -> None:
    await seed(database)
    pruner = JobPruner(database.engine, proof=None)
    events = AdminEvents(AdminEventRepository(database.sessions))
    assert await retention_round(pruner, events, RetentionSettings()) is None  # off by default
    assert await job_ids(database) == set(JOBS)
    report = await retention_round(
        pruner, events, RetentionSettings(jobs_days=30, partitions_ahead=5)
    )
    assert report is not None and await job_ids(database) == KEPT
    [event] = await pruned_events(database)
    assert (event.actor, event.target) == ("service", "jobs")
    assert event.detail["jobs_pruned"] == report.jobs_pruned
    if not database.is_sqlite:
        month = month_of(NOW)
        for _ in range(5):
            month = month_of(month + dt.timedelta(days=32))
        assert await relation_exists(database, partition_name(month))


async def test_the_running_service_prunes_by_policy(database_url: str) -> None:
    database = Database(database_url)
    await database.migrate()
    try:
        await seed(database)
        settings = settings_for(
            None, database_url=database_url, retention=RetentionSettings(jobs_days=30)
        )
        # Start-up first interrupts the stale pending jobs, so the old one goes too.
        kept = {"recent", "fresh-pending"}
        async with serve_app(settings):
            for _ in range(200):  # the first round starts with the service; wait for it
                if await job_ids(database) == kept:
                    break
                await asyncio.sleep(0.05)
        assert await job_ids(database) == kept
    finally:
        await database.aclose()


async def test_an_sqlite_file_made_without_incremental_vacuum_is_named_then_converted(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as made_by_an_earlier_release:  # auto_vacuum stays NONE
        made_by_an_earlier_release.execute("CREATE TABLE earlier (x)")
    database = Database(f"sqlite+aiosqlite:///{path}")
    try:
        await database.migrate()
        await seed(database)
        pruner = JobPruner(database.engine, proof=None)
        first = await pruner.prune(CUTOFF)
        converted = await pruner.prune(CUTOFF, vacuum=True)
        async with database.engine.connect() as conn:
            mode = await conn.scalar(text("PRAGMA auto_vacuum"))
        await seed(database, {"later": (NOW - dt.timedelta(days=60), "completed")})
        after = await pruner.prune(CUTOFF)
    finally:
        await database.aclose()
    assert (first.vacuum, converted.vacuum, mode, after.vacuum) == (
        "off",
        "converted",
        2,
        "incremental",
    )
    assert "--vacuum" in prune_lines(first)[-1]


# --- PostgreSQL partitions ---------------------------------------------------------------------


@pytest.fixture
async def postgres(database: Database) -> Database:
    if database.is_sqlite:
        pytest.skip("partitions are PostgreSQL's (SQLite's jobs is one table)")
    return database


async def test_a_month_whose_rows_landed_in_default_gets_its_partition_with_them(
    postgres: Database,
) -> None:
    month = month_of(NOW - dt.timedelta(days=150))
    created = dt.datetime(month.year, month.month, 3, tzinfo=dt.UTC)
    await seed(postgres, {"stray": (created, "completed"), "stray-2": (created, "pending")})
    async with postgres.engine.connect() as conn:
        where = await conn.scalar(text("SELECT tableoid::regclass::text FROM jobs LIMIT 1"))
    assert where == DEFAULT_PARTITION
    pruner = JobPruner(postgres.engine, proof=None)
    assert partition_name(month) in await pruner.partitions.ensure(now=created, ahead=0)
    async with postgres.engine.connect() as conn:
        homes = set(await conn.scalars(text("SELECT DISTINCT tableoid::regclass::text FROM jobs")))
    assert homes == {partition_name(month)}
    assert await JobRepository(postgres.sessions).get("stray") is not None


async def test_the_jobs_routes_read_every_partition(postgres: Database) -> None:
    old, ancient = "a" * 32, "b" * 32  # well-formed ids: a month partition's, DEFAULT's
    await seed(
        postgres,
        {
            old: (NOW - dt.timedelta(days=120), "completed"),
            ancient: (dt.datetime(2001, 1, 1, tzinfo=dt.UTC), "failed"),
        },
    )
    await backfill_partitions(JobPruner(postgres.engine, proof=None))
    settings = settings_for(None, database_url=postgres.url)
    async with serve_app(settings) as http:
        records = [(await http.get(f"/v1/jobs/{job_id}")) for job_id in (old, ancient)]
    assert [r.status_code for r in records] == [200, 200]
    assert [r.json()["status"] for r in records] == ["completed", "failed"]
    listed = await JobRepository(postgres.sessions).recent(limit=10)  # `genai jobs list`
    assert [job.id for job in listed] == [old, ancient]


async def test_replicas_making_partitions_at_once_make_each_once(postgres: Database) -> None:
    other = Database(postgres.url)
    try:
        pruners = [JobPruner(db.engine, proof=None) for db in (postgres, other)]
        start = NOW + dt.timedelta(days=400)  # months nobody made yet
        made = await asyncio.gather(*(p.partitions.ensure(now=start, ahead=3) for p in pruners))
    finally:
        await other.aclose()
    assert sorted(made[0] + made[1]) == sorted(
        partition_name(month_of(start + dt.timedelta(days=31 * i))) for i in range(4)
    )
    assert await pruners[0].partitions.ensure(now=start, ahead=3) == []  # idempotent


async def test_migration_partitions_the_rows_an_earlier_release_wrote_and_goes_back(
    empty_database_url: str,
) -> None:
    if empty_database_url.startswith("sqlite"):
        pytest.skip("migration 0013 is a no-op on SQLite")
    database = Database(empty_database_url)
    old = {
        "jan": (dt.datetime(2026, 1, 15, tzinfo=dt.UTC), "completed"),
        "jun": (dt.datetime(2026, 6, 30, 23, 59, tzinfo=dt.UTC), "pending"),
        "now": (NOW, "failed"),
    }
    try:
        await database.migrate("0012")
        await seed(database, old)
        async with database.engine.begin() as conn:  # a column 0011 added; a unique index
            await conn.execute(text("UPDATE jobs SET chain_seq = 7 WHERE id = 'jan'"))
            await conn.execute(
                text(
                    "CREATE UNIQUE INDEX ix_jobs_chain_seq ON jobs (chain_seq) "
                    "WHERE chain_seq IS NOT NULL"
                )
            )
        await database.migrate("0013")  # the indexes as 0013 found them (0015 and 0016 change some)
        async with database.engine.connect() as conn:
            chained = await conn.scalar(text("SELECT chain_seq FROM jobs WHERE id = 'jan'"))
            chain_index = await conn.scalar(
                text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_jobs_chain_seq'")
            )
        info = await _shape(database)
        repo = JobRepository(database.sessions, database.lane)
        stored = await repo.get("jan")
        await repo.insert(pending_job("after"))
        await database.downgrade("0012")
        down = await _shape(database)
        await database.migrate()
        again = await _shape(database)
    finally:
        await database.aclose()
    assert info["kind"] == "p" and info["pk"] == "PRIMARY KEY (id, created_at)"
    assert {"jobs_2026_01", "jobs_2026_06", DEFAULT_PARTITION} <= set(info["partitions"])
    assert info["rows"] == {"jan": "jobs_2026_01", "jun": "jobs_2026_06", "now": info["now"]}
    assert {"ix_jobs_usage", "ix_jobs_status", "ix_jobs_request_id"} <= set(info["indexes"])
    assert stored is not None and stored.created_at == old["jan"][0]
    assert chained == 7  # a column added after 0010 is copied with its values
    assert chain_index is not None and "(chain_seq, created_at)" in chain_index
    assert "WHERE (chain_seq IS NOT NULL)" in chain_index
    assert down["kind"] == "r" and down["pk"] == "PRIMARY KEY (id)" and down["partitions"] == []
    assert set(down["rows"]) == {"jan", "jun", "now", "after"}
    assert set(down["indexes"]) == set(info["indexes"])
    assert again["kind"] == "p" and set(again["rows"]) == {"jan", "jun", "now", "after"}


async def _shape(database: Database) -> dict[str, Any]:
    async with database.engine.connect() as conn:
        kind = await conn.scalar(text("SELECT relkind::text FROM pg_class WHERE relname = 'jobs'"))
        pk = await conn.scalar(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'jobs_pkey'")
        )
        parts = await conn.scalars(
            text(
                "SELECT inhrelid::regclass::text FROM pg_inherits "
                "WHERE inhparent = 'jobs'::regclass"
            )
        )
        indexes = await conn.scalars(
            text(
                "SELECT indexname FROM pg_indexes "
                "WHERE tablename = 'jobs' AND indexname <> 'jobs_pkey'"
            )
        )
        rows = await conn.execute(text("SELECT id, tableoid::regclass::text FROM jobs"))
        return {
            "kind": kind,
            "pk": pk,
            "partitions": list(parts),
            "indexes": list(indexes),
            "rows": {job_id: home for job_id, home in rows},
            "now": partition_name(month_of(NOW)),
        }


# --- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def cli_db(tmp_path: Path, cli_env: Callable[..., None], database_url: str) -> Database:
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_DATA_DIR=str(tmp_path / "data"),
    )

    async def prepare() -> None:
        database = Database(database_url)
        await database.migrate()
        await seed(database)
        await database.aclose()

    asyncio.run(prepare())
    return Database(database_url)


async def pruned_events(database: Database) -> list[AdminEvent]:
    events = AdminEvents(AdminEventRepository(database.sessions))
    return (await events.page(EventFilter(action="retention.pruned"), limit=10)).events


def _ids(database: Database) -> set[str]:
    async def read() -> set[str]:
        try:
            return await job_ids(database)
        finally:
            await database.aclose()

    return asyncio.run(read())


def test_cli_zero_days_prunes_every_finished_job_and_reports_it(cli_db: Database) -> None:
    dry = run_cli("jobs", "prune", "--older-than", "0d", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["jobs_pruned"] == 5
    assert _ids(cli_db) == set(JOBS)
    done = run_cli("jobs", "prune", "--older-than", "0d")
    assert done.exit_code == 0, done.output
    assert done.stdout.startswith("pruned 5 finished jobs created before")
    assert _ids(cli_db) == {"old-pending", "fresh-pending"}

    async def recorded() -> list[AdminEvent]:
        try:
            return await pruned_events(cli_db)
        finally:
            await cli_db.aclose()

    [event] = asyncio.run(recorded())  # the dry run recorded nothing
    assert (event.actor, event.detail["jobs_pruned"]) == ("cli", 5)


@pytest.mark.parametrize("duration", ["90", "90 days", "-1d", "1.5d", "d"])
def test_cli_refuses_a_duration_that_is_not_days_in_one_line(
    cli_env: Callable[..., None], duration: str
) -> None:
    result = run_cli("jobs", "prune", "--older-than", duration)
    assert result.exit_code == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("genai: --older-than:") and "90d" in line


def test_cli_and_setting_refuse_a_retention_before_year_one(cli_env: Callable[..., None]) -> None:
    """999999 days back has no date: one line and exit 2, not an OverflowError's traceback."""
    result = run_cli("jobs", "prune", "--older-than", "999999d")
    assert result.exit_code == 2
    assert result.stderr.strip() == "genai: --older-than: is at most 36500d (100 years)"
    with pytest.raises(ValueError, match="jobs_days"):
        RetentionSettings(jobs_days=36_501)
    assert RetentionSettings(jobs_days=36_500).jobs_days == 36_500
