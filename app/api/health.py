"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.api.deps import ServiceDep

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz", summary="The process is alive")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz", summary="Patterns load and providers are configured")
async def readyz(service: ServiceDep) -> JSONResponse:
    patterns = service.patterns
    missing_roots = patterns.missing_roots()
    problems = {name: p.problems for name, p in patterns.problems().items()}
    providers = service.providers.status()
    ready = not missing_roots and bool(patterns.names()) and any(providers.values())
    body = {
        "status": "ready" if ready else "not_ready",
        "patterns": {
            "count": len(patterns.names()),
            "missing_roots": missing_roots,
            "invalid": problems,
        },
        "providers": providers,
    }
    return JSONResponse(body, status_code=200 if ready else 503)
