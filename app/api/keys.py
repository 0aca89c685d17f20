"""API keys over HTTP (admin only): mint one with its limits (shown once), read, change, list and
revoke them. (`GET /v1/keys/me`, a key's own spend, is any key's and lives apart.)"""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminLogDep, AuthenticatorDep, IsAdmin
from app.api.errors import error_responses
from app.api.params import KeyIdPath
from app.api.paths import KEY_ID
from app.audit.events import key_created_detail, key_target
from app.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyUpdate

router = APIRouter(
    prefix="/v1/keys", tags=["keys"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)


class ApiKeyList(BaseModel):
    keys: list[ApiKeyInfo]


@router.post(
    "",
    operation_id="createApiKey",
    status_code=status.HTTP_201_CREATED,
    summary="Mint a key with its limits; the response is the only time the key itself is shown",
    responses=error_responses(422),
)
async def create_api_key(
    body: ApiKeyCreate, authenticator: AuthenticatorDep, admin_log: AdminLogDep
) -> ApiKeyCreated:
    created = await authenticator.create(body)
    await admin_log.record(
        "key.created", target=key_target(created.id), detail=key_created_detail(body)
    )
    return created


@router.get("", operation_id="listApiKeys", summary="Every key ever made (never the secrets)")
async def list_api_keys(authenticator: AuthenticatorDep) -> ApiKeyList:
    return ApiKeyList(keys=await authenticator.list_keys())


@router.get(
    KEY_ID,
    operation_id="getApiKey",
    summary="One key: its scope, team, limits and expiry (never the secret)",
    responses=error_responses(404),
)
async def get_api_key(key_id: KeyIdPath, authenticator: AuthenticatorDep) -> ApiKeyInfo:
    return await authenticator.get_key(key_id)


@router.patch(
    KEY_ID,
    operation_id="updateApiKey",
    summary="Change a key's name, limits, team or expiry: only the fields sent; null removes one",
    responses=error_responses(404, 422),
)
async def update_api_key(
    key_id: KeyIdPath, body: ApiKeyUpdate, authenticator: AuthenticatorDep, admin_log: AdminLogDep
) -> ApiKeyInfo:
    updated = await authenticator.update(key_id, body)
    await admin_log.record("key.updated", target=key_target(key_id), detail=body.changes())
    return updated


@router.delete(
    KEY_ID,
    operation_id="revokeApiKey",
    summary="Revoke a key: it stops working at once here, within the auth cache time elsewhere",
    responses=error_responses(404),
)
async def revoke_api_key(
    key_id: KeyIdPath, authenticator: AuthenticatorDep, admin_log: AdminLogDep
) -> ApiKeyInfo:
    revoked = await authenticator.revoke(key_id)
    await admin_log.record("key.revoked", target=key_target(key_id))
    return revoked
