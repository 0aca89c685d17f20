"""The integrity page (admin): drift, the audit chain verified on request, the signing keys,
what waits to be written or linked, the counters an auditor watches and the admin event log.

Every figure comes from the `/v1` API as the signed-in key; verification runs only when asked
(a POST with the session's CSRF token), since it walks the chain."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from starlette.responses import HTMLResponse

from app.console.api import ApiError
from app.console.guard import AdminVisitDep, FormDep, Visit

router = APIRouter()
EVENTS_PAGE = 25


async def _section(visit: Visit, path: str, **params: Any) -> tuple[Any, ApiError | None]:
    """One API answer, or its error shown in its own section (the rest of the page stands)."""
    try:
        return await visit.api.get(path, **params), None
    except ApiError as exc:
        return None, exc


async def _page(
    visit: Visit, *, cursor: str = "", verification: Any = None, verify_error: Any = None
) -> HTMLResponse:
    audit, status_error = await _section(visit, "/v1/audit/status")
    drift, drift_error = await _section(visit, "/v1/drift")
    keys, keys_error = await _section(visit, "/v1/provenance/keys")
    events, events_error = await _section(
        visit, "/v1/audit/events", limit=EVENTS_PAGE, cursor=cursor or None
    )
    return visit.render(
        "integrity.html",
        audit=audit,
        status_error=status_error,
        drift=drift,
        drift_error=drift_error,
        keys=keys,
        keys_error=keys_error,
        events=events,
        events_error=events_error,
        cursor=cursor,
        verification=verification,
        verify_error=verify_error,
    )


@router.get("/integrity")
async def integrity_page(
    visit: AdminVisitDep, cursor: str = Query(default="", max_length=200)
) -> HTMLResponse:
    return await _page(visit, cursor=cursor)


@router.post("/integrity/verify")
async def verify_chain(visit: AdminVisitDep, form: FormDep) -> HTMLResponse:
    """Walk the chain now (from `from`, default its start) and show the report."""
    start = str(form.get("from") or "1")
    verification, error = await _section(
        visit, "/v1/audit/verify", **{"from": start if start.isdigit() else "1"}
    )
    return await _page(visit, verification=verification, verify_error=error)
