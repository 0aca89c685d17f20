"""Liveness, readiness and metrics for operators."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.deps import AuditBacklogDep, MetricsDep, ReadinessDep
from app.observability.readiness import ReadinessReport

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Patterns load, the audit store is reachable and migrated, a provider is configured",
    responses={
        200: {"model": ReadinessReport, "description": "Ready"},
        503: {"model": ReadinessReport, "description": "Not ready: the body says why"},
    },
)
async def readyz(readiness: ReadinessDep) -> JSONResponse:
    report = await readiness.check()
    return JSONResponse(report.model_dump(mode="json"), status_code=200 if report.ready else 503)


@router.get(
    "/metrics", operation_id="metrics", summary="Prometheus metrics", response_class=Response
)
async def metrics(metrics: MetricsDep, audit: AuditBacklogDep) -> Response:
    metrics.audit_backlog.set(audit.backlog)
    # With several workers a scrape reads every worker's metric files: off the loop.
    return Response(await asyncio.to_thread(metrics.exposition), media_type=CONTENT_TYPE_LATEST)
