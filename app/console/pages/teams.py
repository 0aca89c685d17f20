"""Teams on the keys page (admin): make a team, and change a team's limits on its own page, with
its keys and their shared spend, through `/v1/teams`."""

from __future__ import annotations

import re

from fastapi import APIRouter
from starlette.responses import RedirectResponse, Response

from app.console.api import ApiError
from app.console.guard import AdminVisitDep, FormDep, Refused, Visit
from app.console.pages.forms import said, status_of
from app.console.pages.keys import keys_page, statuses, team_spend
from app.console.pages.limits import FormProblem, Values, limit_values, limits_body, values_of
from app.schemas.keys import TEAM_NAME

router = APIRouter()

_TEAM = re.compile(TEAM_NAME)


def _checked(name: str) -> str:
    if not _TEAM.fullmatch(name):
        raise Refused(404, "No such team", "A team name is lowercase letters, digits, _ . -")
    return name


@router.post("/teams")
async def create_team(visit: AdminVisitDep, form: FormDep) -> Response:
    values = values_of(form)
    try:
        limits = {k: v for k, v in limits_body(values).items() if v not in (None, [])}
        body = {**limits, "name": values.get("name", "").strip()}
        created = await visit.api.call("POST", "/v1/teams", json=body)
    except (FormProblem, ApiError) as problem:
        return await keys_page(
            visit, team_form=values, team_error=said(problem), status=status_of(problem)
        )
    return RedirectResponse(f"/console/teams/{created['name']}", status_code=303)


async def _team_page(
    visit: Visit,
    name: str,
    *,
    form: Values | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    team = await visit.api.get(f"/v1/teams/{name}")
    members = [k for k in (await visit.api.get("/v1/keys"))["keys"] if k["team"] == name]
    # The team's counters are one; any unrevoked member's status reports them.
    live = [k for k in members if k["revoked_at"] is None][:1]
    spend = team_spend(await statuses(visit.api, live)).get(name)
    return visit.render(
        "team.html",
        status=status,
        team=team,
        members=members,
        spend_now=spend,
        form=form if form is not None else limit_values(team),
        error=error,
        saved=visit.request.query_params.get("saved") == "1" and error is None,
    )


@router.get("/teams/{name}")
async def team_page(visit: AdminVisitDep, name: str) -> Response:
    return await _team_page(visit, _checked(name))


@router.post("/teams/{name}")
async def edit_team(visit: AdminVisitDep, name: str, form: FormDep) -> Response:
    """Change a team's limits (PATCH): every field is sent, so an emptied one is removed."""
    _checked(name)
    values = values_of(form)
    try:
        await visit.api.call("PATCH", f"/v1/teams/{name}", json=limits_body(values))
    except (FormProblem, ApiError) as problem:
        return await _team_page(
            visit, name, form=values, error=said(problem), status=status_of(problem)
        )
    return RedirectResponse(f"/console/teams/{name}?saved=1", status_code=303)
