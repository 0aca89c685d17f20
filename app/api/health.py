"""Liveness, readiness and metrics for operators."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy.exc import SQLAlchemyError

from app.api.deps import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Patterns load, the audit store is reachable and migrated, a provider is configured",
)
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    patterns = runtime.service.patterns
    missing_roots = patterns.missing_roots()
    problems = {name: p.problems for name, p in patterns.problems().items()}
    providers = runtime.service.providers.status()
    try:
        schema_current: bool | None = await runtime.database.schema_is_current()
        await runtime.auditor.jobs.ping()
        reachable = True
    except (SQLAlchemyError, OSError):
        schema_current, reachable = None, False
    ready = (
        not missing_roots
        and bool(patterns.names())
        and any(providers.values())
        and reachable
        and bool(schema_current)
    )
    body = {
        "status": "ready" if ready else "not_ready",
        "patterns": {
            "count": len(patterns.names()),
            "missing_roots": missing_roots,
            "invalid": problems,
        },
        "providers": providers,
        "database": {
            "reachable": reachable,
            "schema_current": schema_current,
            "audit_backlog": runtime.writer.backlog,
        },
    }
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get(
    "/metrics", operation_id="metrics", summary="Prometheus metrics", response_class=Response
)
async def metrics(runtime: RuntimeDep) -> Response:
    runtime.metrics.audit_backlog.set(runtime.writer.backlog)
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
