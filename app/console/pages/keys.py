"""Console page 5, keys and teams (admin): every key with its spend against its budgets, minting
a key (shown once, in the answer to the form and nowhere else), changing limits and revoking,
all through `/v1/keys` and `/v1/teams`."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import APIRouter
from starlette.responses import RedirectResponse, Response

from app.console.api import ApiError, ConsoleApi
from app.console.guard import AdminVisitDep, FormDep, Refused, Visit
from app.console.pages.forms import said, status_of
from app.console.pages.limits import FormProblem, Values, key_body, key_values, values_of

router = APIRouter()

_KEY_ID = re.compile(r"[0-9a-f]{16}")


def checked_key_id(key_id: str) -> str:
    """Only a key id reaches the API path."""
    if not _KEY_ID.fullmatch(key_id):
        raise Refused(404, "No such key", "A key id is 16 hexadecimal digits.")
    return key_id


async def statuses(api: ConsoleApi, keys: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each unrevoked key's limits and spend now (`/v1/keys/{id}/limits`), by key id."""

    async def one(key_id: str) -> tuple[str, dict[str, Any] | None]:
        try:
            return key_id, await api.get(f"/v1/keys/{key_id}/limits")
        except ApiError:
            return key_id, None  # revoked or gone since the listing: shown without spend

    found = await asyncio.gather(*(one(k["id"]) for k in keys if k["revoked_at"] is None))
    return {key_id: status for key_id, status in found if status is not None}


def team_spend(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """A team's spend, as any of its keys' statuses reports it (the same team counters)."""
    spend: dict[str, dict[str, Any]] = {}
    for status in found.values():
        team = status.get("team")
        if team is not None and status.get("team_limits") is not None:
            spend.setdefault(team["name"], status["team_limits"])
    return spend


async def keys_page(
    visit: Visit,
    *,
    key_form: Values | None = None,
    key_error: str | None = None,
    team_form: Values | None = None,
    team_error: str | None = None,
    status: int = 200,
) -> Response:
    """The list page; a refused create form comes back filled in, with the API's reason."""
    keys = (await visit.api.get("/v1/keys"))["keys"]
    teams = (await visit.api.get("/v1/teams"))["teams"]
    found = await statuses(visit.api, keys)
    keys.sort(key=lambda k: (k["revoked_at"] is not None, k["created_at"]))  # active first
    return visit.render(
        "keys.html",
        status=status,
        keys=keys,
        key_spend={key_id: status["limits"] for key_id, status in found.items()},
        teams=teams,
        team_spend=team_spend(found),
        key_form=key_form or {"scope": "complete"},
        key_error=key_error,
        team_form=team_form or {},
        team_error=team_error,
        revoked=visit.request.query_params.get("revoked", ""),
    )


@router.get("/keys")
async def key_list(visit: AdminVisitDep) -> Response:
    return await keys_page(visit)


@router.post("/keys")
async def create_key(visit: AdminVisitDep, form: FormDep) -> Response:
    """Mint a key and show it in this answer only: no redirect, no URL, no storage carries it."""
    values = values_of(form)
    try:
        body = {
            **{k: v for k, v in key_body(values).items() if v not in (None, [])},
            "name": values.get("name", "").strip() or "unnamed",
            "scope": values.get("scope", ""),
        }
        created = await visit.api.call("POST", "/v1/keys", json=body)
    except (FormProblem, ApiError) as problem:
        return await keys_page(
            visit, key_form=values, key_error=said(problem), status=status_of(problem)
        )
    return visit.render("key_created.html", status=201, created=created)


async def _key_page(
    visit: Visit,
    key_id: str,
    *,
    form: Values | None = None,
    error: str | None = None,
    status: int = 200,
) -> Response:
    key = await visit.api.get(f"/v1/keys/{key_id}")
    limits = None
    if key["revoked_at"] is None:
        limits = await visit.api.get(f"/v1/keys/{key_id}/limits")
    teams = (await visit.api.get("/v1/teams"))["teams"]
    return visit.render(
        "key.html",
        status=status,
        key=key,
        limits=limits,
        teams=teams,
        form=form if form is not None else key_values(key),
        error=error,
        saved=visit.request.query_params.get("saved") == "1" and error is None,
    )


@router.get("/keys/{key_id}")
async def key_page(visit: AdminVisitDep, key_id: str) -> Response:
    return await _key_page(visit, checked_key_id(key_id))


@router.post("/keys/{key_id}")
async def edit_key(visit: AdminVisitDep, key_id: str, form: FormDep) -> Response:
    """Change a key's limits (PATCH): every field is sent, so an emptied one is removed."""
    checked_key_id(key_id)
    values = values_of(form)
    try:
        body = {**key_body(values), "name": values.get("name", "").strip()}
        await visit.api.call("PATCH", f"/v1/keys/{key_id}", json=body)
    except (FormProblem, ApiError) as problem:
        return await _key_page(
            visit, key_id, form=values, error=said(problem), status=status_of(problem)
        )
    return RedirectResponse(f"/console/keys/{key_id}?saved=1", status_code=303)


@router.post("/keys/{key_id}/revoke")
async def revoke_key(visit: AdminVisitDep, key_id: str, form: FormDep) -> Response:
    """First a page asking to confirm; the confirmed form revokes (DELETE) at once."""
    checked_key_id(key_id)
    if form.get("confirm") != "yes":
        key = await visit.api.get(f"/v1/keys/{key_id}")
        return visit.render("key_revoke.html", key=key)
    try:
        await visit.api.call("DELETE", f"/v1/keys/{key_id}")
    except ApiError as problem:
        return await _key_page(visit, key_id, error=said(problem), status=problem.status)
    return RedirectResponse(f"/console/keys?revoked={key_id}", status_code=303)
