"""GET /v1/patterns and /v1/patterns/{name}: what the catalog offers; POST
/v1/patterns/{name}/test: its test cases, run (app/release)."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import (
    CallerDep,
    CanComplete,
    CatalogDep,
    CompleterDep,
    RendererDep,
    ServiceDep,
)
from app.api.errors import error_responses
from app.api.paths import PATTERN_NAME, PATTERN_TEST_SUFFIX
from app.catalog import PatternCatalog, PatternInfo
from app.catalog.pattern import split_front_matter
from app.concurrency.offload import off_loop
from app.errors import InvalidPattern, InvalidPatternTests
from app.release import PatternTestRun, SuiteReport, pattern_cases, run_pattern_suite
from app.release.suite import pattern_file
from app.schemas import PatternDetail, PatternSummary, RenderRequest, RenderResult

router = APIRouter(
    prefix="/v1/patterns",
    tags=["patterns"],
    dependencies=[CanComplete],
    route_class=OffLoopBodyRoute,
)


class PatternList(BaseModel):
    patterns: list[PatternSummary]


def _summary(pattern: PatternInfo) -> dict[str, object]:
    meta = pattern.meta
    return {
        "name": pattern.name,
        "base_path": pattern.base_path,
        "description": meta.description,
        "tags": meta.tags,
        "model_hint": meta.model_hint,
        "content_hash": pattern.content_hash,
    }


def _listed(entry: PatternInfo | InvalidPattern) -> PatternSummary:
    if isinstance(entry, InvalidPattern):  # listed with its problems, not silently dropped
        return PatternSummary(
            name=entry.name,
            description="",
            tags=[],
            model_hint=None,
            content_hash=None,
            valid=False,
            problems=entry.problems,
        )
    return PatternSummary.model_validate(_summary(entry))


@router.get(
    "",
    operation_id="listPatterns",
    summary="List every pattern file; one that fails to load has valid: false and its problems",
)
async def list_patterns(catalog: CatalogDep) -> PatternList:
    return PatternList(patterns=[_listed(entry) for entry in catalog.listing()])


def _file_text(catalog: PatternCatalog, name: str) -> tuple[dict[str, Any], str]:
    """The file's front-matter and body as written (blocking: read off the event loop)."""
    text = pattern_file(catalog, name).read_text(encoding="utf-8")
    return split_front_matter(name, text)


@router.get(
    PATTERN_NAME,
    operation_id="getPattern",
    summary="One pattern's metadata, variables, defaults, content hash, front-matter, body "
    "and test cases",
    responses=error_responses(404, 422),
)
async def get_pattern(name: str, catalog: CatalogDep, renderer: RendererDep) -> PatternDetail:
    # The first look at a pattern compiles it: a render thread's work, not the event loop's.
    pattern = await renderer.run(name, functools.partial(catalog.get, name))
    documented = pattern.meta.variables or {}
    front_matter, template = await off_loop(functools.partial(_file_text, catalog, name))
    try:
        tests, test_problems = await pattern_cases(catalog, name), []
    except InvalidPatternTests as exc:  # shown beside the pattern, which itself still works
        tests, test_problems = [], exc.problems
    return PatternDetail.model_validate(
        {
            **_summary(pattern),
            "variables": {v: documented.get(v) for v in sorted(pattern.referenced)},
            "required_variables": pattern.required_variables,
            "defaults": pattern.meta.defaults,
            "params": pattern.meta.params,
            "fallbacks": pattern.meta.fallbacks,
            "cache": pattern.meta.cache,
            "front_matter": front_matter,
            "template": template,
            "tests": tests,
            "test_problems": test_problems,
        }
    )


@router.post(
    "/{name:path}" + PATTERN_TEST_SUFFIX,
    operation_id="testPattern",
    summary="Run a pattern's test cases: its rendered prompts, and with live: true its answers",
    responses=error_responses(404, 422),
)
async def test_pattern(
    name: str,
    body: PatternTestRun,
    catalog: CatalogDep,
    service: ServiceDep,
    caller: CallerDep,
    completer: CompleterDep,
) -> SuiteReport:
    """A pattern without cases answers 200 with `total: 0`. A live run completes each case that
    asserts an answer like any completion (audited, under the key's limits); a case whose
    render or answer fails is a failed case with the error's message."""
    cases = await pattern_cases(catalog, name)

    async def render(request: RenderRequest) -> RenderResult:
        return await service.render(request, caller)

    return await run_pattern_suite(
        name,
        cases,
        render=render,
        complete=completer.complete if body.live else None,
        model=body.model,
    )
