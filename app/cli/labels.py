"""`genai templates label` and `genai templates labels`: move a template label, read them.

Moves made here are recorded with the author `cli` (the operator has the database itself);
the same rules as `PUT /v1/templates/{name}/{role}/labels/{label}` apply, the gate included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.audit.events import CLI, template_target
from app.cli.runner import run
from app.errors import ConfigurationError
from app.schemas import LabelMoveIn, SplitShare

if TYPE_CHECKING:
    from app.runtime import Runtime

CLI_AUTHOR = "cli"


def parse_split(text: str) -> list[SplitShare]:
    """`7:90,8:10` → two shares; anything else is one operator line (exit 2)."""
    shares = []
    for part in text.split(","):
        version, sep, weight = part.strip().partition(":")
        if not sep or not version.strip().isdigit() or not weight.strip().isdigit():
            raise ConfigurationError(
                "--split", f"{part.strip()!r} is not VERSION:WEIGHT (e.g. --split 7:90,8:10)"
            )
        shares.append({"version": int(version), "weight": int(weight)})
    return [SplitShare.model_validate(share) for share in shares]


def templates_label(
    name: str,
    role: str,
    label: str,
    message: Annotated[str, typer.Option("--message", "-m", help="Why (kept in the history).")],
    version: Annotated[int | None, typer.Option("--version", help="The version.")] = None,
    split: Annotated[
        str | None, typer.Option("--split", help="A canary: VERSION:WEIGHT,VERSION:WEIGHT.")
    ] = None,
) -> None:
    """Point LABEL at a version (--version N) or split it (--split 7:90,8:10)."""
    body = LabelMoveIn(
        version=version, split=parse_split(split) if split else None, message=message
    )

    async def work(runtime: Runtime) -> str:
        moved = await runtime.template_labels.move(name, role, label, body, author=CLI_AUTHOR)
        await runtime.admin_events.record(
            CLI, "label.moved", target=template_target(name, role, label), detail=body.model_dump()
        )
        return f"{name}/{role} {label} → {describe(moved.version, moved.split)}"

    typer.echo(run(work))


def templates_labels(
    name: str,
    role: str,
    history: Annotated[bool, typer.Option("--history", help="Every move, newest first.")] = False,
) -> None:
    """The labels of (NAME, ROLE), or with --history their moves."""

    async def work(runtime: Runtime) -> list[str]:
        labels = runtime.template_labels
        if history:
            return [
                f"{m.moved_at:%Y-%m-%d %H:%M:%S} {m.label:<16} "
                f"{describe(m.from_version, m.from_split)} → {describe(m.to_version, m.to_split)}"
                f"  {m.author}: {m.message}"
                for m in await labels.history(name, role)
            ]
        return [
            f"{info.label:<16} {describe(info.version, info.split)}"
            for info in await labels.labels_of(name, role)
        ]

    for line in run(work):
        typer.echo(line)


def describe(version: int | None, split: list[SplitShare] | None) -> str:
    if split:
        return " ".join(f"v{share.version} {share.weight}%" for share in split)
    return f"v{version}" if version is not None else "-"
