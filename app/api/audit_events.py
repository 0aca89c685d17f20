"""The admin event log over HTTP (admin only): who did what, to what, when, from where."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminEventsDep, IsAdmin
from app.api.errors import error_responses
from app.schemas import AdminEventPage
from app.schemas.usage import Instant  # the one rule for instants in a query string
from app.store.events import EventFilter

router = APIRouter(
    prefix="/v1/audit", tags=["audit"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)

ACTION = r"^[a-z_]+(\.[a-z_]+)+$"
MAX_PAGE = 1000


@router.get(
    "/events",
    operation_id="listAdminEvents",
    summary="Admin actions, newest first: keys, teams, templates, labels, snippets, replays "
    "with reveal, webhook retries, retention runs",
    description="Pages by keyset: pass `next_cursor` back as `cursor`; events recorded "
    "meanwhile never shift or repeat a page. `since` is inclusive, `until` exclusive.",
    responses=error_responses(422),
)
async def list_admin_events(
    events: AdminEventsDep,
    action: Annotated[
        str | None,
        Query(max_length=64, pattern=ACTION, description="Only this action, e.g. key.created."),
    ] = None,
    actor_key_id: Annotated[
        str | None, Query(max_length=64, description="Only actions by this key.")
    ] = None,
    target: Annotated[
        str | None,
        Query(
            max_length=300,
            description="Only actions on this, e.g. key:<id>, "
            "template:<name>/<role>@<label>, snippet:<identifier>.",
        ),
    ] = None,
    since: Annotated[
        Instant,
        Query(description="From (inclusive): an ISO instant (no offset: UTC) or date (00:00 UTC)."),
    ] = None,
    until: Annotated[Instant, Query(description="Before (exclusive): the same forms.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    cursor: Annotated[
        str | None, Query(max_length=200, description="`next_cursor` of the previous page.")
    ] = None,
) -> AdminEventPage:
    where = EventFilter(
        action=action, actor_key_id=actor_key_id, target=target, since=since, until=until
    )
    return await events.page(where, limit=limit, cursor=cursor)
