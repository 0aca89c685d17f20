"""The audit chain's costs (issue 20): how fast a chainer links finished jobs (entries/s, one
chainer and two racing on one PostgreSQL database as two replicas would), and how long verify
takes per 100k entries. In-process on real stores; requests are not involved: the chain never
touches the hot path, so what matters is that it keeps up and that verify stays usable.

    .venv/bin/python -m bench.audit_chain --jobs 20000 --backend both
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from app.audit.chain import ChainVerifier
from app.store.chain import ChainRepository, CheckpointPolicy
from app.store.db import Database
from app.store.jobs import JobRepository
from app.store.records import JobOutcome, PendingJob
from app.tracking.signing import Signer

from ._common import quiet_logs, scratch_postgres

BATCH = 100  # GENAI_AUDIT__CHAIN_BATCH's default
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _pending(number: int) -> PendingJob:
    return PendingJob(
        id=f"{number:032x}",
        request_id=f"req-{number}",
        created_at=START + dt.timedelta(milliseconds=number),
        source_kind="pattern",
        source_name="summarize",
        source_base_path="patterns",
        template_id=None,
        template_role=None,
        template_version=None,
        pattern_content_hash="sha256:" + "0" * 64,
        variables_hash="sha256:" + "1" * 64,
        user_prompt_hash="sha256:" + "2" * 64,
        continuation_hash=None,
        provider="openai",
        model="gpt-4o-mini",
        params={"max_tokens": 64, "temperature": 0.2},
        # A typical record: ~1.5 KB of redacted prompt.
        prompt_redacted={
            "system": "s" * 1200,
            "messages": [{"role": "user", "content": "u" * 300}],
        },
        redaction_map={},
        snippet_ids=[],
        replay_inputs=b"x" * 200,
    )


def _done(number: int) -> JobOutcome:
    return JobOutcome(
        id=f"{number:032x}",
        status="completed",
        completed_at=START + dt.timedelta(milliseconds=number, microseconds=500),
        redaction_map={},
        input_tokens=11,
        output_tokens=7,
        cost_usd=5.85e-06,
        response_redacted="a" * 400,
    )


async def _fill(database: Database, jobs: int) -> None:
    repo = JobRepository(database.sessions, database.lane)
    for first in range(0, jobs, 1000):
        numbers = range(first, min(jobs, first + 1000))
        await repo.insert_many([_pending(n) for n in numbers])
        await repo.apply([_done(n) for n in numbers])


async def _chain_all(repo: ChainRepository, signer: Signer, batch: int) -> int:
    policy = CheckpointPolicy(every_entries=1000, every_seconds=300)
    total = 0
    while True:
        appended = await repo.append(limit=batch, policy=policy, signer=signer, wait=True)
        total += appended.entries
        if appended.entries < batch:
            return total


async def _measure(url: str, label: str, jobs: int, *, replicas: int, batch: int) -> None:
    databases = [Database(url) for _ in range(replicas)]
    try:
        await databases[0].migrate()
        await _fill(databases[0], jobs)
        signer = Signer(Ed25519PrivateKey.generate())
        repos = [ChainRepository(d.sessions, postgres=not d.is_sqlite) for d in databases]
        start = time.perf_counter()
        linked = sum(await asyncio.gather(*(_chain_all(repo, signer, batch) for repo in repos)))
        chained = time.perf_counter() - start
        # What one step holds the store for (on SQLite, its one connection: requests wait).
        step_ms = chained / max(1, -(-jobs // batch)) * 1000
        verifier = ChainVerifier(repos[0], ring=signer.ring, unchained_grace_seconds=300)
        start = time.perf_counter()
        report = await verifier.verify()
        verified = time.perf_counter() - start
        assert report.ok and linked == jobs == report.entries_checked, report
        rate, per_100k = jobs / chained, verified / jobs * 100_000
        print(f"{label:34} {jobs:>7} {rate:>10,.0f} {step_ms:>8.1f} {per_100k:>13.1f}")
    finally:
        for database in databases:
            await database.aclose()


async def _run(jobs: int, backends: list[str], batch: int) -> None:
    print(f"batch {batch} records per chainer transaction")
    print(f"{'store':34} {'entries':>7} {'entries/s':>10} {'step ms':>8} {'verify s/100k':>13}")
    if "sqlite" in backends:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'chain.db'}"
            await _measure(url, "sqlite, one chainer", jobs, replicas=1, batch=batch)
    if "postgres" in backends:
        for replicas in (1, 2):
            async with scratch_postgres() as url:
                label = f"postgres, {replicas} chainer{'s' if replicas > 1 else ''}"
                await _measure(url, label, jobs, replicas=replicas, batch=batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000, help="finished jobs to link")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--batch", type=int, default=BATCH, help="records per transaction")
    args = parser.parse_args()
    quiet_logs()
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    asyncio.run(_run(args.jobs, backends, args.batch))


if __name__ == "__main__":
    main()
