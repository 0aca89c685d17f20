"""`genai teams`: teams whose keys share budgets and rate limits (on top of each key's own)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.audit.events import CLI, team_target
from app.cli.limit_flags import (
    BudgetUsdFlag,
    BudgetWindowFlag,
    ClearBudgetFlag,
    ClearRpmFlag,
    ClearTpmFlag,
    RpmFlag,
    TpmFlag,
    cleared,
    given,
    limit_summary,
)
from app.cli.runner import run
from app.schemas import TeamCreate, TeamInfo, TeamUpdate

if TYPE_CHECKING:
    from app.runtime import Runtime

teams_cli = typer.Typer(help="Teams: shared budgets and rate limits.", no_args_is_help=True)

NameArgument = Annotated[str, typer.Argument(help="Lowercase letters, digits, `_`, `.`, `-`.")]


@teams_cli.command("create")
def teams_create(
    name: NameArgument,
    budget_usd: BudgetUsdFlag = None,
    budget_window: BudgetWindowFlag = None,
    rpm: RpmFlag = None,
    tpm: TpmFlag = None,
) -> None:
    """Make a team; keys join it with `genai keys create|update --team NAME`."""
    limits = given(budget_usd=budget_usd, budget_window=budget_window, rpm=rpm, tpm=tpm)
    new = TeamCreate.model_validate({"name": name, **limits})

    async def work(runtime: Runtime) -> TeamInfo:
        created = await runtime.teams.add(new)
        await runtime.admin_events.record(
            CLI, "team.created", target=team_target(name), detail=new.changes()
        )
        return created

    typer.echo(f"created {_line(run(work))}")


@teams_cli.command("list")
def teams_list() -> None:
    """Every team with its limits."""

    async def work(runtime: Runtime) -> list[TeamInfo]:
        return await runtime.teams.list()

    for team in run(work):
        typer.echo(_line(team))


@teams_cli.command("update")
def teams_update(
    name: NameArgument,
    budget_usd: BudgetUsdFlag = None,
    budget_window: BudgetWindowFlag = None,
    rpm: RpmFlag = None,
    tpm: TpmFlag = None,
    clear_budget: ClearBudgetFlag = False,
    clear_rpm: ClearRpmFlag = False,
    clear_tpm: ClearTpmFlag = False,
) -> None:
    """Change only what the flags name (a new budget replaces the old ones); running services
    use the change within GENAI_AUTH_CACHE_SECONDS."""
    fields = cleared(
        [
            ("budget_usd", clear_budget, "--clear-budget"),
            ("rpm", clear_rpm, "--clear-rpm"),
            ("tpm", clear_tpm, "--clear-tpm"),
        ],
        given(budget_usd=budget_usd, budget_window=budget_window, rpm=rpm, tpm=tpm),
    )
    if not fields:
        raise typer.BadParameter("name at least one change (see --help)", param_hint="NAME")
    changes = TeamUpdate.model_validate(fields)

    async def work(runtime: Runtime) -> TeamInfo:
        updated = await runtime.teams.update(name, changes)
        await runtime.admin_events.record(
            CLI, "team.updated", target=team_target(name), detail=changes.changes()
        )
        return updated

    typer.echo(f"updated {_line(run(work))}")


@teams_cli.command("delete")
def teams_delete(name: NameArgument) -> None:
    """Delete a team; refused while unrevoked keys belong to it."""

    async def work(runtime: Runtime) -> TeamInfo:
        deleted = await runtime.teams.delete(name)
        await runtime.admin_events.record(CLI, "team.deleted", target=team_target(name))
        return deleted

    typer.echo(f"deleted team {run(work).name}")


def _line(team: TeamInfo) -> str:
    return f"{team.name:<20}  {limit_summary(team)}  created {team.created_at:%Y-%m-%d}"
