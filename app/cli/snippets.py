"""`genai snippets`: the snippet library from the command line, over the same SnippetLibrary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli.runner import run
from app.schemas import SnippetIn
from app.snippets.fields import normalise_tags

if TYPE_CHECKING:
    from app.runtime import Runtime

snippets_cli = typer.Typer(
    help="Reusable prompt fragments (database; file snippets are read-only).",
    no_args_is_help=True,
)


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

    for line in run(work):
        typer.echo(line)


@snippets_cli.command("show")
def snippets_show(identifier: str) -> None:
    """One active snippet as JSON."""

    async def work(runtime: Runtime) -> str:
        return (await runtime.snippets.get(identifier)).model_dump_json(indent=2)

    typer.echo(run(work))


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
    new = SnippetIn(  # invalid fields end the command through OperatorErrors (exit 2)
        identifier=identifier,
        name=name,
        description=description,
        text=file.read_text(encoding="utf-8").strip(),
        tags=normalise_tags(",".join(tag or [])),
        metadata=_metadata(metadata),
    )

    async def work(runtime: Runtime) -> str:
        return (await runtime.snippets.create(new)).model_dump_json(indent=2)

    typer.echo(run(work))


@snippets_cli.command("delete")
def snippets_delete(identifier: str) -> None:
    """Delete a database snippet; a file snippet of the same identifier shows again."""

    async def work(runtime: Runtime) -> None:
        await runtime.snippets.delete(identifier)

    run(work)
    typer.echo(f"deleted {identifier}")
