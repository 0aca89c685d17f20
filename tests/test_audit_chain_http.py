"""The audit chain through the running service (issue 20): `GET /v1/audit/verify` (admin only,
bounded), the chainer started and finished with the app, a migration that adds the chain to a
store with jobs, and two replicas on one PostgreSQL database writing at once → one chain."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import text

from app.config import AuditSettings
from app.store.chain import ChainRepository
from app.store.db import Database
from app.store.jobs import JobRepository
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for
from tests.test_audit_chain import _jobs

RENDER = {
    "pattern_key": "summarize",
    "variables": {"max_words": 10},
    "user_prompt": "Quarterly revenue rose.",
    "model": "openai/gpt-4o-mini",
    "params": {"max_tokens": 20},
}


def _settings(fake: FakeProviderServer, database_url: str, **audit: Any) -> Any:
    return settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        audit=AuditSettings(**{"chain_seconds": 0.05, **audit}),
    )


async def _chained(app: FastAPI) -> None:
    """What the app answered is written and linked now (instead of waiting for the loop)."""
    runtime = app.state.runtime
    await runtime.writer.catch_up()
    await runtime.chainer.run_once(wait=True)


async def test_the_admin_route_verifies_the_chain_the_service_built(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with running_app(_settings(fake, database_url, verify_max_entries=2)) as (app, admin):
        answers = [await admin.post("/v1/completions", json=RENDER) for _ in range(3)]
        await _chained(app)
        first = await admin.get("/v1/audit/verify")
        rest = await admin.get("/v1/audit/verify", params={"from": first.json()["next_from"]})
        backwards = await admin.get("/v1/audit/verify", params={"from": 3, "to": 1})
        made = await admin.post("/v1/keys", json={"scope": "complete", "name": "c"})
        caller = {"Authorization": f"Bearer {made.json()['key']}"}
        forbidden = await admin.get("/v1/audit/verify", headers=caller)
        jobs = [(await admin.get(f"/v1/jobs/{a.json()['job_id']}")).json() for a in answers]
    assert first.status_code == 200, first.text
    assert first.json()["ok"] and first.json()["entries_checked"] == 2
    assert first.json()["next_from"] == 3
    assert rest.json()["ok"] and rest.json()["to_seq"] == 3 and rest.json()["next_from"] is None
    assert backwards.status_code == 200  # an empty range: nothing checked, nothing wrong
    assert backwards.json()["entries_checked"] == 0 and backwards.json()["ok"]
    assert forbidden.status_code == 403
    assert [job["chain_seq"] for job in jobs] == [1, 2, 3]


async def test_the_route_says_409_when_the_chain_is_off(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with running_app(_settings(fake, database_url, chain_enabled=False)) as (app, admin):
        assert (await admin.post("/v1/completions", json=RENDER)).status_code == 200
        answer = await admin.get("/v1/audit/verify")
        assert app.state.runtime.chainer is None
    assert answer.status_code == 409
    assert answer.json()["error"]["type"] == "audit_chain_disabled"


async def test_a_stop_links_the_last_records_and_signs_the_head(
    fake: FakeProviderServer, database_url: str
) -> None:
    # A loop too slow to run during the test: only the stop can have linked the record.
    settings = _settings(fake, database_url, chain_seconds=60)
    async with running_app(settings) as (_app, admin):
        assert (await admin.post("/v1/completions", json=RENDER)).status_code == 200
    database = Database(database_url)
    try:
        async with database.engine.connect() as connection:
            seqs = (await connection.execute(text("SELECT chain_seq FROM jobs"))).scalars().all()
            reasons = await connection.execute(text("SELECT reason, seq FROM audit_checkpoints"))
            checkpoints = [tuple(row) for row in reasons]
    finally:
        await database.aclose()
    assert seqs == [1]
    assert ("shutdown", 1) in checkpoints


async def test_migration_0011_adds_the_chain_to_a_store_with_jobs_and_takes_it_away(
    empty_database_url: str,
) -> None:
    database = Database(empty_database_url)
    try:
        await database.migrate("0010")
        async with database.engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO jobs (id, status, source_kind, source_name, source_base_path, "
                    "pattern_content_hash, variables_hash, user_prompt_hash, provider, model, "
                    "params, prompt_redacted, redaction_map, snippet_ids, created_at, "
                    "completed_at, streamed) VALUES ('old', 'completed', 'pattern', 'note', 'p', "
                    "'sha256:a', 'sha256:v', 'sha256:u', 'openai', 'm', '{}', '{}', '{}', '[]', "
                    "CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, false)"
                )
            )
        await database.migrate()
        chain = ChainRepository(database.sessions, postgres=not database.is_sqlite)
        assert (await chain.append(limit=10)).entries == 1  # the old job is linked too
        await database.downgrade("0010")
        async with database.engine.connect() as conn:
            ids = (await conn.execute(text("SELECT id FROM jobs"))).scalars().all()
            tables = await conn.run_sync(lambda sync: sync.dialect.get_table_names(sync))
        await database.migrate()
        assert await database.schema_is_current()
    finally:
        await database.aclose()
    assert ids == ["old"]
    assert "audit_chain" not in tables and "audit_checkpoints" not in tables


async def test_two_replicas_writing_at_once_build_one_valid_chain(
    fake: FakeProviderServer,
) -> None:
    from tests.conftest import _drop_postgres_database, _postgres_database

    url, name = await _postgres_database()
    try:
        settings = _settings(fake, url, chain_batch=3, checkpoint_every=5)
        async with running_app(settings) as (one, admin), running_app(settings) as (other, _):
            clients = [
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),
                    base_url="http://gateway.test",
                    headers=dict(admin.headers),
                )
                for app in (one, other)
            ]
            for _ in range(6):  # waves of requests on both, both chainers racing each other
                answers = await asyncio.gather(
                    *(clients[i % 2].post("/v1/completions", json=RENDER) for i in range(8)),
                    one.state.runtime.chainer.run_once(wait=True),
                    other.state.runtime.chainer.run_once(wait=True),
                )
                assert {a.status_code for a in answers[:8]} == {200}
            for client in clients:
                await client.aclose()
            await asyncio.gather(_chained(one), _chained(other))
            report = await one.state.runtime.chain.verify()
        database = Database(url)
        try:
            async with database.engine.connect() as conn:
                jobs = (await conn.execute(text("SELECT chain_seq FROM jobs"))).scalars().all()
        finally:
            await database.aclose()
    finally:
        await _drop_postgres_database(name)
    assert report.ok, report.problem
    assert len(jobs) == 48 and sorted(jobs) == list(range(1, 49))  # each linked exactly once
    assert report.entries_checked == 48 and report.checkpoints_checked >= 1


async def test_jobs_repository_reads_records_with_their_chain_seq(database: Database) -> None:
    await _jobs(database, 1)
    await ChainRepository(database.sessions, postgres=not database.is_sqlite).append(limit=5)
    stored = await JobRepository(database.sessions, database.lane).get("job00000")
    assert stored is not None and stored.record().chain_seq == 1
