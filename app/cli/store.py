"""`genai db` and `genai templates`: migrations and the versioned template registry."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml

from app.audit.events import CLI, template_detail, template_target
from app.catalog.templates import store_new_template
from app.cli.jobs import drift
from app.cli.runner import run
from app.config import Settings, get_settings
from app.errors import ConfigurationError, StoreUnavailable
from app.schemas import TemplateCreate
from app.store.db import DATABASE_URL_SETTING, Database, describe_storage_error
from app.store.secrets import new_key_text

if TYPE_CHECKING:
    from app.runtime import Runtime

db_cli = typer.Typer(help="The audit store: migrations and keys.", no_args_is_help=True)
templates_cli = typer.Typer(help="Versioned database templates.", no_args_is_help=True)


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


@templates_cli.command("create")
def templates_create(
    key: Annotated[tuple[str, str], typer.Argument(metavar="NAME ROLE", help="The template.")],
    file: Annotated[Path, typer.Option("--file", "-f", help="The template text.")],
    variable: Annotated[
        list[str] | None, typer.Option("--variable", "-v", help="Declared variable, in order.")
    ] = None,
    blueprint_schema: Annotated[Path | None, typer.Option(help="JSON schema file.")] = None,
    blueprint_instructions: Annotated[str | None, typer.Option()] = None,
    activate: Annotated[
        bool, typer.Option(help="Move the `production` label to it (the first version always).")
    ] = False,
    tests: Annotated[
        Path | None,
        typer.Option(
            help="Its pattern test cases: a YAML or JSON list (protected labels run them)."
        ),
    ] = None,
) -> None:
    """Store the next version of a template (its text is immutable once stored)."""
    name, role = key  # one argument of two words: a template is keyed by (name, role)
    try:
        new = TemplateCreate(
            name=name,
            role=role,
            template=file.read_text(encoding="utf-8"),
            variables=variable or [],
            activate=activate,
            blueprint_schema=json.loads(blueprint_schema.read_text()) if blueprint_schema else None,
            blueprint_instructions=blueprint_instructions,
            tests=yaml.safe_load(tests.read_text(encoding="utf-8")) or [] if tests else [],
        )
    except (
        OSError,
        json.JSONDecodeError,
        yaml.YAMLError,
    ) as exc:  # unreadable file, bad JSON schema file
        typer.echo(
            f"genai: {' '.join(str(exc).split())}", err=True
        )  # (an invalid name or role: OperatorErrors)
        raise typer.Exit(code=2) from None

    async def work(runtime: Runtime) -> str:
        # The same check, then store, as POST /v1/templates: compile, contract, trial render.
        version = await store_new_template(
            runtime.renderer, runtime.template_labels, new, author="cli"
        )
        await runtime.admin_events.record(
            CLI,
            "template.version_created",
            target=template_target(version.name, version.role),
            detail=template_detail(version),
        )
        return version.model_dump_json(indent=2)

    typer.echo(run(work))


@templates_cli.command("list")
def templates_list(name: Annotated[str | None, typer.Argument()] = None) -> None:
    """Every stored version; `*` marks the one `production` points at, then its labels."""

    async def work(runtime: Runtime) -> list[str]:
        versions = await runtime.templates.list_versions(name)
        return [
            f"{'*' if v.active else ' '} {v.name:<24} {v.role:<16} v{v.version:<4} {v.checksum}"
            + (f" [{', '.join(v.labels)}]" if v.labels else "")
            for v in versions
        ]

    for line in run(work):
        typer.echo(line)


@templates_cli.command("show")
def templates_show(name: str, role: str, version: int) -> None:
    """One version as JSON."""

    async def work(runtime: Runtime) -> str:
        return (await runtime.templates.get(name, role, version)).model_dump_json(indent=2)

    typer.echo(run(work))


@templates_cli.command("activate")
def templates_activate(name: str, role: str, version: int) -> None:
    """Deprecated: move the `production` label to one version (`genai templates label`)."""

    async def work(runtime: Runtime) -> str:
        activated = await runtime.template_labels.activate(name, role, version, author="cli")
        await runtime.admin_events.record(
            CLI,
            "template.activated",
            target=template_target(name, role),
            detail={"version": version},
        )
        return f"{activated.name}/{activated.role} v{activated.version} is active"

    typer.echo(run(work))


# Drift covers pattern files as well as templates, so it is a top-level command now; the old
# name still works (hidden from help, with a deprecation notice) for scripts that use it.
templates_cli.command(
    "check-drift",
    hidden=True,
    deprecated=True,
    help="Renamed `genai drift` (it checks pattern files too); this name still works.",
)(drift)
