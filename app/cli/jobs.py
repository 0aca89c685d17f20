"""`genai jobs` and `genai drift`: the audit trail from the command line, as the API serves it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from sqlalchemy.engine import make_url

from app.audit.events import CLI, job_target
from app.cli.runner import run
from app.config import Settings, get_settings
from app.errors import ConfigurationError
from app.schemas import DriftReport, JobRecord, JobStatus, ReplayResult
from app.store.db import DATABASE_URL_SETTING

if TYPE_CHECKING:
    from app.runtime import Runtime

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
