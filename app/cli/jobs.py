"""`genai jobs` and `genai drift`: the audit trail from the command line, as the API serves it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from sqlalchemy.engine import make_url

from app.audit.events import CLI, job_target
from app.cli.runner import run
from app.config import MAX_RETENTION_DAYS, Settings, get_settings
from app.errors import ConfigurationError
from app.schemas import DriftReport, JobRecord, JobStatus, ReplayResult
from app.store.db import DATABASE_URL_SETTING

if TYPE_CHECKING:
    from app.runtime import Runtime
    from app.store.retention import PruneReport

jobs_cli = typer.Typer(
    help="The audit trail: recent jobs, one record, replay.", no_args_is_help=True
)

JOB_STATUSES: tuple[str, ...] = get_args(JobStatus)


def _status(value: str | None) -> str | None:
    if value is not None and value not in JOB_STATUSES:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(JOB_STATUSES)}")
    return value


def existing_store() -> Settings:
    """The settings, once their SQLite audit file exists. The default (`data/genai.db`) is
    relative to the working directory: run elsewhere, reading the trail would create an empty
    store and report no jobs, as if none had been made."""
    settings = get_settings()
    url = make_url(settings.resolved_database_url)
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return settings
    path = Path(url.database)
    if not path.exists():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise ConfigurationError(
            DATABASE_URL_SETTING,
            f"no audit database at {path}{where}; run genai from the directory the service "
            "runs in, or set GENAI_DATA_DIR or GENAI_DATABASE_URL",
        )
    return settings


def job_line(job: JobRecord) -> str:
    """One job at a glance: id, when, status, source, model, tokens, latency."""
    tokens = (
        f"{job.input_tokens}+{job.output_tokens} tok" if job.input_tokens is not None else "- tok"
    )
    latency = f"{job.latency_ms:.0f} ms" if job.latency_ms is not None else "- ms"
    return (
        f"{job.id}  {job.created_at:%Y-%m-%d %H:%M:%S}  {job.status:<11}  "
        f"{job.source_name:<24}  {job.provider}/{job.model:<24}  {tokens:>12}  {latency:>8}"
    )


@jobs_cli.command("list")
def jobs_list(
    status: Annotated[
        str | None,
        typer.Option(callback=_status, help=f"Only this status: {', '.join(JOB_STATUSES)}."),
    ] = None,
    pattern: Annotated[
        str | None, typer.Option(help="Only jobs of this pattern (or database template) name.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="How many, newest first.")] = 20,
) -> None:
    """The newest jobs, one line each (the id is what `jobs show` and `jobs replay` take)."""

    async def work(runtime: Runtime) -> list[JobRecord]:
        return await runtime.audit.reader.recent(limit=limit, status=status, source_name=pattern)

    jobs = run(work, existing_store())
    for job in jobs:
        typer.echo(job_line(job))
    if not jobs:
        typer.echo("no jobs match", err=True)


@jobs_cli.command("show")
def jobs_show(job_id: Annotated[str, typer.Argument(help="The envelope's `job_id`.")]) -> None:
    """One job's stored (redacted) record as JSON, as `GET /v1/jobs/{job_id}` answers it."""

    async def work(runtime: Runtime) -> JobRecord:
        return await runtime.audit.reader.get(job_id)

    typer.echo(run(work, existing_store()).model_dump_json(indent=2))


@jobs_cli.command("replay")
def jobs_replay(
    job_id: Annotated[str, typer.Argument(help="The envelope's `job_id`.")],
    reveal: Annotated[
        bool, typer.Option(help="Print the raw prompt instead of the redacted one (logged).")
    ] = False,
) -> None:
    """Rebuild the job's exact prompt and check every stored hash; exit 1 if one differs."""

    async def work(runtime: Runtime) -> ReplayResult:
        result = await runtime.replayer.replay(job_id, reveal=reveal)
        await runtime.admin_events.record(
            CLI, "job.replayed", target=job_target(job_id), detail={"reveal": reveal}
        )
        return result

    result = run(work, existing_store())
    typer.echo(result.model_dump_json(indent=2))
    if not result.reproduced:
        raise typer.Exit(code=1)


_DAYS = re.compile(r"^(\d{1,6})d$")


def days_in(duration: str) -> int:
    """`90d` → 90; anything else, or more than MAX_RETENTION_DAYS, is one operator line (exit 2)."""
    found = _DAYS.match(duration.strip())
    if found is None:
        raise ConfigurationError(
            "--older-than", f"{duration!r} is not a number of days; write e.g. 90d (0d: all)"
        )
    days = int(found[1])
    if days > MAX_RETENTION_DAYS:
        raise ConfigurationError("--older-than", f"is at most {MAX_RETENTION_DAYS}d (100 years)")
    return days


def prune_lines(report: PruneReport) -> list[str]:
    """What a prune removed (or would), for people; --json prints the report itself."""
    verb = "would prune" if report.dry_run else "pruned"
    lines = [
        f"{verb} {report.jobs_pruned} finished jobs created before {report.cutoff:%Y-%m-%d %H:%M} "
        f"UTC ({report.backend}) in {report.seconds:.2f} s",
        f"  partitions dropped whole: {', '.join(report.partitions_dropped) or 'none'}"
        f" ({report.jobs_in_dropped_partitions} jobs)",
        f"  deleted in batches: {report.jobs_deleted} jobs, "
        f"{report.webhook_deliveries_deleted} settled webhook deliveries",
    ]
    if report.vacuum == "off":
        lines.append(
            "  note: this SQLite database was made without incremental auto-vacuum, so the "
            "file keeps its size; run once with --vacuum to convert it (a full VACUUM)"
        )
    return lines


@jobs_cli.command("prune")
def jobs_prune(
    older_than: Annotated[
        str, typer.Option("--older-than", help="Age in days, e.g. 90d; 0d: every finished job.")
    ],
    dry_run: Annotated[bool, typer.Option(help="Count what would go; change nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as JSON.")] = False,
    vacuum: Annotated[
        bool,
        typer.Option(help="SQLite: convert to incremental auto-vacuum with a full VACUUM (once)."),
    ] = False,
) -> None:
    """Delete finished jobs older than the age (pending ones stay), after a signed checkpoint
    of the audit chain; PostgreSQL drops whole month partitions."""
    from app.audit.events import CLI
    from app.audit.retention import cutoff_for, prune_recorded

    cutoff = cutoff_for(days_in(older_than))

    async def work(runtime: Runtime) -> PruneReport:
        return await prune_recorded(
            runtime.pruner, runtime.admin_events, CLI, cutoff, dry_run=dry_run, vacuum=vacuum
        )

    report = run(work, existing_store())
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    for line in prune_lines(report):
        typer.echo(line)


def drift(
    limit: Annotated[int, typer.Option(min=1, help="How many of the newest jobs to check.")] = 1000,
) -> None:
    """Report sources (pattern files, templates) whose content changed since recent jobs used
    them; exit 1 on drift."""

    async def work(runtime: Runtime) -> DriftReport:
        return await runtime.replayer.drift_report(limit=limit)

    report = run(work, existing_store())
    typer.echo(report.model_dump_json(indent=2))
    if report.drifted:
        raise typer.Exit(code=1)
