"""API keys over HTTP (admin only): mint one (shown once), list them, revoke one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, status
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import AuthenticatorDep, IsAdmin
from app.api.errors import error_responses
from app.auth.keys import Scope
from app.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo

router = APIRouter(
    prefix="/v1/keys", tags=["keys"], dependencies=[IsAdmin], route_class=OffLoopBodyRoute
)


class ApiKeyList(BaseModel):
    keys: list[ApiKeyInfo]


@router.post(
    "",
    operation_id="createApiKey",
    status_code=status.HTTP_201_CREATED,
    summary="Mint a key; the response is the only time the key itself is shown",
    responses=error_responses(422),
)
async def create_api_key(body: ApiKeyCreate, authenticator: AuthenticatorDep) -> ApiKeyCreated:
    return await authenticator.create(scope=Scope(body.scope), name=body.name)


@router.get("", operation_id="listApiKeys", summary="Every key ever made (never the secrets)")
async def list_api_keys(authenticator: AuthenticatorDep) -> ApiKeyList:
    return ApiKeyList(keys=await authenticator.list_keys())


@router.delete(
    "/{key_id}",
    operation_id="revokeApiKey",
    summary="Revoke a key: it stops working at once here, within the auth cache time elsewhere",
    responses=error_responses(404),
)
async def revoke_api_key(
    key_id: Annotated[str, Path(pattern=r"^[0-9a-f]{16}$")], authenticator: AuthenticatorDep
) -> ApiKeyInfo:
    return await authenticator.revoke(key_id)
