"""Retention on a million jobs: the older half pruned on each backend (issue 20).

Fills `jobs` with N rows spread evenly over twelve months (a few pending ones in the newest
month), then times `JobPruner.prune` with the cut-off in the middle: whole month partitions
detached and dropped on PostgreSQL, bounded batched DELETEs plus incremental vacuum on SQLite.
Reports the prune's time, what went, and the store's size before and after.

    .venv/bin/python -m bench.prune [--jobs 1000000] [--backend sqlite|postgres|both]

Takes a few minutes at a million rows; never part of `bench --quick` (CI). Figures are reported,
never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import tempfile
import time
from pathlib import Path

from sqlalchemy import text

from app.store.db import Database
from app.store.retention import JobPruner, PruneReport
from bench._common import quiet_logs, scratch_postgres

SPAN = dt.timedelta(days=365)
# Each row's own bytes, about what a redacted completion stores (prompt, answer, map).
_FILLER = 600
_COLUMNS = (
    "id, status, source_kind, source_name, source_base_path, pattern_content_hash, "
    "variables_hash, user_prompt_hash, provider, model, params, prompt_redacted, "
    "redaction_map, snippet_ids, response_redacted, input_tokens, output_tokens, created_at"
)


def _fill_postgres(n: int) -> str:
    return (
        f"INSERT INTO jobs ({_COLUMNS}) SELECT md5(i::text), "
        "CASE WHEN i >= :n - :n / 100 AND i % 1000 = 0 THEN 'pending' ELSE 'completed' END, "
        "'pattern', 'summarize', 'patterns', 'sha256:p', 'sha256:v', 'sha256:u', 'openai', "
        "'gpt-4o-mini', '{}', '{\"system\": \"s\"}', '{}', '[]', "
        f"repeat('x', {_FILLER}), 100, 50, "
        "CAST(:start AS timestamptz) + (i * CAST(:span AS bigint) / :n) * interval '1 second' "
        f"FROM generate_series(0, {n - 1}) AS i"
    )


def _fill_sqlite(n: int) -> str:
    return (
        f"WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < {n - 1}) "
        f"INSERT INTO jobs ({_COLUMNS}) SELECT printf('%032x', i), "
        "CASE WHEN i >= :n - :n / 100 AND i % 1000 = 0 THEN 'pending' ELSE 'completed' END, "
        "'pattern', 'summarize', 'patterns', 'sha256:p', 'sha256:v', 'sha256:u', 'openai', "
        "'gpt-4o-mini', '{}', '{\"system\": \"s\"}', '{}', '[]', "
        f"printf('%.{_FILLER}c', 'x'), 100, 50, "
        "strftime('%Y-%m-%d %H:%M:%f', :start, '+' || (i * :span / :n) || ' seconds') FROM s"
    )


async def _size(database: Database) -> int:
    """Bytes the jobs table takes: its partitions and indexes (PostgreSQL), the file (SQLite)."""
    async with database.engine.connect() as conn:
        if database.is_sqlite:
            await conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
            pages = await conn.scalar(text("PRAGMA page_count"))
            return int(pages or 0) * int(await conn.scalar(text("PRAGMA page_size")) or 0)
        query = (
            "SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0) FROM pg_inherits "
            "WHERE inhparent = 'jobs'::regclass"
        )
        return int(await conn.scalar(text(query)) or 0)


async def measure(url: str, n: int) -> tuple[float, PruneReport, int, int]:
    """Fill time, the prune's report, the size before and after."""
    database = Database(url, statement_timeout=3600.0, lock_timeout=60.0)
    start = (dt.datetime.now(dt.UTC) - SPAN).replace(microsecond=0)
    try:
        await database.migrate()
        pruner = JobPruner(database.engine, proof=None)
        await pruner.partitions.ensure(now=start, ahead=13)  # as if it had run all year
        stamp = start.strftime("%Y-%m-%d %H:%M:%S") if database.is_sqlite else start
        params = {"n": n, "start": stamp, "span": int(SPAN.total_seconds())}
        began = time.perf_counter()
        fill = _fill_sqlite(n) if database.is_sqlite else _fill_postgres(n)
        async with database.engine.begin() as conn:
            await conn.execute(text(fill), params)
            if not database.is_sqlite:
                await conn.execute(text("ANALYZE jobs"))
        filled = time.perf_counter() - began
        before = await _size(database)
        report = await pruner.prune(start + SPAN / 2)
        after = await _size(database)
        return filled, report, before, after
    finally:
        await database.aclose()


def _mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    args = parser.parse_args()
    quiet_logs()
    print(f"Pruning the older half of {args.jobs:,} jobs spread over 12 months")
    print(
        "| backend | fill | prune | jobs pruned | partitions dropped | in batches "
        "| size before | size after |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    runs = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'prune.db'}"
            runs.append(("SQLite", await measure(url, args.jobs)))
            _print(*runs[-1])
    if args.backend in ("postgres", "both"):
        async with scratch_postgres() as url:
            runs.append(("PostgreSQL", await measure(url, args.jobs)))
            _print(*runs[-1])


def _print(backend: str, result: tuple[float, PruneReport, int, int]) -> None:
    filled, report, before, after = result
    print(
        f"| {backend} | {filled:.1f} s | {report.seconds:.2f} s | {report.jobs_pruned:,} | "
        f"{len(report.partitions_dropped)} ({report.jobs_in_dropped_partitions:,} jobs) | "
        f"{report.jobs_deleted:,} | {_mb(before)} | {_mb(after)} |"
    )


if __name__ == "__main__":
    asyncio.run(main())
