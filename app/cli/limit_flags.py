"""The limit flags `keys` and `teams` share, turned into the fields of the API's bodies.

Flags become a dict of only the fields given (plus explicit nulls for the `--clear-*` ones), and
the command validates it with the same model the API uses, so a bad flag is the API's field
problem, printed as one line with exit 2 (app/cli/runner.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from app.schemas import Limits

BudgetUsdFlag = Annotated[
    float | None,
    typer.Option("--budget-usd", metavar="USD", help="Spend at most this much per window."),
]
BudgetWindowFlag = Annotated[
    str | None,
    typer.Option(
        "--budget-window", metavar="day|month|total", help="UTC calendar period (default month)."
    ),
]
RpmFlag = Annotated[int | None, typer.Option("--rpm", help="Requests per minute.")]
TpmFlag = Annotated[int | None, typer.Option("--tpm", help="Tokens per minute (in + out).")]
ClearBudgetFlag = Annotated[bool, typer.Option("--clear-budget", help="Remove every budget.")]
ClearRpmFlag = Annotated[bool, typer.Option("--clear-rpm", help="Remove the request rate limit.")]
ClearTpmFlag = Annotated[bool, typer.Option("--clear-tpm", help="Remove the token rate limit.")]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def given(**flags: Any) -> dict[str, Any]:
    """The flags that were given (None and empty lists are flags left out)."""
    return {name: value for name, value in flags.items() if value is not None and value != []}


def cleared(pairs: Sequence[tuple[str, bool, str]], fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` plus an explicit null for each (field, flag set, flag name) whose clear flag is
    set; a field both set and cleared is a usage error (exit 2)."""
    found = dict(fields)
    for field, clear, flag in pairs:
        if not clear:
            continue
        if field in fields:
            raise typer.BadParameter("give it or a new value, not both", param_hint=flag)
        found[field] = None
    return found


def expiry(text: str | None) -> str | None:
    """`--expires`: a date means 00:00 UTC that day; anything else must be an ISO instant with
    its offset (the API's rule, checked there)."""
    if text is None:
        return None
    return f"{text}T00:00:00Z" if _DATE.match(text) else text


def limit_summary(limits: Limits) -> str:
    """`$10/day $200/month 60rpm 100000tpm`, or `unlimited`."""
    parts = [f"${budget.usd:g}/{budget.window}" for budget in limits.budgets]
    rates = ((limits.rpm, "rpm"), (limits.tpm, "tpm"))
    parts += [f"{value}{unit}" for value, unit in rates if value is not None]
    return " ".join(parts) or "unlimited"
