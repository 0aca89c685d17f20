"""GET /v1/patterns and /v1/patterns/{name}: what the catalog offers."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from app.api.deps import CanComplete, ServiceDep
from app.api.errors import error_responses
from app.catalog import Pattern
from app.schemas import PatternDetail, PatternSummary

router = APIRouter(prefix="/v1/patterns", tags=["patterns"], dependencies=[CanComplete])


class PatternList(BaseModel):
    patterns: list[PatternSummary]


def _summary(pattern: Pattern) -> dict[str, object]:
    meta = pattern.meta
    return {
        "name": pattern.name,
        "description": meta.description,
        "tags": meta.tags,
        "model_hint": meta.model_hint,
        "content_hash": pattern.content_hash,
    }


@router.get("", operation_id="listPatterns", summary="List the loadable patterns")
async def list_patterns(service: ServiceDep) -> PatternList:
    return PatternList(
        patterns=[PatternSummary.model_validate(_summary(p)) for p in service.patterns.loadable()]
    )


@router.get(
    "/{name:path}",
    operation_id="getPattern",
    summary="One pattern's metadata, variables, defaults and content hash",
    responses=error_responses(404, 422),
)
async def get_pattern(name: str, service: ServiceDep) -> PatternDetail:
    pattern = service.patterns.get(name)
    documented = pattern.meta.variables or {}
    return PatternDetail.model_validate(
        {
            **_summary(pattern),
            "base_path": pattern.base_path,
            "variables": {v: documented.get(v) for v in sorted(pattern.referenced)},
            "required_variables": pattern.required_variables,
            "defaults": pattern.meta.defaults,
            "params": pattern.meta.params,
        }
    )
