"""Named dependencies keep route signatures short."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from app.service import GenAIService


def get_service(request: Request) -> GenAIService:
    return cast(GenAIService, request.app.state.service)


def get_request_id(request: Request) -> str | None:
    return cast(str | None, request.scope.get("state", {}).get("request_id"))


ServiceDep = Annotated[GenAIService, Depends(get_service)]
RequestIdDep = Annotated[str | None, Depends(get_request_id)]
