"""`genai patterns test [NAME…] [--live --model M] [--junit FILE]`: run the patterns' test cases;
`genai templates test NAME ROLE VERSION`: a stored template version's.

Exit 0 when no case failed (skipped ones are fine), 1 when one did, 2 on bad input (a test file
that cannot be read, an unknown pattern, `--live` with no provider configured): one line.
A non-live run renders through the service's dry run: no provider, nothing recorded. `--live`
completes each case through the service, so every answer is an audited job like any other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from app.catalog import PatternCatalog
from app.cli.flags import ModelFlags
from app.cli.runner import run
from app.config import get_settings
from app.errors import (
    InvalidModel,
    InvalidPattern,
    InvalidPatternTests,
    PatternNotFound,
    ProviderUnavailable,
)
from app.release import (
    SuiteReport,
    pattern_cases,
    run_pattern_suite,
    suite_name,
    version_ref,
    write_junit,
)
from app.schemas import CompletionEnvelope, RenderRequest
from app.schemas.pattern_tests import PatternTestCase

if TYPE_CHECKING:
    from app.runtime import Runtime


LiveFlag = Annotated[
    bool, typer.Option("--live", help="Also ask the model and check the answers (audited).")
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", metavar="PROVIDER/MODEL", help="The model every case uses."),
]
JunitOption = Annotated[
    Path | None, typer.Option("--junit", metavar="FILE", help="Also write JUnit XML here.")
]


class _NoProvider(Exception):
    """`--live` reached a provider that is not configured: the whole run stops (exit 2)."""


def _bad_input(message: str) -> NoReturn:
    typer.echo(f"genai: {message}", err=True)
    raise typer.Exit(code=2)


async def _load(
    catalog: PatternCatalog, names: list[str]
) -> list[tuple[str, list[PatternTestCase]]]:
    """Every named pattern's cases (all patterns when none is named), read before any runs."""
    chosen = names or catalog.names()
    return [(name, await pattern_cases(catalog, name)) for name in chosen]


def _complete(runtime: Runtime) -> Callable[[RenderRequest], Awaitable[CompletionEnvelope]]:
    async def complete(request: RenderRequest) -> CompletionEnvelope:
        try:
            return await runtime.service.complete(request)
        except ProviderUnavailable as exc:
            raise _NoProvider(exc.message) from None

    return complete


def _summary(reports: list[SuiteReport], untested: list[str], console: Console) -> None:
    table = Table(title="Pattern tests")
    for column in ("pattern", "cases", "passed", "failed", "skipped"):
        table.add_column(column, justify="left" if column == "pattern" else "right")
    for report in reports:
        style = "red" if report.failed else "green"
        table.add_row(
            report.suite,
            str(report.total),
            str(report.passed),
            str(report.failed),
            str(report.skipped),
            style=style,
        )
    for name in untested:
        table.add_row(name, "0", "0", "0", "0", style="dim")
    console.print(table)


def patterns_test(
    names: Annotated[
        list[str] | None, typer.Argument(help="Patterns to test (default: every pattern).")
    ] = None,
    live: LiveFlag = False,
    model: ModelOption = None,
    junit: JunitOption = None,
) -> None:
    """Run the patterns' test cases (front-matter `tests:` and NAME.tests.yaml files)."""
    ModelFlags(model=model)  # a malformed model is bad input: one line, exit 2
    console = Console(stderr=True)
    out = Console()

    async def work(runtime: Runtime) -> tuple[list[SuiteReport], list[str]]:
        suites = await _load(runtime.patterns, names or [])
        total = sum(len(cases) for _, cases in suites)
        complete = _complete(runtime) if live else None
        reports: list[SuiteReport] = []
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("testing", total=total)
            for name, cases in suites:
                if not cases:
                    continue
                progress.update(task, description=name)
                reports.append(
                    await run_pattern_suite(
                        name,
                        cases,
                        render=runtime.service.render,
                        complete=complete,
                        model=model,
                        on_case=lambda _: progress.advance(task),
                    )
                )
        return reports, [name for name, cases in suites if not cases]

    try:
        reports, untested = run(work, get_settings())
    except (InvalidPatternTests, InvalidPattern, PatternNotFound, InvalidModel) as exc:
        _bad_input(exc.message)
    except _NoProvider as exc:
        _bad_input(f"--live: {exc}")
    _report(reports, untested, junit, out)


def _report(
    reports: list[SuiteReport], untested: list[str], junit: Path | None, out: Console
) -> None:
    """Each failed case on a line, the summary table, the JUnit file; exit 1 on a failure."""
    for report in reports:
        for case in report.cases:
            if case.status == "failed":  # skipped ones are counted in the table
                for message in case.messages:
                    out.print(
                        "[red]FAILED[/] " + escape(f"{report.suite} > {case.name}: {message}"),
                        markup=True,
                        highlight=False,
                        soft_wrap=True,
                    )
    _summary(reports, untested, out)
    passed, failed, skipped = (
        sum(getattr(r, k) for r in reports) for k in ("passed", "failed", "skipped")
    )
    out.print(f"{passed} passed, {failed} failed, {skipped} skipped", highlight=False)
    if junit is not None:
        try:
            write_junit(reports, junit)
        except OSError as exc:
            _bad_input(f"--junit: cannot write {junit}: {exc.strerror}")
    if failed:
        raise typer.Exit(code=1)


def templates_test(
    name: str,
    role: str,
    version: int,
    live: LiveFlag = False,
    model: ModelOption = None,
    junit: JunitOption = None,
) -> None:
    """Run a stored template version's test cases: the run the release gate makes before a
    protected label moves to it (non-live), or with --live its answers too."""
    ModelFlags(model=model)

    async def work(runtime: Runtime) -> SuiteReport:
        stored = await runtime.templates.get(name, role, version)
        return await run_pattern_suite(
            suite_name(stored),
            list(stored.tests),
            render=runtime.service.render,
            complete=_complete(runtime) if live else None,
            model=model,
            template=version_ref(stored),
        )

    try:
        report = run(work, get_settings())
    except InvalidModel as exc:
        _bad_input(exc.message)
    except _NoProvider as exc:
        _bad_input(f"--live: {exc}")
    _report([report], [] if report.total else [report.suite], junit, Console())
