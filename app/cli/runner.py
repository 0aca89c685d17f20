"""How every `genai` command runs its work and how any of them fails: one runner, one report.

    GenAIError          the API's `{"error": …}` body (app/api/error_body.py) on stderr, exit 1
    ConfigurationError  `genai: SETTING: problem`, one line on stderr (one per problem for
                        ConfigurationProblems, e.g. a config file's), exit 2
    ValidationError     `genai: FIELD: problem`, one line per field, exit 2 (bad command input)

Commands raise; `OperatorErrors`, the top-level command group, is the one place that turns an
error into output and an exit code, so no command catches errors of its own to print them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from app.api.error_body import error_body, error_json
from app.config import Settings, get_settings
from app.errors import ConfigurationError, ConfigurationProblems, GenAIError
from app.store.db import check_reachable

if TYPE_CHECKING:
    from app.runtime import Runtime

T = TypeVar("T")


def run(work: Callable[[Runtime], Awaitable[T]], settings: Settings | None = None) -> T:
    """Build the runtime, run one piece of work on it, close everything; errors propagate."""

    async def main() -> T:
        resolved = settings or get_settings()
        await check_reachable(resolved)  # one operator line, not a traceback, when it is down
        runtime = await _build_runtime(resolved)
        try:
            return await work(runtime)
        finally:
            await runtime.aclose()

    return asyncio.run(main())


def operator_lines(exc: ConfigurationError | ValidationError) -> list[str]:
    """The one-line messages an operator sees, from the error's own fields."""
    if isinstance(exc, ConfigurationProblems):
        return [f"genai: {setting}: {problem}" for setting, problem in exc.problems]
    if isinstance(exc, ConfigurationError):
        return [f"genai: {exc.setting}: {exc.problem}"]
    return [
        f"genai: {'.'.join(map(str, err['loc'])) or exc.title}: {err['msg']}"
        for err in exc.errors(include_url=False, include_input=False)
    ]


def fail(exc: GenAIError) -> NoReturn:
    """Print the error as the API would answer it, on one line (for people and for `jq`), and
    exit 1."""
    typer.echo(json.dumps(error_json(error_body(exc)), ensure_ascii=False), err=True)
    raise typer.Exit(code=1)


class OperatorErrors(TyperGroup):
    """The top-level command group: any command ends in one of the three reports above, never
    a traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click.Context
        try:
            return super().invoke(ctx)
        except GenAIError as exc:
            fail(exc)
        except (ConfigurationError, ValidationError) as exc:
            for line in operator_lines(exc):
                typer.echo(line, err=True)
            raise typer.Exit(code=2) from None


async def _build_runtime(settings: Settings) -> Runtime:
    # Imported here, not at the top: the SDKs and the store load only for commands that need them.
    from app.runtime import build_runtime

    return await build_runtime(settings)
