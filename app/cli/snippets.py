"""`genai snippets`: the snippet library from the command line, over the same SnippetLibrary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.audit.events import CLI, snippet_detail, snippet_target
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
def snippets_show(
    identifier: str,
    version: Annotated[
        int | None, typer.Option(min=1, help="A stored version (default: the one served).")
    ] = None,
) -> None:
    """One active snippet (or one stored version) as JSON."""

    async def work(runtime: Runtime) -> str:
        if version is not None:
            return (await runtime.snippets.version(identifier, version)).model_dump_json(indent=2)
        return (await runtime.snippets.get(identifier)).model_dump_json(indent=2)

    typer.echo(run(work))


@snippets_cli.command("versions")
def snippets_versions(identifier: str) -> None:
    """One line per stored version: `*` marks the one served, then version, checksum, name."""

    async def work(runtime: Runtime) -> list[str]:
        found = await runtime.snippets.versions(identifier)
        return [
            f"{'*' if s.live else ' '} {s.version:>4} {s.checksum} {s.name}" for s in found.versions
        ]

    for line in run(work):
        typer.echo(line)


@snippets_cli.command("activate")
def snippets_activate(
    identifier: str, version: Annotated[int, typer.Argument(min=1, help="A stored version.")]
) -> None:
    """Serve a stored version again (a rollback); it also restores a deleted snippet."""

    async def work(runtime: Runtime) -> str:
        activated = await runtime.snippets.activate(identifier, version)
        await runtime.admin_events.record(
            CLI,
            "snippet.activated",
            target=snippet_target(identifier),
            detail=snippet_detail(activated),
        )
        return activated.model_dump_json(indent=2)

    typer.echo(run(work))


@snippets_cli.command("update")
def snippets_update(
    identifier: str,
    file: Annotated[
        Path,
        typer.Option("--file", "-f", exists=True, dir_okay=False, help="The new snippet text."),
    ],
    name: Annotated[str | None, typer.Option(help="Display name (default: kept).")] = None,
    tag: Annotated[
        list[str] | None,
        typer.Option("--tag", "-t", help="Tag; repeatable or comma-separated (default: kept)."),
    ] = None,
    metadata: Annotated[
        str | None, typer.Option(help="A JSON object for consumers (default: kept).")
    ] = None,
    description: Annotated[str | None, typer.Option(help="What it is for (default: kept).")] = None,
) -> None:
    """Store the next version of a snippet and serve it; fields not given are kept."""
    given = {
        "name": name,
        "description": description,
        "tags": normalise_tags(",".join(tag)) if tag else None,
        "metadata": _metadata(metadata) if metadata is not None else None,
    }
    checked = SnippetIn(  # invalid fields end the command here (exit 2), before the database
        identifier=identifier,
        name=name or identifier,
        text=file.read_text(encoding="utf-8").strip(),
        **{key: value for key, value in given.items() if value is not None and key != "name"},
    )

    async def work(runtime: Runtime) -> str:
        current = await runtime.snippets.get(identifier)
        kept = {key: getattr(current, key) for key, value in given.items() if value is None}
        new = checked.model_copy(update=kept)
        updated = await runtime.snippets.update(identifier, new)
        await runtime.admin_events.record(
            CLI,
            "snippet.updated",
            target=snippet_target(identifier),
            detail=snippet_detail(updated),
        )
        return updated.model_dump_json(indent=2)

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
        created = await runtime.snippets.create(new)
        await runtime.admin_events.record(
            CLI,
            "snippet.created",
            target=snippet_target(identifier),
            detail=snippet_detail(created),
        )
        return created.model_dump_json(indent=2)

    typer.echo(run(work))


@snippets_cli.command("delete")
def snippets_delete(identifier: str) -> None:
    """Retire a database snippet (its versions are kept); a file snippet of it shows again."""

    async def work(runtime: Runtime) -> None:
        await runtime.snippets.delete(identifier)
        await runtime.admin_events.record(CLI, "snippet.deleted", target=snippet_target(identifier))

    run(work)
    typer.echo(f"deleted {identifier}")
