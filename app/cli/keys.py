"""`genai keys`: mint, list and revoke the API keys callers send as `Authorization: Bearer`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.auth.keys import Scope
from app.cli.runner import run
from app.schemas import ApiKeyCreated, ApiKeyInfo

if TYPE_CHECKING:
    from app.runtime import Runtime

keys_cli = typer.Typer(help="API keys and their scopes.", no_args_is_help=True)


@keys_cli.command("create")
def keys_create(
    scope: Annotated[
        Scope, typer.Option(help="complete: render, complete, read the catalog; admin: everything.")
    ],
    name: Annotated[str, typer.Option(help="A label to recognise the key by.")] = "unnamed",
) -> None:
    """Mint a key. It is printed once, alone on the last line; only its hash is kept."""

    async def work(runtime: Runtime) -> ApiKeyCreated:
        return await runtime.authenticator.create(scope=scope, name=name)

    created = run(work)
    typer.echo(f"created {created.scope} key {created.id} ({created.name}); store it now:")
    typer.echo(created.key)


@keys_cli.command("list")
def keys_list() -> None:
    """Every key ever made: id, scope, name, created, last used, revoked."""

    async def work(runtime: Runtime) -> list[ApiKeyInfo]:
        return await runtime.authenticator.list_keys()

    listed = run(work)
    for key in listed:
        used = key.last_used_at.isoformat(timespec="seconds") if key.last_used_at else "never"
        state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
        typer.echo(
            f"{key.id}  {key.scope:<8}  {key.name:<20}  "
            f"created {key.created_at:%Y-%m-%d}  used {used}  {state}"
        )


@keys_cli.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The id `genai keys list` shows.")],
) -> None:
    """Revoke a key; running services stop accepting it within GENAI_AUTH_CACHE_SECONDS."""

    async def work(runtime: Runtime) -> ApiKeyInfo:
        return await runtime.authenticator.revoke(key_id)

    revoked = run(work)
    typer.echo(f"revoked key {revoked.id} ({revoked.name})")
