"""The jobs behind the console benchmark: a year of varied, deterministic audit records.

Rows are built in Python once and written in bulk (sqlite3 `executemany` in one transaction,
asyncpg `COPY` on PostgreSQL), as bench/usage.py does: a million in well under a minute, where
the service's own write path would take an hour.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import random
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

SPAN = dt.timedelta(days=365)
MODELS = (
    "openai/gpt-4o-mini",
    "openai/gpt-4o",
    "openai/o4-mini",
    "anthropic/claude-sonnet-4-5",
    "anthropic/claude-haiku-4-5",
    "ollama/llama3.1:8b",
)
# Most jobs succeed; enough fail, hit the cache or hang that every status filter has pages.
STATUSES = ("completed",) * 86 + ("cached",) * 6 + ("failed",) * 5 + ("cancelled", "pending")
ERRORS = (
    ("upstream_timeout", "The provider did not answer within 60 s."),
    ("upstream_error", "The provider answered 529: overloaded."),
    ("rate_limited", "Key limit reached: 60 requests per minute."),
)
_PROMPT = json.dumps(
    {
        "system": "You are the support assistant of <ORG_1>. Answer in a calm tone. " * 6,
        "messages": [
            {
                "role": "user",
                "content": "Hello, I am <PERSON_1> (<EMAIL_1>) and my card <CARD_1> was "
                "charged twice. " * 3,
            }
        ],
    }
)
_ANSWER = "Thank you for writing. Under policy RF-2 a duplicate charge is refunded in full. " * 4
# What the redactor records: each token in the texts and its category.
_MAP = json.dumps(
    {"<PERSON_1>": "PERSON", "<EMAIL_1>": "EMAIL", "<CARD_1>": "CARD", "<ORG_1>": "ORG"}
)
COLUMNS = (
    "id",
    "created_at",
    "completed_at",
    "status",
    "error_type",
    "error_message",
    "source_kind",
    "source_name",
    "source_base_path",
    "template_role",
    "template_version",
    "pattern_content_hash",
    "variables_hash",
    "user_prompt_hash",
    "provider",
    "model",
    "params",
    "finish_reason",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
    "key_id",
    "team",
    "streamed",
    "latency_ms",
    "upstream_latency_ms",
    "prompt_redacted",
    "response_redacted",
    "redaction_map",
    "snippet_ids",
)


@dataclass(frozen=True)
class Sources:
    """What the jobs point at: patterns on disk, stored templates, keys (with their teams)."""

    patterns: Sequence[str]
    templates: Sequence[tuple[str, str]]  # (name, role)
    keys: Sequence[tuple[str, str | None]]  # (key id, team)
    snippets: Sequence[str]


def _hash(rng: random.Random) -> str:
    return f"sha256:{rng.getrandbits(256):064x}"


def job_rows(
    count: int, now: dt.datetime, sources: Sources, seed: int = 21
) -> Iterator[tuple[Any, ...]]:
    """`count` jobs spread evenly over the year before `now`, newest first; deterministic."""
    rng = random.Random(seed)
    # A few patterns carry most of the traffic, as in a real catalog.
    weights = [1 / (rank + 1) for rank in range(len(sources.patterns))]
    step = SPAN / count
    pattern_hashes = {name: _hash(rng) for name in sources.patterns}
    for n in range(count):
        created = now - step * (n + rng.random())
        status = rng.choice(STATUSES)
        provider, model = rng.choice(MODELS).split("/", 1)
        key_id, team = rng.choice(sources.keys)
        source: tuple[str, str, str, str | None, int | None]
        if rng.random() < 0.1:
            name, role = rng.choice(sources.templates)
            source = ("template", name, "templates", role, rng.randrange(1, 4))
        else:
            name = rng.choices(sources.patterns, weights)[0]
            source = ("pattern", name, "patterns", None, None)
        billed = status in ("completed", "cached")
        error = rng.choice(ERRORS) if status == "failed" else (None, None)
        prompt, output = rng.randrange(200, 4000), rng.randrange(10, 800)
        latency = rng.lognormvariate(6.5, 0.6)
        yield (
            uuid.UUID(int=rng.getrandbits(128)).hex,
            created,
            created + dt.timedelta(milliseconds=latency) if status != "pending" else None,
            status,
            *error,
            *source,
            pattern_hashes.get(name, "sha256:" + "3" * 64),
            _hash(rng),
            _hash(rng),
            provider,
            model,
            '{"temperature": 0.2, "max_tokens": 400}',
            "stop" if billed else None,
            prompt if billed else None,
            output if billed else None,
            rng.randrange(0, prompt) if billed and rng.random() < 0.3 else None,
            (prompt * 2.5 + output * 10) / 1e6 if billed else None,
            key_id,
            team,
            rng.random() < 0.4,
            latency if status != "pending" else None,
            latency - rng.uniform(1, 4) if billed else None,
            _PROMPT,
            _ANSWER if billed else None,
            _MAP,
            json.dumps(rng.sample(sources.snippets, 2)) if rng.random() < 0.2 else "[]",
        )


def _sqlite_value(value: Any) -> Any:
    """As SQLAlchemy's UTCDateTime stores it on SQLite: naive UTC text."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


def fill_sqlite(path: Path, rows: Iterator[tuple[Any, ...]]) -> None:
    marks = ", ".join("?" * len(COLUMNS))
    with contextlib.closing(sqlite3.connect(path)) as db:
        # One writer and nobody reading: no WAL during the fill (a transaction bigger than the
        # page cache spills every page it touches again into the WAL, gigabytes of copies),
        # a cache that holds the indexes being built, and WAL again afterwards, as the
        # service runs it.
        db.execute("PRAGMA journal_mode = OFF")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -1000000")
        with db:
            db.executemany(
                f"INSERT INTO jobs ({', '.join(COLUMNS)}) VALUES ({marks})",
                (tuple(_sqlite_value(v) for v in row) for row in rows),
            )
        # No statistics, as the service leaves its store (it never runs ANALYZE). Sampled ones
        # (`PRAGMA analysis_limit` + ANALYZE, what `PRAGMA optimize` keeps) misled SQLite into
        # scanning and sorting all of `jobs` here: the job list 1.0 s instead of 12 ms, drift
        # 3.2 s instead of 0.22 s (bench/RESULTS.md).
        db.execute("PRAGMA journal_mode = WAL")


async def fill_postgres(url: str, rows: Iterator[tuple[Any, ...]]) -> None:
    connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        batch: list[tuple[Any, ...]] = []
        for row in rows:
            batch.append(row)
            if len(batch) == 50_000:
                await connection.copy_records_to_table("jobs", records=batch, columns=COLUMNS)
                batch.clear()
        if batch:
            await connection.copy_records_to_table("jobs", records=batch, columns=COLUMNS)
        await connection.execute("VACUUM ANALYZE jobs")
    finally:
        await connection.close()
