"""`genai audit`: the admin event log (`log`: who did what, to what, when, from where; a table
for people, `--json` for scripts, as `GET /v1/audit/events` pages it) and the tamper-evident
audit chain (`verify`, `checkpoint`; issue 20).

Exit codes of verify: 0 the chain verifies; 1 it does not (one line naming the first problem,
its kind, entry and record; the whole report with --json); 2 bad input.
"""

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
from app.schemas import AdminEvent, AdminEventPage, ChainReport
from app.schemas.usage import Instant
from app.store.events import EventFilter

if TYPE_CHECKING:
    from app.runtime import Runtime

audit_cli = typer.Typer(
    help="The audit log of admin actions, and the audit chain: verify it, sign its head.",
    no_args_is_help=True,
)

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


def _chain_off() -> ConfigurationError:
    return ConfigurationError("GENAI_AUDIT__CHAIN_ENABLED", "is false: there is no audit chain")


def _summary(report: ChainReport) -> str:
    counts = (
        f"{report.entries_checked} entries ({report.from_seq}..{report.to_seq}), "
        f"{report.checkpoints_checked} checkpoints"
        + (f" ({report.unsigned_checkpoints} unsigned)" if report.unsigned_checkpoints else "")
        + (f", {report.pruned} pruned" if report.pruned else "")
    )
    problem = report.problem
    if problem is None:
        more = f"; more from {report.next_from}" if report.next_from is not None else ""
        return f"ok: {counts}{more}"
    where = " ".join(
        part
        for part in (
            f"at seq {problem.seq}" if problem.seq is not None else "",
            f"ref {problem.ref}" if problem.ref is not None else "",
        )
        if part
    )
    return f"{problem.kind} {where}: {problem.detail} (checked {counts})"


@audit_cli.command("verify")
def audit_verify(
    from_seq: Annotated[int, typer.Option("--from", min=1, help="First entry to check.")] = 1,
    to_seq: Annotated[
        int | None, typer.Option("--to", min=1, help="Last entry to check (default: the head).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The whole report as JSON.")] = False,
) -> None:
    """Walk the chain and name the first entry edited, deleted, inserted or reordered, and a
    tail cut since the last checkpoint: exit 0 ok, 1 a problem, 2 bad input."""
    if to_seq is not None and to_seq < from_seq:
        raise ConfigurationError("--to", f"must not be below --from ({from_seq})")

    async def work(runtime: Runtime) -> ChainReport:
        if runtime.chain is None:
            raise _chain_off()
        return await runtime.chain.verify(from_seq, to_seq)

    report = run(work, existing_store())
    typer.echo(report.model_dump_json(indent=2) if as_json else _summary(report))
    if not report.ok:
        raise typer.Exit(code=1)


@audit_cli.command("checkpoint")
def audit_checkpoint() -> None:
    """Link what is finished, then sign the chain head now (reason `manual`)."""

    async def work(runtime: Runtime) -> str:
        if runtime.chainer is None:
            raise _chain_off()
        await runtime.chainer.run_once(wait=True)
        checkpoint = await runtime.chainer.checkpoint("manual")
        signed = f"signed by {checkpoint.kid}" if checkpoint.kid else "unsigned (signing is off)"
        return f"checkpoint at seq {checkpoint.seq}: {checkpoint.head_sha256} {signed}"

    typer.echo(run(work, existing_store()))
