"""A pattern's suite: its cases from its files, run through the caller's render and complete.

The CLI and the API hand in the service's own `render` (a dry run: no provider, no record) and,
for a live run, `complete` (a completion like any other: audited as a job). So the prompt a
case checks is exactly the one a completion of the same request sends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import ValidationError

from app.catalog import PatternCatalog
from app.concurrency.offload import off_loop
from app.errors import GenAIError, InvalidModel
from app.release.cases import load_pattern_cases
from app.release.report import SuiteReport
from app.release.runner import LiveAnswer, OnCase, case_request, render_through, run_cases
from app.schemas import CompletionEnvelope, RenderRequest, RenderResult, TemplateRef
from app.schemas.pattern_tests import PatternTestCase

RenderCall = Callable[[RenderRequest], Awaitable[RenderResult]]
CompleteCall = Callable[[RenderRequest], Awaitable[CompletionEnvelope]]
JUDGE_ANSWER = "answer"  # the variables a judge pattern renders with
JUDGE_CASE = "case"


def pattern_file(catalog: PatternCatalog, name: str) -> Path:
    """Where the catalog reads `name` from (PatternNotFound, InvalidPattern as it raises them)."""
    info = catalog.info(name)
    return Path(info.base_path) / f"{name}.md"


async def pattern_cases(catalog: PatternCatalog, name: str) -> list[PatternTestCase]:
    """The pattern's cases (InvalidPatternTests when a file cannot be read as cases)."""
    path = pattern_file(catalog, name)
    return await off_loop(lambda: load_pattern_cases(path))


async def _check_model(render: RenderCall, request: RenderRequest) -> None:
    """A model no provider or alias knows is the run's bad input (422 invalid_model), not a
    failure of every case: one render tells, and a case's own problem waits for its run."""
    try:
        await render(request)
    except InvalidModel:
        raise
    except (GenAIError, ValidationError):
        return


async def run_pattern_suite(
    name: str,
    cases: list[PatternTestCase],
    *,
    render: RenderCall,
    complete: CompleteCall | None = None,
    model: str | None = None,
    on_case: OnCase | None = None,
    template: TemplateRef | None = None,
) -> SuiteReport:
    """Run a pattern's cases (or, with `template`, a template version's, `name` naming the
    suite); `complete=None` is a non-live run."""
    pattern = None if template is not None else name

    async def answered(case: PatternTestCase) -> LiveAnswer:
        assert complete is not None
        envelope = await complete(
            case_request(case, pattern=pattern, template=template, model=model)
        )
        return LiveAnswer(text=envelope.response.text, job_id=envelope.job_id)

    async def judged(judge: str, case: PatternTestCase, answer: str) -> str:
        assert complete is not None
        variables = {JUDGE_ANSWER: answer, JUDGE_CASE: case.model_dump(mode="json")}
        request = RenderRequest(
            pattern_key=judge, variables=variables, user_prompt=answer, model=model
        )
        return (await complete(request)).response.text

    if model is not None and cases:
        first = case_request(cases[0], pattern=pattern, template=template, model=model)
        await _check_model(render, first)
    live = complete is not None
    return await run_cases(
        cases,
        render=render_through(render, pattern=pattern, template=template, model=model),
        answer=answered if live else None,
        judge=judged if live else None,
        suite=name,
        on_case=on_case,
    )
