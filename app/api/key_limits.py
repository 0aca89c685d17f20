"""Where a key stands against its limits: its own (`/v1/keys/me`, any key) and anyone's (admin).

Registered before the key management routes, so `me` is never read as a key id.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from app.api.deps import AuthenticatorDep, CallerDep, CanComplete, IsAdmin, QuotasDep
from app.api.errors import error_responses
from app.api.paths import KEY_ID
from app.auth.authenticator import Authenticator
from app.errors import ApiKeyNotFound, Unauthenticated
from app.quotas.guard import QuotaGuard
from app.schemas import KeyStatus, Limits

router = APIRouter(prefix="/v1/keys", tags=["keys"])


async def _status(key_id: str, authenticator: Authenticator, quotas: QuotaGuard) -> KeyStatus:
    stored = await authenticator.repository.find(key_id)
    if stored is None:
        raise ApiKeyNotFound(key_id)
    info, team = stored.info, stored.team
    own = Limits(budgets=info.budgets, rpm=info.rpm, tpm=info.tpm)
    team_limits = None
    if team is not None:
        team_limits = await quotas.status("team", team.name, team)
    return KeyStatus(
        key=info,
        limits=await quotas.status("key", info.id, own),
        team=team,
        team_limits=team_limits,
    )


@router.get(
    "/me",
    operation_id="getOwnKeyStatus",
    summary="The calling key: its limits and its spend in the current windows, and its team's",
    dependencies=[CanComplete],
)
async def own_key_status(
    caller: CallerDep, authenticator: AuthenticatorDep, quotas: QuotasDep
) -> KeyStatus:
    if caller is None or caller.key_id is None:
        raise Unauthenticated("Auth is disabled (GENAI_AUTH_DISABLED): no key is calling.")
    return await _status(caller.key_id, authenticator, quotas)


@router.get(
    KEY_ID + "/limits",
    operation_id="getKeyStatus",
    summary="Any key's limits and spend in the current windows, and its team's (admin)",
    dependencies=[IsAdmin],
    responses=error_responses(404),
)
async def key_status(
    key_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")],
    authenticator: AuthenticatorDep,
    quotas: QuotasDep,
) -> KeyStatus:
    return await _status(key_id, authenticator, quotas)
