"""`genai usage`: requests, tokens and cost in a window, grouped, as `GET /v1/usage` answers
them (the same query rules, the same sums); a table for people, `--json` for scripts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from app.cli.jobs import existing_store
from app.cli.runner import run
from app.schemas import USAGE_DIMENSIONS, UsageQuery, UsageReport, UsageTotals

if TYPE_CHECKING:
    from app.runtime import Runtime

# The token columns of the table, in UsageTotals' field names, with their headings.
_TOKENS = (
    ("input_tokens", "input"),
    ("cached_input_tokens", "cache read"),
    ("cache_write_tokens", "cache write"),
    ("output_tokens", "output"),
    ("reasoning_tokens", "reasoning"),
)
_FILTER = "Only jobs of this {}."


def _statuses(totals: UsageTotals) -> str:
    """`3 completed, 1 failed`: the statuses that occurred, in the vocabulary's order."""
    return ", ".join(f"{n} {status}" for status, n in totals.statuses.items() if n) or "-"


def _cells(totals: UsageTotals) -> list[str]:
    return [
        str(totals.requests),
        *(str(getattr(totals, name)) for name, _ in _TOKENS),
        f"{totals.cost_usd:.6f}",
        f"{totals.cache_saved_usd:.6f}",
        _statuses(totals),
    ]


def usage_table(report: UsageReport) -> list[str]:
    """The report as aligned lines: a heading, one line per group, the totals last."""
    window = f"{report.window.start:%Y-%m-%d %H:%M:%S} to {report.window.end:%Y-%m-%d %H:%M:%S} UTC"
    filters = ", ".join(f"{name}={value}" for name, value in report.filters.items())
    heading = [
        *report.group_by,
        "requests",
        *(title for _, title in _TOKENS),
        "cost_usd",
        "saved_usd",
        "statuses",
    ]
    rows = [
        [*(value if value is not None else "-" for value in group.group.values()), *_cells(group)]
        for group in report.groups
    ]
    rows.append([*(["TOTAL"] + [""] * (len(report.group_by) - 1))[: len(report.group_by)]])
    rows[-1].extend(_cells(report.totals))
    widths = [max(len(row[i]) for row in [heading, *rows]) for i in range(len(heading))]
    dims = len(report.group_by)

    def line(cells: list[str]) -> str:
        aligned = [
            cell.ljust(width) if i < dims or i == len(cells) - 1 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(aligned).rstrip()

    return [
        f"usage {window}" + (f" ({filters})" if filters else ""),
        line(heading),
        *(line(row) for row in rows),
    ]


def usage(
    group_by: Annotated[
        list[str] | None,
        typer.Option(
            "--group-by",
            metavar="DIM[,DIM…]",
            help=f"Group by {', '.join(USAGE_DIMENSIONS)} (comma-separated or repeated).",
        ),
    ] = None,
    start: Annotated[
        str | None,
        typer.Option("--from", help="Inclusive start: ISO date or instant (default 30 days ago)."),
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="Exclusive end: ISO date or instant (default now).")
    ] = None,
    key: Annotated[str | None, typer.Option(help=_FILTER.format("key id"))] = None,
    team: Annotated[str | None, typer.Option(help=_FILTER.format("team"))] = None,
    pattern: Annotated[str | None, typer.Option(help=_FILTER.format("pattern or template"))] = None,
    model: Annotated[str | None, typer.Option(help=_FILTER.format("provider/model"))] = None,
    provider: Annotated[str | None, typer.Option(help=_FILTER.format("provider"))] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The API's JSON instead of a table.")] = (
        False
    ),
) -> None:
    """Requests, tokens and cost per key, team, pattern, model, provider or day, as
    `GET /v1/usage` answers them with an admin key."""
    asked: dict[str, str | list[str] | None] = {"from": start, "to": end, "group_by": group_by}
    asked |= {"key": key, "team": team, "pattern": pattern, "model": model, "provider": provider}
    # Bad input ends here, one line per field, exit 2, before the store is opened.
    query = UsageQuery.model_validate({name: value for name, value in asked.items() if value})

    async def work(runtime: Runtime) -> UsageReport:
        return await runtime.audit.reader.usage(query)

    report = run(work, existing_store())
    if as_json:
        typer.echo(report.model_dump_json(indent=2, by_alias=True))
        return
    for text in usage_table(report):
        typer.echo(text)
