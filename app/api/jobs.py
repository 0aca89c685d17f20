"""The audit trail over HTTP: the job list, a job's record, its replay, and drift across recent
jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminLogDep, AuditTrailDep, IsAdmin, ReplayerDep
from app.api.errors import error_responses
from app.api.params import JobIdPath
from app.audit.events import job_target
from app.schemas import DriftReport, JobPage, JobRecord, JobStatus, ReplayResult
from app.schemas.usage import KEY_ID, PATTERN_NAME, PROVIDER_MODEL, Instant
from app.store.jobs import JobFilter

router = APIRouter(
    prefix="/v1", tags=["jobs"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)


MAX_PAGE = 200


@router.get(
    "/jobs",
    operation_id="listJobs",
    summary="Job summaries, newest first: when, status, pattern, model, key, tokens, cost, "
    "latency (never the prompt or the answer)",
    description="Pages by keyset: pass `next_cursor` back as `cursor`; jobs recorded meanwhile "
    "never shift or repeat a page. `since` is inclusive, `until` exclusive.",
    responses=error_responses(422),
)
async def list_jobs(
    trail: AuditTrailDep,
    status: Annotated[JobStatus | None, Query(description="Only jobs that ended so.")] = None,
    pattern: Annotated[
        str | None,
        Query(pattern=PATTERN_NAME, description="Only this pattern's or template's jobs."),
    ] = None,
    model: Annotated[
        str | None,
        Query(pattern=PROVIDER_MODEL, description="Only this model, written `provider/model`."),
    ] = None,
    key: Annotated[str | None, Query(pattern=KEY_ID, description="Only this key's jobs.")] = None,
    since: Annotated[
        Instant,
        Query(description="From (inclusive): an ISO instant (no offset: UTC) or date (00:00 UTC)."),
    ] = None,
    until: Annotated[Instant, Query(description="Before (exclusive): the same forms.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[
        str | None, Query(max_length=200, description="`next_cursor` of the previous page.")
    ] = None,
) -> JobPage:
    provider, _, model_name = model.partition("/") if model is not None else (None, "", None)
    where = JobFilter(
        status=status,
        source_name=pattern,
        provider=provider,
        model=model_name,
        key_id=key,
        since=since,
        until=until,
    )
    return await trail.reader.page(where, limit=limit, cursor=cursor)


@router.get(
    "/jobs/{job_id}",
    operation_id="getJob",
    summary="The stored (redacted) audit record of one completion",
    responses=error_responses(404),
)
async def get_job(job_id: JobIdPath, trail: AuditTrailDep) -> JobRecord:
    return await trail.reader.get(job_id)


@router.post(
    "/jobs/{job_id}/replay",
    operation_id="replayJob",
    summary="Rebuild the job's exact prompt and prove it against the stored hashes",
    responses=error_responses(404, 409),
)
async def replay_job(
    job_id: JobIdPath,
    replayer: ReplayerDep,
    admin_log: AdminLogDep,
    reveal: bool = Query(
        default=False,
        description="Return the raw prompt instead of the redacted one; logged and counted.",
    ),
) -> ReplayResult:
    result = await replayer.replay(job_id, reveal=reveal)
    # The flag, never the revealed prompt: the log says who saw the raw text, not the text.
    await admin_log.record("job.replayed", target=job_target(job_id), detail={"reveal": reveal})
    return result


@router.get(
    "/drift",
    operation_id="checkDrift",
    summary="Sources (pattern files, templates) whose content changed since recent jobs used them",
)
async def check_drift(
    replayer: ReplayerDep, limit: int = Query(default=1000, ge=1, le=100_000)
) -> DriftReport:
    return await replayer.drift_report(limit=limit)
