"""`genai db` and `genai templates`: migrations and the versioned template registry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from typer.core import TyperGroup

from app.catalog.templates import check_new_template
from app.config import Settings, get_settings
from app.errors import ConfigurationError, GenAIError, StoreUnavailable
from app.runtime import Runtime, run_with_runtime
from app.schemas import TemplateCreate
from app.store.db import DATABASE_URL_SETTING, Database, describe_storage_error
from app.store.secrets import new_key_text

db_cli = typer.Typer(help="The audit store: migrations and keys.", no_args_is_help=True)
templates_cli = typer.Typer(help="Versioned database templates.", no_args_is_help=True)


class OperatorErrors(TyperGroup):
    """The top-level command group: a ConfigurationError (a bad setting, key or database URL, an
    unreachable store) or invalid command input ends any command as one line on stderr, exit 2,
    never a traceback."""

    def invoke(self, ctx: Any) -> Any:  # typer's vendored click.Context
        try:
            return super().invoke(ctx)
        except ConfigurationError as exc:
            typer.echo(f"genai: {exc}", err=True)
            raise typer.Exit(code=2) from None
        except ValidationError as exc:
            for err in exc.errors(include_url=False, include_input=False):
                where = ".".join(map(str, err["loc"])) or exc.title
                typer.echo(f"genai: {where}: {err['msg']}", err=True)
            raise typer.Exit(code=2) from None


def fail(exc: GenAIError) -> NoReturn:
    """Print the error as the API would answer it, and exit 1."""
    body = {"error": {"type": exc.error_type, "message": exc.message, **exc.details()}}
    typer.echo(json.dumps(body, indent=2), err=True)
    raise typer.Exit(code=1)


def migrate_database(settings: Settings) -> str:
    """Apply every pending migration; return the URL without its password."""

    async def main() -> str:
        database = Database.from_settings(settings)
        try:
            await database.ensure_reachable()
            await database.migrate()
        except StoreUnavailable as exc:
            cause = describe_storage_error(exc.__cause__ or exc)
            raise ConfigurationError(DATABASE_URL_SETTING, f"migration failed: {cause}") from None
        finally:
            await database.aclose()
        return database.safe_url

    return asyncio.run(main())


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Apply every pending migration to GENAI_DATABASE_URL."""
    typer.echo(f"migrated {migrate_database(get_settings())}")


@db_cli.command("new-key")
def db_new_key() -> None:
    """Print a fresh key for GENAI_DATA_KEY or GENAI_REDACTION_KEY."""
    typer.echo(new_key_text())


def _run(work: object) -> object:
    try:
        return run_with_runtime(work)  # type: ignore[arg-type]
    except GenAIError as exc:
        fail(exc)


@templates_cli.command("create")
def templates_create(
    name: str,
    role: str,
    file: Annotated[Path, typer.Option("--file", "-f", help="The template text.")],
    variable: Annotated[
        list[str] | None, typer.Option("--variable", "-v", help="Declared variable, in order.")
    ] = None,
    blueprint_schema: Annotated[Path | None, typer.Option(help="JSON schema file.")] = None,
    blueprint_instructions: Annotated[str | None, typer.Option()] = None,
    activate: Annotated[bool, typer.Option(help="Make it the active variant.")] = False,
) -> None:
    """Store the next version of a template (its text is immutable once stored)."""
    try:
        new = TemplateCreate(
            name=name,
            role=role,
            template=file.read_text(encoding="utf-8"),
            variables=variable or [],
            activate=activate,
            blueprint_schema=json.loads(blueprint_schema.read_text()) if blueprint_schema else None,
            blueprint_instructions=blueprint_instructions,
        )
    except (OSError, ValueError) as exc:  # unreadable file, bad JSON, invalid name or role
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(code=2) from None

    async def work(runtime: Runtime) -> str:
        # The same bounded check as POST /v1/templates: compile, contract, trial render.
        await check_new_template(runtime.renderer, new.name, new.template, new.variables)
        version = await runtime.service.templates.create_version(new)
        return version.model_dump_json(indent=2)

    typer.echo(_run(work))


@templates_cli.command("list")
def templates_list(name: Annotated[str | None, typer.Argument()] = None) -> None:
    """Every stored version; `*` marks the active variant."""

    async def work(runtime: Runtime) -> list[str]:
        versions = await runtime.service.templates.list_versions(name)
        return [
            f"{'*' if v.active else ' '} {v.name:<24} {v.role:<16} v{v.version:<4} {v.checksum}"
            for v in versions
        ]

    for line in _run(work):  # type: ignore[attr-defined]
        typer.echo(line)


@templates_cli.command("show")
def templates_show(name: str, role: str, version: int) -> None:
    """One version as JSON."""

    async def work(runtime: Runtime) -> str:
        return (await runtime.service.templates.get(name, role, version)).model_dump_json(indent=2)

    typer.echo(_run(work))


@templates_cli.command("activate")
def templates_activate(name: str, role: str, version: int) -> None:
    """Make one version the active variant of (name, role)."""

    async def work(runtime: Runtime) -> str:
        activated = await runtime.service.templates.activate(name, role, version)
        return f"{activated.name}/{activated.role} v{activated.version} is active"

    typer.echo(_run(work))


@templates_cli.command("check-drift")
def templates_check_drift(
    limit: Annotated[int, typer.Option(help="How many of the newest jobs to check.")] = 1000,
) -> None:
    """Report sources whose content changed since recent jobs used them; exit 1 on drift."""

    async def work(runtime: Runtime) -> str:
        return (await runtime.replayer.drift_report(limit=limit)).model_dump_json(indent=2)

    report = str(_run(work))
    typer.echo(report)
    if json.loads(report)["drifted"]:
        raise typer.Exit(code=1)
