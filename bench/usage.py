"""Usage reports on a million jobs (issue 18): how long `GET /v1/usage`'s query takes.

    .venv/bin/python -m bench.usage                      # 1,000,000 jobs, SQLite and PostgreSQL
    .venv/bin/python -m bench.usage --rows 20000 --backend sqlite --runs 3   # a quick look

A fresh store per backend (an SQLite file in a temp dir, a scratch PostgreSQL database), migrated
by the app, then filled in bulk (sqlite3 `executemany` in one transaction; asyncpg `COPY`): jobs
spread evenly over the last 60 days, from 200 keys in 20 teams, over 50 patterns and 10 models,
90% completed, 5% cached, 4% failed, 1% pending; each with a redacted prompt of about 600 bytes,
so rows are as wide as real ones are at their narrowest. `ANALYZE` follows, as autovacuum (or
`genai db` maintenance) would. Then each query runs once to warm the cache and `--runs` times
more; the median is reported.

The repository is timed directly (`UsageRepository.groups` through the app's own engine, no
HTTP): what the database and the driver cost, without the ASGI stack. Figures are reported,
never asserted. `python -m bench` runs this too (`--usage-rows`, `--no-usage`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from app.schemas import UsageQuery
from app.store.db import Database
from app.store.usage import UsageRepository
from bench.stores import scratch_postgres

DAYS = 60
KEYS = 200
TEAMS = 20
PATTERNS = 50
MODELS = (
    "openai/gpt-4o",
    "openai/gpt-4o-mini",
    "openai/o4-mini",
    "openai/gpt-4.1",
    "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5",
    "anthropic/claude-opus-4-5",
    "ollama/llama3.1:8b",
    "ollama/qwen2.5:14b",
    "ollama/mistral:7b",
)
STATUSES = ("completed",) * 90 + ("cached",) * 5 + ("failed",) * 4 + ("pending",)
# What is timed: each grouping over the last 30 days, for everyone and for one key.
SHAPES: tuple[tuple[str, ...], ...] = (
    ("key",),
    ("model",),
    ("day",),
    ("team", "day"),
    ("hour",),  # the console's usage charts: with the overhead percentiles (overhead=true)
)
_PROMPT = json.dumps({"system": "You are a careful assistant. " * 12, "user": "<redacted> " * 20})
_COLUMNS = (
    "id",
    "created_at",
    "completed_at",
    "status",
    "source_kind",
    "source_name",
    "source_base_path",
    "pattern_content_hash",
    "variables_hash",
    "user_prompt_hash",
    "provider",
    "model",
    "params",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "reasoning_tokens",
    "cache_write_tokens",
    "cost_usd",
    "cache_saved_usd",
    "key_id",
    "team",
    "streamed",
    "latency_ms",
    "upstream_latency_ms",
    "prompt_redacted",
    "redaction_map",
    "snippet_ids",
)


@dataclass(frozen=True)
class UsageTiming:
    backend: str
    rows: int
    group_by: tuple[str, ...]
    one_key: bool
    groups: int
    median_ms: float
    runs: int

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "group_by": list(self.group_by)}


def _key(n: int) -> str:
    return f"{n:016x}"


def _rows(count: int, now: dt.datetime, seed: int = 18) -> Iterator[tuple[Any, ...]]:
    """`count` jobs, evenly spread over the DAYS before `now`, deterministic for a seed."""
    rng = random.Random(seed)
    span = DAYS * 86_400.0
    for n in range(count):
        when = now - dt.timedelta(seconds=span * (n + rng.random()) / count)
        key = rng.randrange(KEYS)
        provider, model = rng.choice(MODELS).split("/", 1)
        status = rng.choice(STATUSES)
        billed = status != "pending"
        prompt = rng.randrange(200, 4000)
        cached = rng.randrange(0, prompt) if rng.random() < 0.3 else 0
        output = rng.randrange(10, 800)
        upstream = rng.uniform(200.0, 3000.0)
        overhead = rng.lognormvariate(1.0, 0.8)  # a few ms, a long tail
        yield (
            uuid.UUID(int=rng.getrandbits(128)).hex,
            when,
            when + dt.timedelta(seconds=2) if billed else None,
            status,
            "pattern",
            f"pattern-{rng.randrange(PATTERNS):02d}",
            "patterns",
            "sha256:" + "0" * 64,
            "sha256:" + "1" * 64,
            "sha256:" + "2" * 64,
            provider,
            model,
            "{}",
            prompt if billed else None,
            output if billed else None,
            cached if billed else None,
            output // 4 if billed and model.startswith("o4") else None,
            None,
            (prompt * 2.5 + output * 10) / 1e6 if billed else None,
            cached * 1.25 / 1e6 if billed else None,
            _key(key),
            f"team-{key % TEAMS:02d}",
            False,
            upstream + overhead if billed else None,
            upstream if billed else None,
            _PROMPT,
            "{}",
            "[]",
        )


def _fill_sqlite(path: Path, count: int, now: dt.datetime) -> None:
    """executemany in one transaction; timestamps as SQLAlchemy writes them (naive UTC text)."""

    def stored(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(
            v.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            if isinstance(v, dt.datetime)
            else v
            for v in row
        )

    marks = ", ".join("?" * len(_COLUMNS))
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        with db:
            db.executemany(
                f"INSERT INTO jobs ({', '.join(_COLUMNS)}) VALUES ({marks})",
                (stored(row) for row in _rows(count, now)),
            )
        db.execute("ANALYZE")


async def _fill_postgres(url: str, count: int, now: dt.datetime) -> None:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        batch: list[tuple[Any, ...]] = []
        for row in _rows(count, now):
            batch.append(row)
            if len(batch) == 100_000:
                await connection.copy_records_to_table("jobs", records=batch, columns=_COLUMNS)
                batch.clear()
        if batch:
            await connection.copy_records_to_table("jobs", records=batch, columns=_COLUMNS)
        await connection.execute("VACUUM ANALYZE jobs")
    finally:
        await connection.close()


async def _time_queries(
    url: str, backend: str, rows: int, runs: int, now: dt.datetime, log: Callable[[str], None]
) -> list[UsageTiming]:
    database = Database(url, statement_timeout=600)
    repository = UsageRepository(database.sessions)
    found = []
    try:
        for one_key in (False, True):
            for shape in SHAPES:
                query = UsageQuery(
                    group_by=list(shape),
                    end=now,
                    start=now - dt.timedelta(days=30),
                    key=_key(7) if one_key else None,
                    overhead="hour" in shape,
                )
                groups = await repository.groups(query)  # warms the cache
                took = []
                for _ in range(runs):
                    started = time.perf_counter()
                    await repository.groups(query)
                    took.append((time.perf_counter() - started) * 1000)
                timing = UsageTiming(
                    backend, rows, shape, one_key, len(groups), statistics.median(took), runs
                )
                found.append(timing)
                log(
                    f"  {backend} {'+'.join(shape)}{' one key' if one_key else ''}: "
                    f"{timing.median_ms:.1f} ms median of {runs} ({len(groups)} groups)"
                )
    finally:
        await database.aclose()
    return found


@contextlib.contextmanager
def _store(backend: str) -> Iterator[str]:
    if backend == "postgres":
        with scratch_postgres() as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="genai-bench-usage-") as tmp:
        yield f"sqlite+aiosqlite:///{Path(tmp) / 'genai.db'}"


def measure_usage(
    backend: str, *, rows: int, runs: int, log: Callable[[str], None] = print
) -> list[UsageTiming]:
    """A fresh store of `rows` jobs on `backend`, then every query shape timed."""
    now = dt.datetime.now(dt.UTC)
    with _store(backend) as url:

        async def migrate() -> None:
            database = Database(url)
            try:
                await database.migrate()
            finally:
                await database.aclose()

        asyncio.run(migrate())
        started = time.perf_counter()
        if backend == "postgres":
            asyncio.run(_fill_postgres(url, rows, now))
        else:
            _fill_sqlite(Path(url.split(":///", 1)[1]), rows, now)
        log(f"{backend}: {rows:,} jobs inserted in {time.perf_counter() - started:.1f} s")
        return asyncio.run(_time_queries(url, backend, rows, runs, now, log))


def usage_tables(timings: list[UsageTiming]) -> list[str]:
    """Markdown: one row per query shape, a column per backend, everyone and one key."""
    backends = list(dict.fromkeys(t.backend for t in timings))
    by = {(t.backend, t.group_by, t.one_key): t for t in timings}
    rows = max((t.rows for t in timings), default=0)
    lines = [
        "",
        f"### Usage reports on {rows:,} jobs (`bench/usage.py`; the repository query, no HTTP; "
        "last 30 of 60 days, median ms)",
        "",
        "| group_by | " + " | ".join(f"{b} all keys | {b} one key" for b in backends) + " |",
        "|---|" + "---|---|" * len(backends),
    ]
    for shape in SHAPES:
        cells = []
        for backend in backends:
            for one_key in (False, True):
                t = by.get((backend, shape, one_key))
                cells.append("—" if t is None else f"{t.median_ms:.1f} ({t.groups} groups)")
        lines.append(f"| {'+'.join(shape)} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.usage", description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--json", type=Path, help="Also write the timings here.")
    args = parser.parse_args(argv)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    timings = [
        timing
        for backend in backends
        for timing in measure_usage(backend, rows=args.rows, runs=args.runs)
    ]
    print("\n".join(usage_tables(timings)))
    if args.json:
        args.json.write_text(json.dumps([t.as_dict() for t in timings], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
