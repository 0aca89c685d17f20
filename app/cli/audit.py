"""`genai audit log`: the admin event log, newest first: who did what, to what, when, from
where; a table for people, `--json` for scripts (the `GET /v1/audit/events` page)."""

from __future__ import annotations

import datetime as dt
import json
import re
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from app.api.audit_events import MAX_PAGE
from app.audit.events import decode_cursor
from app.cli.jobs import existing_store
from app.cli.runner import run
from app.errors import ConfigurationError, InvalidCursor
from app.schemas import AdminEvent, AdminEventPage
from app.schemas.usage import Instant
from app.store.events import EventFilter

if TYPE_CHECKING:
    from app.runtime import Runtime

audit_cli = typer.Typer(help="The audit log: admin actions.", no_args_is_help=True)

_AGO = re.compile(r"^(\d{1,6})([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}
_INSTANT: TypeAdapter[dt.datetime | None] = TypeAdapter(Instant)
_HEADING = ["when (UTC)", "actor", "action", "target", "from", "detail"]


def instant(flag: str, text: str | None, *, now: dt.datetime) -> dt.datetime | None:
    """`7d`, `24h`, `30m` ago, or what the API takes: an ISO instant (no offset: UTC) or date."""
    if text is None:
        return None
    if ago := _AGO.match(text):
        return now - dt.timedelta(**{_UNITS[ago[2]]: int(ago[1])})
    try:
        return _INSTANT.validate_python(text)
    except ValidationError as exc:
        problem = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        raise ConfigurationError(flag, f"{problem}, or 7d, 24h, 30m ago") from None


def _actor(event: AdminEvent) -> str:
    who = event.actor_key_id if event.actor == "key" else event.actor
    return f"{who} ({event.actor_team})" if event.actor_team else str(who)


def _cells(event: AdminEvent) -> list[str]:
    detail = json.dumps(event.detail, ensure_ascii=False, separators=(",", ":"))
    return [
        f"{event.at:%Y-%m-%d %H:%M:%S}",
        _actor(event),
        event.action,
        event.target or "-",
        event.remote_addr or "-",
        "" if detail == "{}" else detail,
    ]


def event_table(page: AdminEventPage) -> list[str]:
    """Aligned columns (the last, the detail, as long as it is); a hint for the next page."""
    rows = [_cells(event) for event in page.events]
    widths = [max(len(row[i]) for row in [_HEADING, *rows]) for i in range(len(_HEADING))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    lines = [line(_HEADING), *(line(row) for row in rows)] if rows else ["no admin events"]
    if page.next_cursor is not None:
        lines.append(f"more: --cursor {page.next_cursor}")
    return lines


@audit_cli.command("log")
def audit_log(
    action: Annotated[
        str | None, typer.Option(help="Only this action, e.g. key.created or label.moved.")
    ] = None,
    actor: Annotated[str | None, typer.Option(help="Only actions by this key id.")] = None,
    target: Annotated[
        str | None, typer.Option(help="Only actions on this, e.g. key:ID or snippet:NAME.")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="From: 7d, 24h, 30m ago, an ISO date or instant.")
    ] = None,
    until: Annotated[str | None, typer.Option(help="Before: the same forms as --since.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=MAX_PAGE, help="How many, newest first.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="The next page (printed after `more:`).")] = (
        None
    ),
    as_json: Annotated[bool, typer.Option("--json", help="The API's JSON instead of a table.")] = (
        False
    ),
) -> None:
    """Admin actions, newest first: when, who (key or cli), action, target, address, detail."""
    if cursor is not None:  # a mistyped cursor is bad input: one line, exit 2
        try:
            decode_cursor(cursor)
        except InvalidCursor:
            raise ConfigurationError("--cursor", "is not a cursor `more:` printed") from None
    now = dt.datetime.now(dt.UTC)
    where = EventFilter(
        action=action,
        actor_key_id=actor,
        target=target,
        since=instant("--since", since, now=now),
        until=instant("--until", until, now=now),
    )

    async def work(runtime: Runtime) -> AdminEventPage:
        return await runtime.admin_events.page(where, limit=limit, cursor=cursor)

    page = run(work, existing_store())
    if as_json:
        typer.echo(page.model_dump_json(indent=2))
        return
    for text in event_table(page):
        typer.echo(text)
