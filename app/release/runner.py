"""Running cases: render each, check its prompt, and with a live answer check that too.

`run_cases` knows nothing of pattern files: it is handed a way to render a case and, for a live
run, a way to answer one (and to ask a judge). A pattern's suite wires these to the service
(app/release/suite.py); a database template version's release gate can wire them to its own
version the same way (`case_request(case, template=…)`) and read `failure_messages()`.
A case whose render or answer fails is a failed case with the error's message, never a crash.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from app.errors import GenAIError
from app.release.assertions import (
    check_answer,
    check_prompt,
    check_verdict,
    has_answer_checks,
    prompt_text,
)
from app.release.report import CaseReport, SuiteReport
from app.schemas import RenderRequest, RenderResult, TemplateRef
from app.schemas.pattern_tests import PatternTestCase

NOT_LIVE = "answer assertions skipped: they run with --live (live: true)"


@dataclass(frozen=True, slots=True)
class LiveAnswer:
    """A live run's answer to a case, and the audited job that produced it."""

    text: str
    job_id: str | None = None


Render = Callable[[PatternTestCase], Awaitable[str]]
"""A case's rendered prompt text (app.release.assertions.prompt_text of what is sent)."""
Answer = Callable[[PatternTestCase], Awaitable[LiveAnswer]]
Judge = Callable[[str, PatternTestCase, str], Awaitable[str]]
"""(judge pattern, case, answer) → the judge's own answer; PASS… passes."""
OnCase = Callable[[CaseReport], None]


def case_request(
    case: PatternTestCase,
    *,
    pattern: str | None = None,
    template: TemplateRef | None = None,
    model: str | None = None,
) -> RenderRequest:
    """The request a case stands for: its variables and user prompt, for a pattern or template."""
    return RenderRequest(
        pattern_key=pattern,
        template=template,
        variables=case.variables,
        user_prompt=case.user_prompt,
        model=model,
    )


def render_through(
    call: Callable[[RenderRequest], Awaitable[RenderResult]],
    *,
    pattern: str | None = None,
    template: TemplateRef | None = None,
    model: str | None = None,
) -> Render:
    """A `Render` from a dry run (`GenAIService.render`): each case's request for the pattern or
    template version, rendered, as the text its prompt assertions read.

    A template version's gate: `run_cases(cases, render=render_through(service.render,
    template=TemplateRef(name=…, role=…, version=…)))`, then `report.failure_messages()`."""

    async def render(case: PatternTestCase) -> str:
        request = case_request(case, pattern=pattern, template=template, model=model)
        return prompt_text((await call(request)).prompt)

    return render


def _problem(exc: GenAIError | ValidationError) -> str:
    if isinstance(exc, GenAIError):
        return f"{exc.error_type}: {exc.message}"
    return "; ".join(
        f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
        for e in exc.errors(include_url=False, include_input=False)
    )


async def _answer_failures(
    case: PatternTestCase, answer: Answer, judge: Judge | None
) -> tuple[list[str], str | None]:
    try:
        live = await answer(case)
    except (GenAIError, ValidationError) as exc:
        return [f"no answer: {_problem(exc)}"], None
    failures = check_answer(case.expect, live.text)
    name = case.expect.judge
    if name is not None:
        if judge is None:
            failures.append(f"judge {name!r} cannot run here: no judge was given")
        else:
            try:
                failures += check_verdict(name, await judge(name, case, live.text))
            except (GenAIError, ValidationError) as exc:
                failures.append(f"judge {name!r} failed: {_problem(exc)}")
    return failures, live.job_id


async def run_case(
    case: PatternTestCase,
    *,
    render: Render,
    answer: Answer | None = None,
    judge: Judge | None = None,
) -> CaseReport:
    """One case: its prompt always; its answer when the run is live and it asserts one."""
    started = time.perf_counter()
    job_id: str | None = None
    try:
        failures = check_prompt(case.expect, await render(case))
    except (GenAIError, ValidationError) as exc:
        failures = [f"render failed: {_problem(exc)}"]
    wants_answer = has_answer_checks(case.expect)
    skipped = wants_answer and answer is None
    if wants_answer and answer is not None and not failures:
        failures, job_id = await _answer_failures(case, answer, judge)
    status = "failed" if failures else "skipped" if skipped else "passed"
    messages = failures or ([NOT_LIVE] if skipped else [])
    duration = round((time.perf_counter() - started) * 1000, 3)
    return CaseReport(
        name=case.name, status=status, messages=messages, duration_ms=duration, job_id=job_id
    )


async def run_cases(
    cases: Sequence[PatternTestCase],
    *,
    render: Render,
    answer: Answer | None = None,
    judge: Judge | None = None,
    suite: str = "",
    on_case: OnCase | None = None,
) -> SuiteReport:
    """Every case in order; `answer=None` is a non-live run (answer assertions are skipped).

    `on_case` sees each report as it is made (a progress bar)."""
    reports = []
    for case in cases:
        report = await run_case(case, render=render, answer=answer, judge=judge)
        if on_case is not None:
            on_case(report)
        reports.append(report)
    return SuiteReport.of(suite, live=answer is not None, cases=reports)
