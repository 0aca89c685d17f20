"""Named dependencies keep route signatures short.

They are `async def` on purpose: FastAPI runs plain `def` dependencies in its thread pool, a
needless hop per request for what are attribute lookups.
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Request

from app.audit.replay import Auditor
from app.runtime import Runtime
from app.service import GenAIService
from app.snippets import SnippetLibrary
from app.store.templates import TemplateRepository


def _runtime(request: Request) -> Runtime:
    return cast(Runtime, request.app.state.runtime)


async def get_runtime(request: Request) -> Runtime:
    return _runtime(request)


async def get_service(request: Request) -> GenAIService:
    return _runtime(request).service


async def get_auditor(request: Request) -> Auditor:
    return _runtime(request).auditor


async def get_templates(request: Request) -> TemplateRepository:
    return _runtime(request).service.templates


async def get_snippets(request: Request) -> SnippetLibrary:
    return _runtime(request).snippets


async def get_request_id(request: Request) -> str | None:
    return cast(str | None, request.scope.get("state", {}).get("request_id"))


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
ServiceDep = Annotated[GenAIService, Depends(get_service)]
AuditorDep = Annotated[Auditor, Depends(get_auditor)]
TemplatesDep = Annotated[TemplateRepository, Depends(get_templates)]
SnippetsDep = Annotated[SnippetLibrary, Depends(get_snippets)]
RequestIdDep = Annotated[str | None, Depends(get_request_id)]
