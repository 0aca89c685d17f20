"""`genai snippets`: the snippet library from the command line, over the same SnippetLibrary."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError

from app.cli_store import fail
from app.errors import GenAIError
from app.runtime import Runtime, run_with_runtime
from app.schemas import SnippetIn
from app.snippets.fields import normalise_tags

T = TypeVar("T")

snippets_cli = typer.Typer(
    help="Reusable prompt fragments (database; file snippets are read-only).",
    no_args_is_help=True,
)


def _run(work: Callable[[Runtime], Awaitable[T]]) -> T:
    """One piece of work on a fresh runtime; a service error prints as the API would show it."""
    try:
        return run_with_runtime(work)
    except GenAIError as exc:
        fail(exc)


def _metadata(raw: str | None) -> dict[str, Any]:
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    if not isinstance(value, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--metadata")
    return value


@snippets_cli.command("list")
def snippets_list(
    tag: Annotated[str | None, typer.Option(help="Exact tag, case-insensitive.")] = None,
    include_inactive: Annotated[bool, typer.Option(help="Show inactive snippets too.")] = False,
) -> None:
    """One line per snippet: identifier, source, tags and name; `-` marks an inactive one."""

    async def work(runtime: Runtime) -> list[str]:
        found = await runtime.snippets.list(tag=tag, include_inactive=include_inactive)
        return [
            f"{' ' if s.active else '-'} {s.identifier:<24} {s.source:<8} "
            f"[{', '.join(s.tags)}] {s.name}"
            for s in found
        ]

    for line in _run(work):
        typer.echo(line)


@snippets_cli.command("show")
def snippets_show(identifier: str) -> None:
    """One active snippet as JSON."""

    async def work(runtime: Runtime) -> str:
        return (await runtime.snippets.get(identifier)).model_dump_json(indent=2)

    typer.echo(_run(work))


@snippets_cli.command("create")
def snippets_create(
    identifier: str,
    name: Annotated[str, typer.Option(help="Display name.")],
    file: Annotated[
        Path,
        typer.Option("--file", "-f", exists=True, dir_okay=False, help="The snippet text."),
    ],
    tag: Annotated[
        list[str] | None, typer.Option("--tag", "-t", help="Tag; repeatable or comma-separated.")
    ] = None,
    metadata: Annotated[str | None, typer.Option(help="A JSON object for consumers.")] = None,
    description: Annotated[str, typer.Option(help="What the snippet is for.")] = "",
) -> None:
    """Store a database snippet (it overrides a file snippet of the same identifier)."""
    try:
        new = SnippetIn(
            identifier=identifier,
            name=name,
            description=description,
            text=file.read_text(encoding="utf-8").strip(),
            tags=normalise_tags(",".join(tag or [])),
            metadata=_metadata(metadata),
        )
    except ValidationError as exc:
        for err in exc.errors(include_url=False, include_input=False):
            typer.echo(f"{'.'.join(map(str, err['loc']))}: {err['msg']}", err=True)
        raise typer.Exit(code=2) from None

    async def work(runtime: Runtime) -> str:
        return (await runtime.snippets.create(new)).model_dump_json(indent=2)

    typer.echo(_run(work))


@snippets_cli.command("delete")
def snippets_delete(identifier: str) -> None:
    """Delete a database snippet; a file snippet of the same identifier shows again."""

    async def work(runtime: Runtime) -> None:
        await runtime.snippets.delete(identifier)

    _run(work)
    typer.echo(f"deleted {identifier}")
