"""The Jobs page (admin): find completions by status, pattern, model, key and time, open one to
read its redacted record, replay it, check its audit-chain entry, and reveal its raw prompt.

Everything goes through the `/v1` API as the signed-in key: the list is `GET /v1/jobs`, a job
`GET /v1/jobs/{id}`, a replay `POST /v1/jobs/{id}/replay` (whose reveal the API records in the
admin event log), the chain check `GET /v1/audit/verify`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter
from starlette.responses import HTMLResponse

from app.console.api import ApiError
from app.console.guard import AdminVisitDep, FormDep, Visit
from app.schemas.usage import JOB_STATUSES

router = APIRouter()

PAGE_SIZE = 50
FILTERS = ("status", "pattern", "model", "key", "since", "until")


def _job_path(job_id: str) -> str:
    """The API path of one job; the id is quoted whole, so it can never add a path or query."""
    return f"/v1/jobs/{quote(job_id, safe='')}"


@router.get("/jobs")
async def list_jobs(
    visit: AdminVisitDep,
    status: str = "",
    pattern: str = "",
    model: str = "",
    key: str = "",
    since: str = "",
    until: str = "",
    cursor: str = "",
) -> HTMLResponse:
    chosen = {"status": status, "pattern": pattern, "model": model, "key": key}
    chosen |= {"since": since, "until": until}
    filled = {name: value.strip() for name, value in chosen.items() if value.strip()}
    error: ApiError | None = None
    page: dict[str, Any] = {"jobs": [], "next_cursor": None}
    try:
        page = await visit.api.get("/v1/jobs", limit=PAGE_SIZE, cursor=cursor or None, **filled)
    except ApiError as exc:
        error = exc
    next_cursor = page.get("next_cursor")
    next_link = (
        "/console/jobs?" + urlencode({**filled, "cursor": next_cursor}) if next_cursor else None
    )
    return visit.render(
        "jobs.html",
        status=error.status if error else 200,
        filters=chosen,
        statuses=JOB_STATUSES,
        jobs=page["jobs"],
        paged=bool(cursor),
        next_link=next_link,
        error=error,
    )


async def _show(
    visit: Visit, job_id: str, job: dict[str, Any] | None = None, **shown: Any
) -> HTMLResponse:
    """The job's page, with whatever an action added (a replay, a chain check, an error)."""
    if job is None:
        try:
            job = await visit.api.get(_job_path(job_id))
        except ApiError as exc:
            return visit.render("job_missing.html", status=exc.status, job_id=job_id, error=exc)
    latency, upstream = job.get("latency_ms"), job.get("upstream_latency_ms")
    overhead = latency - upstream if latency is not None and upstream is not None else None
    action_error = shown.get("error")
    return visit.render(
        "job.html",
        status=action_error.status if isinstance(action_error, ApiError) else 200,
        job=job,
        overhead_ms=overhead,
        **shown,
    )


@router.get("/jobs/{job_id}")
async def show_job(visit: AdminVisitDep, job_id: str) -> HTMLResponse:
    return await _show(visit, job_id)


@router.get("/jobs/{job_id}/chain")
async def check_chain(visit: AdminVisitDep, job_id: str) -> HTMLResponse:
    """Verifies the job's own audit-chain entry (the one its record names) and every
    checkpoint's signature."""
    try:
        job = await visit.api.get(_job_path(job_id))
    except ApiError as exc:
        return visit.render("job_missing.html", status=exc.status, job_id=job_id, error=exc)
    seq = job.get("chain_seq")
    if seq is None:
        return await _show(visit, job_id, job)
    try:
        report = await visit.api.get("/v1/audit/verify", **{"from": seq, "to": seq})
    except ApiError as exc:
        return await _show(visit, job_id, job, error=exc, action="chain check")
    return await _show(visit, job_id, job, chain=report)


async def _replay(visit: Visit, job_id: str, *, reveal: bool) -> HTMLResponse:
    params = {"reveal": "true"} if reveal else None
    try:
        result = await visit.api.call("POST", _job_path(job_id) + "/replay", params=params)
    except ApiError as exc:
        return await _show(visit, job_id, error=exc, action="reveal" if reveal else "replay")
    return await _show(visit, job_id, replay=result)


@router.post("/jobs/{job_id}/replay")
async def replay_job(visit: AdminVisitDep, form: FormDep, job_id: str) -> HTMLResponse:
    return await _replay(visit, job_id, reveal=False)


@router.post("/jobs/{job_id}/reveal")
async def reveal_job(visit: AdminVisitDep, form: FormDep, job_id: str) -> HTMLResponse:
    """Replays with `reveal=true`: the raw prompt is on this answer only, and the API has
    recorded `job.replayed` with `reveal: true` under the signed-in key."""
    return await _replay(visit, job_id, reveal=True)
