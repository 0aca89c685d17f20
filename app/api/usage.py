"""Usage and cost over HTTP: what keys, teams, patterns and models spent in a window.

An admin key sees every job. A `complete` key sees its own key's jobs only: without a `key`
filter the report is narrowed to it, and a filter naming another key is refused (403) rather
than quietly answered with the caller's own figures under another key's name.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.body import OffLoopBodyRoute
from app.api.deps import AuditTrailDep, CallerDep, CanComplete
from app.api.errors import error_responses
from app.auth.keys import Scope
from app.auth.principal import Principal
from app.errors import Forbidden
from app.schemas import UsageQuery, UsageReport

router = APIRouter(
    prefix="/v1", tags=["usage"], dependencies=[CanComplete], route_class=OffLoopBodyRoute
)


def visible(query: UsageQuery, caller: Principal | None) -> UsageQuery:
    """The query as this caller may ask it: an admin (or auth disabled) as asked, a `complete`
    key narrowed to its own jobs."""
    if caller is None or caller.scope is Scope.admin:
        return query
    if query.key is not None and query.key != caller.key_id:
        raise Forbidden(
            "A 'complete' key may read its own usage only; leave out `key`, or ask with an "
            "admin key."
        )
    return query.model_copy(update={"key": caller.key_id})


@router.get(
    "/usage",
    operation_id="getUsage",
    summary="Requests, tokens and cost in a window, grouped by key, team, pattern, model, "
    "provider or day",
    responses=error_responses(403, 422),
)
async def get_usage(
    query: Annotated[UsageQuery, Query()], trail: AuditTrailDep, caller: CallerDep
) -> UsageReport:
    return await trail.reader.usage(visible(query, caller))
