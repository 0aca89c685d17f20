"""The audit chain (issue 20) on SQLite and PostgreSQL: every finished job linked once, the
content hash the same on both backends, and each kind of tampering with the raw database
reported at the right entry, through the verifier and through `genai audit verify`."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import json
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import Select, select, text
from sqlalchemy.dialects import sqlite

from app.audit.chain import ChainVerifier
from app.config import Settings
from app.store.chain import JOB_SOURCE, ChainRepository, CheckpointPolicy
from app.store.db import Database
from app.store.jobs import JobRepository
from app.store.records import JobOutcome, PendingJob
from app.store.signing_keys import load_signer
from app.tracking.chain import GENESIS, content_sha256, entry_sha256
from app.tracking.signing import KeyRing, Signer
from tests.clock import days_ago
from tests.support import pending_job, run_cli

LONG_AGO = days_ago(300, hour=0)


def _pending(job_id: str, created_at: dt.datetime, prompt: str) -> PendingJob:
    return pending_job(
        job_id,
        created_at,
        request_id=f"req-{job_id}",
        model="gpt-4o-mini",
        # Keys JSONB reorders (longer after shorter), a float, unicode: all must hash alike.
        params={"temperature": 0.1, "top_p": 1.0, "zz": {"b": 2, "a": [1.5, "é"]}},
        prompt_redacted={"system": "be brief", "messages": [{"role": "user", "content": prompt}]},
        replay_inputs=b"\x00\x01secret\xff",
    )


def _done(job_id: str, completed_at: dt.datetime) -> JobOutcome:
    return JobOutcome(
        id=job_id,
        status="completed",
        completed_at=completed_at,
        redaction_map={},
        input_tokens=12,
        output_tokens=3,
        cost_usd=0.000123456789,
        latency_ms=12.345,
        response_redacted="an answer",
    )


async def _jobs(database: Database, count: int, *, start: int = 0) -> list[str]:
    """`count` finished jobs, a second apart, long enough ago to be past any grace period."""
    jobs = JobRepository(database.sessions, database.lane)
    ids = [f"job{number:05d}" for number in range(start, start + count)]
    moments = [LONG_AGO + dt.timedelta(seconds=start + n) for n in range(count)]
    await jobs.insert_many(
        [_pending(job_id, at, f"prompt {job_id}") for job_id, at in zip(ids, moments, strict=True)]
    )
    await jobs.apply(
        [_done(job_id, at + dt.timedelta(milliseconds=500)) for job_id, at in zip(ids, moments)]
    )
    return ids


@dataclass
class Chain:
    database: Database
    repo: ChainRepository
    signer: Signer
    verifier: ChainVerifier

    async def sql(self, statement: str, **params: Any) -> None:
        async with self.database.engine.begin() as connection:
            await connection.execute(text(statement), params)

    async def seq_of(self, job_id: str) -> int:
        async with self.database.engine.connect() as connection:
            found = await connection.execute(
                text("SELECT chain_seq FROM jobs WHERE id = :id"), {"id": job_id}
            )
            return int(found.scalar_one())


def _chain(database: Database, signer: Signer) -> Chain:
    repo = ChainRepository(database.sessions, postgres=not database.is_sqlite)
    verifier = ChainVerifier(repo, ring=signer.ring, unchained_grace_seconds=60)
    return Chain(database=database, repo=repo, signer=signer, verifier=verifier)


@pytest.fixture
async def chain(database: Database) -> AsyncIterator[Chain]:
    """Ten finished jobs, linked in two steps, a signed checkpoint after the first five."""
    signer = Signer(Ed25519PrivateKey.generate())
    built = _chain(database, signer)
    await _jobs(database, 10)
    policy = CheckpointPolicy(every_entries=5, every_seconds=3600)
    assert (await built.repo.append(limit=5, policy=policy, signer=signer)).entries == 5
    appended = await built.repo.append(limit=500, policy=policy, signer=signer)
    assert appended.entries == 5 and appended.checkpoint is not None
    yield built


async def test_a_clean_chain_links_every_finished_job_once_in_order(chain: Chain) -> None:
    report = await chain.verifier.verify()
    assert report.ok and report.problem is None
    assert (report.entries_checked, report.head_seq, report.checkpoints_checked) == (10, 10, 2)
    assert [await chain.seq_of(f"job{n:05d}") for n in range(10)] == list(range(1, 11))
    entries = await chain.repo.entries(after=0, until=10, limit=100)
    assert entries[0].prev_sha256 == GENESIS
    assert all(b.prev_sha256 == a.entry_sha256 for a, b in itertools.pairwise(entries))
    # A pending record waits: it is still changing.
    jobs = JobRepository(chain.database.sessions, chain.database.lane)
    await jobs.insert(_pending("pending1", LONG_AGO, "still running"))
    assert (await chain.repo.append(limit=500)).entries == 0


async def test_on_sqlite_a_background_step_skips_while_another_writer_holds_the_lock(
    database: Database,
) -> None:
    """Waiting for the write lock would hold the pool's one connection that requests read
    through (a read answered 503 behind a chainer step); a step at the shutdown waits."""
    if not database.is_sqlite:
        pytest.skip("PostgreSQL chainers take an advisory lock of their own (tested above)")

    async def busy_timeout() -> int:
        async with database.engine.connect() as connection:
            return int(await connection.scalar(text("PRAGMA busy_timeout")) or 0)

    built = _chain(database, Signer(Ed25519PrivateKey.generate()))
    await _jobs(database, 3)
    configured = await busy_timeout()
    other = sqlite3.connect(str(database.engine.url.database), isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another writer holds the single write lock
        skipped = await built.repo.append(limit=10)
        assert skipped.skipped and skipped.entries == 0
        assert await busy_timeout() == configured > 0  # the connection got its timeout back
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert (await built.repo.append(limit=10)).entries == 3


async def test_a_range_is_verified_alone_and_a_bound_says_where_to_continue(chain: Chain) -> None:
    middle = await chain.verifier.verify(4, 7)
    assert middle.ok and (middle.entries_checked, middle.to_seq) == (4, 7)
    bounded = await chain.verifier.verify(1, None, max_entries=3)
    assert bounded.ok and bounded.next_from == 4 and bounded.to_seq == 3
    rest = await chain.verifier.verify(bounded.next_from, None, max_entries=100)
    assert rest.ok and rest.next_from is None and rest.to_seq == 10


async def test_an_edited_prompt_is_reported_at_its_entry(chain: Chain) -> None:
    await chain.sql(
        "UPDATE jobs SET prompt_redacted = :prompt WHERE id = 'job00006'",
        prompt=json.dumps({"system": "be brief", "messages": [{"role": "user", "content": "x"}]}),
    )
    problem = (await chain.verifier.verify()).problem
    assert problem is not None
    assert (problem.kind, problem.seq, problem.ref) == ("edited", 7, "job00006")


async def test_an_entry_whose_fields_were_rewritten_is_edited(chain: Chain) -> None:
    await chain.sql(
        "UPDATE audit_chain SET content_sha256 = :h WHERE seq = 3", h="sha256:" + "f" * 64
    )
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("edited", 3)


async def test_a_deleted_job_row_is_reported(chain: Chain) -> None:
    await chain.sql("DELETE FROM jobs WHERE id = 'job00003'")
    problem = (await chain.verifier.verify()).problem
    assert problem is not None
    assert (problem.kind, problem.seq, problem.ref) == ("deleted", 4, "job00003")


async def test_a_deleted_chain_entry_is_a_gap(chain: Chain) -> None:
    await chain.sql("DELETE FROM audit_chain WHERE seq = 5")
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("deleted", 5)


async def test_a_job_row_inserted_behind_the_service_is_reported(chain: Chain) -> None:
    await _jobs(chain.database, 1, start=500)  # finished long ago, never chained
    problem = (await chain.verifier.verify()).problem
    assert problem is not None
    assert (problem.kind, problem.ref) == ("inserted", "job00500")


async def test_a_row_claiming_another_rows_entry_is_inserted(chain: Chain) -> None:
    await _jobs(chain.database, 1, start=600)
    await chain.sql("UPDATE jobs SET chain_seq = 4 WHERE id = 'job00600'")
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("inserted", 4)


async def test_an_entry_inserted_into_the_chain_is_reported(chain: Chain) -> None:
    # Make room after entry 4 (shift 5.. up by one, from the top), then forge a perfect entry.
    for seq in range(10, 4, -1):
        await chain.sql("UPDATE audit_chain SET seq = :new WHERE seq = :old", new=seq + 1, old=seq)
    entries = await chain.repo.entries(after=3, until=4, limit=1)
    forged = entry_sha256(
        seq=5,
        kind="job",
        ref="job00000",
        record_at=LONG_AGO,
        content="sha256:x",
        prev=entries[0].entry_sha256,
    )
    await chain.sql(
        "INSERT INTO audit_chain (seq, kind, ref, record_at, content_sha256, prev_sha256, "
        "entry_sha256, chained_at) VALUES (5, 'job', 'job00000', :at, 'sha256:x', :prev, :h, :at)",
        at=LONG_AGO,
        prev=entries[0].entry_sha256,
        h=forged,
    )
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("inserted", 5)


async def test_two_swapped_chain_entries_are_reordered(chain: Chain) -> None:
    await chain.sql("UPDATE audit_chain SET seq = -1 WHERE seq = 6")
    await chain.sql("UPDATE audit_chain SET seq = 6 WHERE seq = 7")
    await chain.sql("UPDATE audit_chain SET seq = 7 WHERE seq = -1")
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("reordered", 6)


async def test_two_rows_with_swapped_content_are_edited(chain: Chain) -> None:
    await chain.sql(
        "UPDATE jobs SET response_redacted = CASE id WHEN 'job00001' THEN 'two' ELSE 'one' END "
        "WHERE id IN ('job00001', 'job00002')"
    )
    problem = (await chain.verifier.verify()).problem
    assert problem is not None
    assert (problem.kind, problem.seq, problem.ref) == ("edited", 2, "job00001")


async def test_a_tail_cut_after_a_checkpoint_is_truncated(chain: Chain) -> None:
    await chain.sql("DELETE FROM audit_chain WHERE seq > 8")
    await chain.sql("UPDATE jobs SET chain_seq = NULL WHERE chain_seq > 8")
    await chain.sql("DELETE FROM jobs WHERE chain_seq IS NULL")
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("truncated", 9)


async def test_a_rewritten_tail_under_a_checkpoint_is_truncated(chain: Chain) -> None:
    # Entry 10 rebuilt consistently after a different record: only the checkpoint knows.
    await chain.sql("DELETE FROM audit_chain WHERE seq = 10")
    await chain.sql(
        "UPDATE jobs SET chain_seq = NULL, response_redacted = 'new' WHERE chain_seq = 10"
    )
    assert (await chain.repo.append(limit=500)).entries == 1
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("truncated", 10)


async def test_a_forged_checkpoint_fails_its_signature_and_a_foreign_key_is_unknown(
    chain: Chain,
) -> None:
    await chain.sql("UPDATE audit_checkpoints SET seq = 3 WHERE seq = 5")
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("bad_signature", 3)
    stranger = KeyRing(keys=Signer(Ed25519PrivateKey.generate()).ring.keys)
    other = ChainVerifier(chain.repo, ring=stranger, unchained_grace_seconds=60)
    problem = (await other.verify()).problem
    assert problem is not None and problem.kind == "unknown_key"


async def test_rows_removed_under_a_signed_prune_checkpoint_are_pruned_not_deleted(
    chain: Chain,
) -> None:
    cut = LONG_AGO + dt.timedelta(seconds=4)  # jobs 0..3 were created before it
    await chain.repo.checkpoint("prune", {"pruned_before": cut.isoformat()}, chain.signer)
    await chain.sql("DELETE FROM jobs WHERE created_at < :cut", cut=cut)
    report = await chain.verifier.verify()
    assert report.ok and report.pruned == 4 and report.entries_checked == 10
    # An unsigned prune checkpoint (written behind the service's back) excuses nothing.
    await chain.sql("DELETE FROM audit_checkpoints WHERE reason = 'prune'")
    await chain.repo.checkpoint("prune", {"pruned_before": cut.isoformat()}, None)
    problem = (await chain.verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq) == ("deleted", 1)


async def test_without_signing_checkpoints_are_stored_and_reported_unsigned(
    database: Database,
) -> None:
    repo = ChainRepository(database.sessions, postgres=not database.is_sqlite)
    await _jobs(database, 3)
    policy = CheckpointPolicy(every_entries=1, every_seconds=3600)
    checkpoint = (await repo.append(limit=10, policy=policy, signer=None)).checkpoint
    assert checkpoint is not None and checkpoint.signature is None and checkpoint.kid is None
    report = await ChainVerifier(repo, ring=None, unchained_grace_seconds=60).verify()
    assert report.ok and report.unsigned_checkpoints == 1


async def test_the_content_hash_is_the_same_on_sqlite_and_postgres(tmp_path: Path) -> None:
    from tests.conftest import _drop_postgres_database, _postgres_database

    url, name = await _postgres_database()
    hashes = []
    try:
        for database_url in (f"sqlite+aiosqlite:///{tmp_path / 'g.db'}", url):
            database = Database(database_url)
            await database.migrate()
            try:
                await _jobs(database, 2)
                repo = ChainRepository(database.sessions, postgres=not database.is_sqlite)
                rows = await repo.records("job", ["job00000", "job00001"])
                hashes.append([content_sha256(rows[ref]) for ref in sorted(rows)])
            finally:
                await database.aclose()
    finally:
        await _drop_postgres_database(name)
    assert hashes[0] == hashes[1] and len(set(hashes[0])) == 2


def test_content_hash_spells_times_bytes_and_json_one_way() -> None:
    moment = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    row = {"at": moment, "blob": b"\x00\xff", "doc": {"b": 1, "a": [0.1]}, "chain_seq": 9}
    same = {"doc": {"a": [0.1], "b": 1}, "blob": b"\x00\xff", "at": moment.astimezone(dt.UTC)}
    assert content_sha256(row) == content_sha256(same)  # chain_seq is not content
    spelled = '{"at":"2026-05-01T10:00:00.000000+00:00","blob":"AP8=","doc":{"a":[0.1],"b":1}}'
    import hashlib

    assert content_sha256(row) == "sha256:" + hashlib.sha256(spelled.encode()).hexdigest()


# --- the command ---------------------------------------------------------------------------


async def test_genai_audit_verify_exits_0_clean_and_1_with_the_problem_located(
    database_url: str, tmp_path: Path, cli_env: Any
) -> None:
    data_dir = tmp_path / "data"
    signer = load_signer(Settings(_env_file=None, data_dir=data_dir))  # the CLI's own key
    database = Database(database_url)
    await database.migrate()
    try:
        await _jobs(database, 4)
        await _chain(database, signer).repo.append(limit=500)
        await _chain(database, signer).repo.checkpoint("manual", {}, signer)
    finally:
        await database.aclose()
    cli_env(GENAI_DATABASE_URL=database_url, GENAI_DATA_DIR=str(data_dir))
    signed = await asyncio.to_thread(run_cli, "audit", "checkpoint")
    assert signed.exit_code == 0, signed.output
    assert signed.output.startswith("checkpoint at seq 4: sha256:")
    assert f"signed by {signer.kid}" in signed.output
    clean = await asyncio.to_thread(run_cli, "audit", "verify")
    assert clean.exit_code == 0, clean.output
    assert clean.output.startswith("ok: 4 entries (1..4), 2 checkpoints")

    database = Database(database_url)
    try:
        await _chain(database, signer).sql(
            "UPDATE jobs SET response_redacted = 'edited' WHERE id = 'job00002'"
        )
    finally:
        await database.aclose()
    found = await asyncio.to_thread(run_cli, "audit", "verify")
    assert found.exit_code == 1
    assert found.output.startswith("edited at seq 3 ref job00002: the job record differs")
    as_json = await asyncio.to_thread(
        run_cli, "audit", "verify", "--json", "--from", "2", "--to", "4"
    )
    report = json.loads(as_json.output)
    assert as_json.exit_code == 1 and report["problem"]["kind"] == "edited"
    assert report["from_seq"] == 2 and report["problem"]["seq"] == 3


def test_genai_audit_verify_refuses_a_bad_range_with_exit_2(cli_env: Any, tmp_path: Path) -> None:
    cli_env(GENAI_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'g.db'}")
    backwards = run_cli("audit", "verify", "--from", "5", "--to", "2")
    assert backwards.exit_code == 2 and "--to: must not be below --from (5)" in backwards.output
    assert run_cli("audit", "verify", "--from", "0").exit_code == 2


# --- a second source: how the admin events join the chain ----------------------------------


async def test_a_second_source_is_one_registration_and_shares_the_one_sequence(
    database: Database,
) -> None:
    from sqlalchemy import BigInteger, Column, Integer, MetaData, String, Table

    from app.store.chain import JOB_SOURCE, ChainSource
    from app.store.tables import UTCDateTime

    events = Table(  # the shape the admin events table has: id, at, …, chain_seq
        "chain_test_events",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("at", UTCDateTime(), nullable=False),
        Column("action", String(64), nullable=False),
        Column("chain_seq", BigInteger, nullable=True),
    )
    async with database.engine.begin() as connection:
        await connection.run_sync(events.metadata.create_all)
        await connection.execute(
            events.insert(),
            [
                {
                    "id": 1,
                    "at": LONG_AGO + dt.timedelta(seconds=1, milliseconds=700),
                    "action": "a",
                },
                {"id": 2, "at": LONG_AGO + dt.timedelta(seconds=30), "action": "b"},
            ],
        )
    await _jobs(database, 3)  # finished at 0.5 s, 1.5 s, 2.5 s
    source = ChainSource(kind="event", table=events, order_by="at", record_at="at")
    repo = ChainRepository(
        database.sessions, postgres=not database.is_sqlite, sources=(JOB_SOURCE, source)
    )
    assert (await repo.append(limit=500)).entries == 5
    entries = await repo.entries(after=0, until=5, limit=10)
    order = [(e.kind, e.ref) for e in entries]
    assert order == [
        ("job", "job00000"),
        ("job", "job00001"),
        ("event", "1"),
        ("job", "job00002"),
        ("event", "2"),
    ]
    verifier = ChainVerifier(repo, ring=None, unchained_grace_seconds=60)
    assert (await verifier.verify()).ok
    async with database.engine.begin() as connection:
        await connection.execute(text("UPDATE chain_test_events SET action = 'z' WHERE id = 2"))
    problem = (await verifier.verify()).problem
    assert problem is not None and (problem.kind, problem.seq, problem.ref) == ("edited", 5, "2")


async def test_on_sqlite_the_chainer_reads_its_partial_index_whatever_the_statistics_say(
    database: Database,
) -> None:
    """Statistics that misjudge the partial index (a bulk load, a sampled ANALYZE) made SQLite
    scan and sort all of `jobs` for every batch: 3 records linked a second on a million jobs."""
    if not database.is_sqlite:
        pytest.skip("the hint is SQLite's INDEXED BY; PostgreSQL plans from its own statistics")
    await _jobs(database, 3)
    path = str(database.engine.url.database)
    misleading = sqlite3.connect(path, isolation_level=None)
    try:
        misleading.execute("ANALYZE")
        misleading.execute("DELETE FROM sqlite_stat1 WHERE tbl = 'jobs'")
        misleading.executemany(  # what such a load left: the partial index "bigger" than jobs
            "INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES ('jobs', ?, ?)",
            [("ix_jobs_unchained", "13939200 2 1"), ("sqlite_autoindex_jobs_1", "560660 1")],
        )
        misleading.execute("ANALYZE sqlite_schema")  # reload the statistics
    finally:
        misleading.close()
    table = JOB_SOURCE.table
    oldest = select(table).order_by(table.c.completed_at, table.c.id).limit(20)

    def plan(query: Select[Any]) -> str:
        sql = str(query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
        with contextlib.closing(sqlite3.connect(path)) as connection:
            return " | ".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}"))

    unhinted = plan(oldest.where(*JOB_SOURCE.unchained()))
    assert "TEMP B-TREE" in unhinted  # the statistics do mislead the planner
    assert plan(JOB_SOURCE.unlinked(oldest)) == "SCAN jobs USING INDEX ix_jobs_unchained"
    built = _chain(database, Signer(Ed25519PrivateKey.generate()))
    assert (await built.repo.append(limit=10)).entries == 3
