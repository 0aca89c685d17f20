"""Shared by the benchmarks: realistic prompts, percentiles, scratch databases, quiet logs."""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import asyncpg
import structlog
from sqlalchemy import func, select

from app.store.db import Database
from app.store.tables import Job

REPO_ROOT = Path(__file__).resolve().parent.parent
PATTERN = "answer_from_context"
MODEL = "openai/gpt-4o-mini"
POSTGRES_ADMIN_DSN = os.environ.get(
    "GENAI_BENCH_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)

# Rendered into the shipped `answer_from_context` pattern (868 characters of its own), this
# context makes a system prompt of about 1,500 characters with personal data to redact.
CONTEXT = (
    "Ticket 48213, opened 2026-11-19 by Mr John Smith (john.smith@example.com, "
    "+44 20 7946 0958), 221B Baker Street, London. He disputes a double charge on card "
    "4111 1111 1111 1111 and asks for the refund to go to IBAN GB82 WEST 1234 5698 7654 32. "
    "Agent notes: the duplicate payment of 49.90 EUR came from IP 203.0.113.42; the customer "
    "was told on the phone (020 7946 0321) that refunds take 5-7 working days. Previous "
    "contact: Ms Anna Virtanen, account manager, anna.virtanen@example.org. Policy RF-2: "
    "duplicate charges are refunded in full, to the original card unless the customer "
    "names another account in writing; bank transfers need a verified IBAN."
)
# About 500 characters, verbatim as the user message.
USER_PROMPT = (
    "Hello, my name is John Smith and I wrote to you last week about the double charge on my "
    "card ending 1111. I asked for the money to be sent to my bank account instead, IBAN "
    "GB82 WEST 1234 5698 7654 32, because the card has since been cancelled. Can you tell me "
    "whether that is allowed under your refund policy, how long it will take, and whether "
    "I need to send anything else? You can reach me at john.smith@example.com or on "
    "+44 20 7946 0958 during office hours. Thank you, John."
)
VARIABLES = {"context": CONTEXT}


class CpuMeter:
    """Cores kept busy during a run: this process (all its threads) versus everything else.

    The machine may be shared; a busy neighbour makes every figure worse, so say so.
    """

    def __init__(self) -> None:
        self._wall = time.perf_counter()
        self._own = self._own_seconds()
        self._busy = self._busy_seconds()

    @staticmethod
    def _own_seconds() -> float:
        times = os.times()
        return times.user + times.system

    @staticmethod
    def _busy_seconds() -> float | None:
        try:
            with open("/proc/stat") as stat:
                fields = [int(v) for v in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    def summary(self) -> str:
        wall = time.perf_counter() - self._wall
        own = (self._own_seconds() - self._own) / wall
        busy_now = self._busy_seconds()
        if busy_now is None or self._busy is None:
            return f"CPU: this process {own:.2f} cores"
        other = max(0.0, (busy_now - self._busy) / wall - own)
        return (
            f"CPU over {wall:.1f} s: this process {own:.2f} cores, "
            f"everything else {other:.2f} of {os.cpu_count()} cores"
        )


def quiet_logs() -> None:
    """The app logs through structlog; keep the benchmark's own output readable."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def percentiles_ms(samples_s: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99 (and mean) in milliseconds from samples in seconds."""
    cuts = statistics.quantiles(samples_s, n=100, method="inclusive")
    return {
        "p50": cuts[49] * 1000,
        "p95": cuts[94] * 1000,
        "p99": cuts[98] * 1000,
        "mean": statistics.fmean(samples_s) * 1000,
    }


@contextlib.asynccontextmanager
async def scratch_postgres(admin_dsn: str = POSTGRES_ADMIN_DSN) -> AsyncIterator[str]:
    """A new, empty database for the run (its SQLAlchemy URL); dropped afterwards."""
    name = f"genai_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_dsn, timeout=5)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base = admin_dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    try:
        yield f"{base}/{name}"
    finally:
        admin = await asyncpg.connect(admin_dsn, timeout=5)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def job_counts(url: str) -> dict[str, int]:
    """Audit rows by status: every measured request must have left a record."""
    database = Database(url)
    try:
        async with database.sessions() as session:
            rows = await session.execute(select(Job.status, func.count()).group_by(Job.status))
            return {status: count for status, count in rows}
    finally:
        await database.aclose()
