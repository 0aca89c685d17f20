"""The audit trail's cost on the request path, on SQLite and PostgreSQL.

(a) `AuditTrail.start`: redaction + sealing of the replay inputs + the pending INSERT (a group
    commit of one, as at c=1), per job (p50/p95/p99 ms, the INSERT transaction timed separately
    inside the same call), with a system prompt
    repeated across jobs (the Redactor's cache serves it) and with a distinct one per job;
(b) completing records: `AuditWriter` batches (submit N, then `flush()`) versus one UPDATE
    transaction per record (`JobRepository.apply([outcome])` N times), in records/s;
(c) one pending record per transaction, as at c=1: through a pooled session (a checkout and a
    hop or round trip per statement) versus through the write lane the service uses.

    .venv/bin/python -m bench.audit_writes [--n 2000] [--backend sqlite|postgres|both]

Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.audit.records import redact_prompt
from app.audit.redaction import Redactor
from app.audit.trail import AuditTrail, CallRun, OpenJob
from app.config import AuditSettings, Settings
from app.pipeline.prepare import Prepared as PreparedPrompt
from app.providers import ProviderReply
from app.runtime import Runtime, build_runtime
from app.schemas import (
    RenderRequest,
    Usage,
)
from app.store.db import Database
from app.store.jobs import JobRepository
from app.store.lane import PooledLane
from app.store.records import JobOutcome, PendingJob
from app.store.secrets import KEY_BYTES, ReplayVault
from app.store.writer import AuditWriter
from bench._common import (
    CONTEXT,
    MODEL,
    PATTERN,
    POSTGRES_ADMIN_DSN,
    REPO_ROOT,
    USER_PROMPT,
    VARIABLES,
    CpuMeter,
    job_counts,
    percentiles_ms,
    quiet_logs,
    scratch_postgres,
)

WARMUP = 50


@dataclass(frozen=True, slots=True)
class Prepared:
    """One job's inputs: the request, and what the service's own pipeline built from it."""

    request: RenderRequest
    built: PreparedPrompt  # the PromptPreparer's record: source, prompt, choice, params...


class Inputs:
    """Builds what `AuditTrail.start` receives with the service's own pipeline.

    A runtime is built on the same database only for its `PromptPreparer`, whose `prepare`
    renders the pattern, picks the model and params and fingerprints the provenance exactly
    as a completion would; its own audit pieces stay idle.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @classmethod
    async def open(cls, url: str, data_dir: Path) -> Inputs:
        settings = Settings(
            _env_file=None,
            data_dir=data_dir,
            database_url=url,
            database_auto_migrate=False,
            pattern_dir=[REPO_ROOT / "patterns"],
            pattern_reload_seconds=0,
            log_level="WARNING",
        )
        return cls(await build_runtime(settings))

    async def prepare(self, i: int, *, distinct_system: bool) -> Prepared:
        """Job `i`: its user prompt carries a reference of its own, and with `distinct_system`
        so does the rendered system prompt (another ticket number in the context)."""
        variables = VARIABLES
        if distinct_system:
            variables = {**VARIABLES, "context": CONTEXT.replace("48213", f"{i % 100_000:05d}")}
        request = RenderRequest(
            pattern_key=PATTERN,
            variables=variables,
            user_prompt=f"{USER_PROMPT} Ref {i:06d}.",
            model=MODEL,
        )
        return Prepared(request, await self.runtime.preparer.prepare(request))

    async def aclose(self) -> None:
        await self.runtime.aclose()


class TimedJobs(JobRepository):
    """The real repository, with each pending INSERT transaction's wall time noted."""

    insert_seconds: list[float]
    last: PendingJob | None = None

    async def insert_many(self, jobs: Sequence[PendingJob]) -> None:
        started = time.perf_counter()
        await super().insert_many(jobs)
        self.insert_seconds.append(time.perf_counter() - started)
        self.last = jobs[-1]


async def one_record_inserts(
    database: Database, template: PendingJob, n: int
) -> dict[str, dict[str, float]]:
    """(c): `n` pending records, one per transaction, through each way in."""
    timings: dict[str, dict[str, float]] = {}
    for name, lane in (("pooled", PooledLane(database.sessions)), ("lane", database.lane)):
        jobs = JobRepository(database.sessions, lane)
        seconds = []
        for i in range(WARMUP + n):
            record = dataclasses.replace(template, id=uuid.uuid4().hex)
            started = time.perf_counter()
            await jobs.insert_many([record])
            if i >= WARMUP:
                seconds.append(time.perf_counter() - started)
        timings[name] = percentiles_ms(seconds)
    return timings


class CollectingWriter(AuditWriter):
    """Keeps what `AuditTrail.completed` submits, so both write paths get identical outcomes."""

    collected: list[JobOutcome]

    def submit(self, outcome: JobOutcome) -> None:
        self.collected.append(outcome)


async def start_job(trail: AuditTrail, p: Prepared) -> OpenJob:
    """The call `GenAIService.complete` makes before it calls a provider."""
    return await trail.start(p.built, request=p.request, request_id=None)


def seal(vault: ReplayVault, job_id: str, p: Prepared) -> bytes:
    """What `start` seals: everything needed to rebuild the prompt."""
    return vault.seal(
        job_id,
        {
            "variables": p.built.source.variables,
            "user_prompt": p.request.user_prompt,
            "instructions": p.request.instructions,
            "snippets": p.request.snippets,
        },
    )


def reply_for(p: Prepared) -> ProviderReply:
    """What the loopback fake answers: an echo of the user message."""
    return ProviderReply(
        text="echo: " + p.request.user_prompt,
        finish_reason="stop",
        usage=Usage(input_tokens=412, output_tokens=131, total_tokens=543),
    )


async def timed_starts(
    trail: AuditTrail, jobs: TimedJobs, inputs: Inputs, ids: range, distinct: bool
) -> tuple[dict[str, list[float]], list[tuple[OpenJob, Prepared]]]:
    """`start()` per job: its wall time, and the INSERT transaction's share of it."""
    jobs.insert_seconds.clear()
    total: list[float] = []
    opened: list[tuple[OpenJob, Prepared]] = []
    for i in ids:
        p = await inputs.prepare(i, distinct_system=distinct)
        started = time.perf_counter()
        job = await start_job(trail, p)
        total.append(time.perf_counter() - started)
        opened.append((job, p))
    inserts = list(jobs.insert_seconds)
    rest = [t - s for t, s in zip(total, inserts, strict=True)]
    return {"total": total, "insert": inserts, "rest": rest}, opened


async def run_backend(
    label: str, url: str, data_dir: Path, n: int, batch_size: int
) -> dict[str, Any]:
    database = Database(url)
    await database.migrate()
    jobs = TimedJobs(database.sessions, database.lane)
    jobs.insert_seconds = []
    audit = AuditSettings()
    writer = AuditWriter(jobs, flush_seconds=audit.flush_seconds, batch_size=batch_size)
    collector = CollectingWriter(jobs, flush_seconds=audit.flush_seconds, batch_size=batch_size)
    collector.collected = []
    redactor = Redactor(os.urandom(KEY_BYTES))
    vault = ReplayVault(os.urandom(KEY_BYTES))
    trail = AuditTrail(jobs=jobs, writer=collector, redactor=redactor, vault=vault)
    inputs = await Inputs.open(url, data_dir)
    meter = CpuMeter()
    try:
        # Warm the pool, statement caches and regex engine; these jobs are not counted.
        for i in range(WARMUP):
            await start_job(trail, await inputs.prepare(-1 - i, distinct_system=True))
        sample = (await inputs.prepare(0, distinct_system=False)).built.prompt
        sizes = (len(sample.system), sum(len(m.content) for m in sample.messages))

        # (a) start(): one pattern with the same variables for every job (its rendered system
        # prompt repeats, so a redaction cache can serve it), then a distinct one per job.
        same, same_jobs = await timed_starts(trail, jobs, inputs, range(n), distinct=False)
        fresh, fresh_jobs = await timed_starts(trail, jobs, inputs, range(n, 2 * n), True)

        # The CPU parts alone, on distinct prompts with a fresh Redactor (nothing cached).
        plain = Redactor(os.urandom(KEY_BYTES))
        redaction, sealing = [], []
        for job, p in fresh_jobs:
            started = time.perf_counter()
            redact_prompt(plain, p.built.prompt)
            redaction.append(time.perf_counter() - started)
            started = time.perf_counter()
            seal(vault, job.id, p)
            sealing.append(time.perf_counter() - started)

        # Completions as the service builds them (response redaction + enqueue), timed.
        completing = []
        for job, p in same_jobs + fresh_jobs:
            started = time.perf_counter()
            await trail.completed(job, reply_for(p), CallRun(latency_ms=3.2, upstream_ms=1.1))
            completing.append(time.perf_counter() - started)
        batched, single = collector.collected[:n], collector.collected[n:]

        # (b1) AuditWriter: submit all, then flush in batches of `batch_size`.
        started = time.perf_counter()
        for outcome in batched:
            writer.submit(outcome)
        await writer.flush()
        batched_s = time.perf_counter() - started

        # (b2) One UPDATE transaction per record.
        started = time.perf_counter()
        for outcome in single:
            await jobs.apply([outcome])
        single_s = time.perf_counter() - started

        assert jobs.last is not None
        one_record = await one_record_inserts(database, jobs.last, n)
    finally:
        await inputs.aclose()
        await database.aclose()
    cpu = meter.summary()
    counts = await job_counts(url)
    return {
        "backend": label,
        "n": n,
        "sizes": sizes,
        "batch_size": batch_size,
        **{f"same_{key}": percentiles_ms(values) for key, values in same.items()},
        **{f"fresh_{key}": percentiles_ms(values) for key, values in fresh.items()},
        "redaction": percentiles_ms(redaction),
        "sealing": percentiles_ms(sealing),
        "completed_call": percentiles_ms(completing),
        "batched_rps": n / batched_s,
        "single_rps": n / single_s,
        "one_record": one_record,
        "counts": counts,
        "cpu": cpu,
    }


def report(results: list[dict[str, Any]]) -> None:
    print(
        f"\nAuditTrail.start, per job (ms) — Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs"
    )
    print("| backend | part | p50 | p95 | p99 |")
    print("|---|---|---:|---:|---:|")
    parts = (
        ("same_total", "start(), repeated system prompt"),
        ("same_insert", "  pending INSERT transaction"),
        ("same_rest", "  redaction + sealing + record"),
        ("fresh_total", "start(), distinct system prompt per job"),
        ("fresh_insert", "  pending INSERT transaction"),
        ("fresh_rest", "  redaction + sealing + record"),
        ("redaction", "redaction alone, uncached (system + user)"),
        ("sealing", "sealing alone (AES-GCM)"),
        ("completed_call", "completed(): response redaction + enqueue"),
    )
    for r in results:
        for key, name in parts:
            q = r[key]
            print(f"| {r['backend']} | {name} | {q['p50']:.3f} | {q['p95']:.3f} | {q['p99']:.3f} |")
    print("\nCompleting records (records/s)")
    print("| backend | N | AuditWriter batches | one UPDATE tx per record | ratio |")
    print("|---|---:|---:|---:|---:|")
    for r in results:
        print(
            f"| {r['backend']} | {r['n']} | {r['batched_rps']:,.0f} (batch {r['batch_size']}) "
            f"| {r['single_rps']:,.0f} | {r['batched_rps'] / r['single_rps']:.1f}x |"
        )
    print("\nOne pending record per transaction (ms)")
    print("| backend | way in | p50 | p95 | p99 |")
    print("|---|---|---:|---:|---:|")
    for r in results:
        for name, label in (("pooled", "pooled session"), ("lane", "write lane")):
            q = r["one_record"][name]
            print(
                f"| {r['backend']} | {label} | {q['p50']:.3f} | {q['p95']:.3f} | {q['p99']:.3f} |"
            )
    for r in results:
        print(f"{r['backend']}: rows by status after the run: {r['counts']}; {r['cpu']}")
    system, user = results[0]["sizes"]
    print(f"prompt as sent: system {system} characters, user message(s) {user} characters")


async def main(args: argparse.Namespace) -> None:
    quiet_logs()
    results = []
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="genai-bench-") as tmp:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'genai.db'}"
            results.append(await run_backend("SQLite", url, Path(tmp), args.n, args.batch_size))
    if args.backend in ("postgres", "both"):
        with tempfile.TemporaryDirectory(prefix="genai-bench-") as tmp:
            async with scratch_postgres(args.postgres_dsn) as url:
                results.append(
                    await run_backend("PostgreSQL", url, Path(tmp), args.n, args.batch_size)
                )
    report(results)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="jobs per measurement")
    parser.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument(
        "--batch-size", type=int, default=AuditSettings().batch_size, help="AuditWriter batch"
    )
    parser.add_argument(
        "--postgres-dsn",
        default=POSTGRES_ADMIN_DSN,
        help="admin DSN; a scratch database is created beside it and dropped",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
