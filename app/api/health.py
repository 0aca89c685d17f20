"""Liveness, readiness and metrics for operators."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.api.deps import RuntimeDep
from app.errors import StoreUnavailable
from app.runtime import Runtime

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _auth_status(runtime: Runtime) -> dict[str, object]:
    if not runtime.settings.auth_disabled:
        return {"enabled": True}
    return {
        "enabled": False,
        "warning": "GENAI_AUTH_DISABLED is set: every /v1 route answers anyone as admin.",
    }


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
        # Bounded: a locked table or a silent server makes the probe fail, never hang.
        async with asyncio.timeout(runtime.settings.database_lock_timeout_seconds):
            schema_current: bool | None = await runtime.database.schema_is_current()
            await runtime.replayer.jobs.ping()
        reachable = True
    except (StoreUnavailable, TimeoutError):
        schema_current, reachable = None, False
    stuck = runtime.writer.stuck
    ready = (
        not stuck
        and not missing_roots
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
        "auth": _auth_status(runtime),
        "database": {
            "reachable": reachable,
            "schema_current": schema_current,
            "audit_backlog": runtime.writer.backlog,
            # Queued audit records have not drained for GENAI_AUDIT__STUCK_AFTER_SECONDS.
            "audit_backlog_stuck": stuck,
        },
    }
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get(
    "/metrics", operation_id="metrics", summary="Prometheus metrics", response_class=Response
)
async def metrics(runtime: RuntimeDep) -> Response:
    runtime.metrics.audit_backlog.set(runtime.writer.backlog)
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)
