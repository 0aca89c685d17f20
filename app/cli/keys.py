"""`genai keys`: mint, list, change and revoke the API keys callers send as
`Authorization: Bearer`, with their limits, team and expiry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.audit.events import CLI, key_created_detail, key_target
from app.auth.keys import Scope
from app.cli.limit_flags import (
    BudgetUsdFlag,
    BudgetWindowFlag,
    ClearBudgetFlag,
    ClearRpmFlag,
    ClearTpmFlag,
    RpmFlag,
    TpmFlag,
    cleared,
    expiry,
    given,
    limit_summary,
)
from app.cli.runner import run
from app.schemas import ApiKeyCreate, ApiKeyCreated, ApiKeyInfo, ApiKeyUpdate

if TYPE_CHECKING:
    from app.runtime import Runtime

keys_cli = typer.Typer(help="API keys: scopes, limits, teams, expiry.", no_args_is_help=True)

AllowModelFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-model",
        metavar="PROVIDER/GLOB",
        help="A model the key may call, e.g. 'openai/*' (repeatable); none given: any model.",
    ),
]
AllowPatternFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-pattern",
        metavar="GLOB",
        help="A pattern the key may render, e.g. 'support-*' (repeatable); none given: any.",
    ),
]
ExpiresFlag = Annotated[
    str | None,
    typer.Option(
        "--expires",
        metavar="DATE|INSTANT",
        help="2027-01-01 (00:00 UTC) or 2027-01-01T12:00:00+02:00; after it the key is refused.",
    ),
]
TeamFlag = Annotated[
    str | None, typer.Option("--team", help="A team (`genai teams create`) whose limits apply too.")
]


def _access(
    budget_usd: float | None,
    budget_window: str | None,
    rpm: int | None,
    tpm: int | None,
    allow_model: list[str] | None,
    allow_pattern: list[str] | None,
    expires: str | None,
    team: str | None,
) -> dict[str, Any]:
    return given(
        budget_usd=budget_usd,
        budget_window=budget_window,
        rpm=rpm,
        tpm=tpm,
        allowed_models=allow_model,
        allowed_patterns=allow_pattern,
        expires_at=expiry(expires),
        team=team,
    )


@keys_cli.command("create")
def keys_create(
    scope: Annotated[
        Scope, typer.Option(help="complete: render, complete, read the catalog; admin: everything.")
    ],
    name: Annotated[str, typer.Option(help="A label to recognise the key by.")] = "unnamed",
    budget_usd: BudgetUsdFlag = None,
    budget_window: BudgetWindowFlag = None,
    rpm: RpmFlag = None,
    tpm: TpmFlag = None,
    allow_model: AllowModelFlag = None,
    allow_pattern: AllowPatternFlag = None,
    expires: ExpiresFlag = None,
    team: TeamFlag = None,
) -> None:
    """Mint a key. It is printed once, alone on the last line; only its hash is kept."""
    fields = _access(budget_usd, budget_window, rpm, tpm, allow_model, allow_pattern, expires, team)
    new = ApiKeyCreate.model_validate({"scope": scope.value, "name": name, **fields})

    async def work(runtime: Runtime) -> ApiKeyCreated:
        created = await runtime.authenticator.create(new)
        await runtime.admin_events.record(
            CLI, "key.created", target=key_target(created.id), detail=key_created_detail(new)
        )
        return created

    created = run(work)
    typer.echo(f"created {created.scope} key {created.id} ({created.name}); store it now:")
    typer.echo(created.key)


@keys_cli.command("update")
def keys_update(
    key_id: Annotated[str, typer.Argument(help="The id `genai keys list` shows.")],
    name: Annotated[str | None, typer.Option(help="A new label.")] = None,
    budget_usd: BudgetUsdFlag = None,
    budget_window: BudgetWindowFlag = None,
    rpm: RpmFlag = None,
    tpm: TpmFlag = None,
    allow_model: AllowModelFlag = None,
    allow_pattern: AllowPatternFlag = None,
    expires: ExpiresFlag = None,
    team: TeamFlag = None,
    clear_budget: ClearBudgetFlag = False,
    clear_rpm: ClearRpmFlag = False,
    clear_tpm: ClearTpmFlag = False,
    any_model: Annotated[
        bool, typer.Option("--any-model", help="Remove the model allowlist.")
    ] = False,
    any_pattern: Annotated[
        bool, typer.Option("--any-pattern", help="Remove the pattern allowlist.")
    ] = False,
    no_expiry: Annotated[bool, typer.Option("--no-expiry", help="The key never expires.")] = False,
    no_team: Annotated[bool, typer.Option("--no-team", help="The key leaves its team.")] = False,
) -> None:
    """Change only what the flags name (a new budget replaces the old ones); running services
    use the change within GENAI_AUTH_CACHE_SECONDS."""
    fields = _access(budget_usd, budget_window, rpm, tpm, allow_model, allow_pattern, expires, team)
    fields = cleared(
        [
            ("budget_usd", clear_budget, "--clear-budget"),
            ("rpm", clear_rpm, "--clear-rpm"),
            ("tpm", clear_tpm, "--clear-tpm"),
            ("allowed_models", any_model, "--any-model"),
            ("allowed_patterns", any_pattern, "--any-pattern"),
            ("expires_at", no_expiry, "--no-expiry"),
            ("team", no_team, "--no-team"),
        ],
        fields | given(name=name),
    )
    if not fields:
        raise typer.BadParameter("name at least one change (see --help)", param_hint="KEY_ID")
    changes = ApiKeyUpdate.model_validate(fields)

    async def work(runtime: Runtime) -> ApiKeyInfo:
        updated = await runtime.authenticator.update(key_id, changes)
        await runtime.admin_events.record(
            CLI, "key.updated", target=key_target(key_id), detail=changes.changes()
        )
        return updated

    typer.echo(f"updated {_line(run(work))}")


@keys_cli.command("list")
def keys_list() -> None:
    """Every key ever made: id, scope, name, team, limits, allowlists, expiry, last use, state."""

    async def work(runtime: Runtime) -> list[ApiKeyInfo]:
        return await runtime.authenticator.list_keys()

    for key in run(work):
        typer.echo(_line(key))


@keys_cli.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The id `genai keys list` shows.")],
) -> None:
    """Revoke a key; running services stop accepting it within GENAI_AUTH_CACHE_SECONDS."""

    async def work(runtime: Runtime) -> ApiKeyInfo:
        revoked = await runtime.authenticator.revoke(key_id)
        await runtime.admin_events.record(CLI, "key.revoked", target=key_target(key_id))
        return revoked

    revoked = run(work)
    typer.echo(f"revoked key {revoked.id} ({revoked.name})")


def _line(key: ApiKeyInfo) -> str:
    """One key on one line; allowlists only when the key has them."""
    used = key.last_used_at.isoformat(timespec="seconds") if key.last_used_at else "never"
    state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
    expires = f"{key.expires_at:%Y-%m-%dT%H:%MZ}" if key.expires_at else "never"
    allow = "".join(
        f"  {label}={','.join(globs)}"
        for label, globs in (("models", key.allowed_models), ("patterns", key.allowed_patterns))
        if globs is not None
    )
    return (
        f"{key.id}  {key.scope:<8}  {key.name:<20}  team={key.team or '-'}  "
        f"{limit_summary(key)}{allow}  expires {expires}  "
        f"created {key.created_at:%Y-%m-%d}  used {used}  {state}"
    )
