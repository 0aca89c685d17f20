"""Named dependencies keep route signatures short."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from app.audit.replay import Auditor
from app.runtime import Runtime
from app.service import GenAIService
from app.snippets import SnippetLibrary
from app.store.templates import TemplateRepository


def get_runtime(request: Request) -> Runtime:
    return cast(Runtime, request.app.state.runtime)


def get_service(request: Request) -> GenAIService:
    return get_runtime(request).service


def get_auditor(request: Request) -> Auditor:
    return get_runtime(request).auditor


def get_templates(request: Request) -> TemplateRepository:
    return get_runtime(request).service.templates


def get_snippets(request: Request) -> SnippetLibrary:
    return get_runtime(request).snippets


def get_request_id(request: Request) -> str | None:
    return cast(str | None, request.scope.get("state", {}).get("request_id"))


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ServiceDep = Annotated[GenAIService, Depends(get_service)]
AuditorDep = Annotated[Auditor, Depends(get_auditor)]
TemplatesDep = Annotated[TemplateRepository, Depends(get_templates)]
SnippetsDep = Annotated[SnippetLibrary, Depends(get_snippets)]
RequestIdDep = Annotated[str | None, Depends(get_request_id)]
