"""Teams over HTTP (admin only): their keys share the team's budgets and rate limits."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminLogDep, AuthenticatorDep, IsAdmin, TeamsDep
from app.api.errors import error_responses
from app.api.params import TeamPath
from app.audit.events import team_target
from app.schemas import TeamCreate, TeamInfo, TeamUpdate

router = APIRouter(
    prefix="/v1/teams", tags=["teams"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)


class TeamList(BaseModel):
    teams: list[TeamInfo]


@router.post(
    "",
    operation_id="createTeam",
    status_code=status.HTTP_201_CREATED,
    summary="Make a team; keys join it with `team` on create or PATCH",
    responses=error_responses(409, 422),
)
async def create_team(body: TeamCreate, teams: TeamsDep, admin_log: AdminLogDep) -> TeamInfo:
    created = await teams.add(body)
    await admin_log.record("team.created", target=team_target(body.name), detail=body.changes())
    return created


@router.get("", operation_id="listTeams", summary="Every team, by name")
async def list_teams(teams: TeamsDep) -> TeamList:
    return TeamList(teams=await teams.list())


@router.get("/{name}", operation_id="getTeam", summary="One team", responses=error_responses(404))
async def get_team(name: TeamPath, teams: TeamsDep) -> TeamInfo:
    return await teams.get(name)


@router.patch(
    "/{name}",
    operation_id="updateTeam",
    summary="Change a team's limits: only the fields sent; null removes one",
    responses=error_responses(404, 422),
)
async def update_team(
    name: TeamPath,
    body: TeamUpdate,
    teams: TeamsDep,
    authenticator: AuthenticatorDep,
    admin_log: AdminLogDep,
) -> TeamInfo:
    updated = await teams.update(name, body)
    await admin_log.record("team.updated", target=team_target(name), detail=body.changes())
    # Cached principals carry the team's limits: its keys are looked up again here at once
    # (other processes within GENAI_AUTH_CACHE_SECONDS).
    authenticator.forget_team(name)
    return updated


@router.delete(
    "/{name}",
    operation_id="deleteTeam",
    summary="Delete a team with no unrevoked keys (409 team_in_use otherwise)",
    responses=error_responses(404, 409),
)
async def delete_team(name: TeamPath, teams: TeamsDep, admin_log: AdminLogDep) -> TeamInfo:
    deleted = await teams.delete(name)
    await admin_log.record("team.deleted", target=team_target(name))
    return deleted
