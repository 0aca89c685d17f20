"""The audit trail over HTTP: a job's record, its replay, and drift across recent jobs."""

from __future__ import annotations

from fastapi import APIRouter, Query

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminLogDep, AuditTrailDep, IsAdmin, ReplayerDep
from app.api.errors import error_responses
from app.api.params import JobIdPath
from app.audit.events import job_target
from app.schemas import DriftReport, JobRecord, ReplayResult

router = APIRouter(
    prefix="/v1", tags=["jobs"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)


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
