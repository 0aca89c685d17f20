"""The admin event log below HTTP: migration 0012 up and down on SQLite and PostgreSQL, the
chainer's partial index, and `genai audit log` (table, filters, --json, bad input: exit 2)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from app.audit.events import CLI, AdminEvents
from app.store.db import Database
from app.store.events import AdminEventRepository, EventFilter
from tests.support import run_cli as run


def _tables_and_indexes(connection: object) -> tuple[set[str], set[str]]:
    inspector = inspect(connection)
    tables = set(inspector.get_table_names())
    if "audit_events" not in tables:
        return tables, set()
    return tables, {index["name"] for index in inspector.get_indexes("audit_events")}


async def test_migration_0012_adds_the_log_and_takes_it_away_again(empty_database_url: str) -> None:
    database = Database(empty_database_url)
    try:
        await database.migrate()
        events = AdminEvents(AdminEventRepository(database.sessions))
        recorded = await events.record(CLI, "key.revoked", target="key:abc")
        async with database.engine.connect() as conn:
            tables, indexes = await conn.run_sync(_tables_and_indexes)
            unchained = await conn.scalar(
                text("SELECT count(*) FROM audit_events WHERE chain_seq IS NULL")
            )
        assert "audit_events" in tables
        assert {
            "ix_audit_events_at",
            "ix_audit_events_action",
            "ix_audit_events_target",
            "ix_audit_events_unchained",
        } <= indexes
        assert unchained == 1
        page = await events.page(EventFilter(), limit=10)
        assert [e.id for e in page.events] == [recorded.id]

        await database.downgrade("0010")
        async with database.engine.connect() as conn:
            tables, _ = await conn.run_sync(_tables_and_indexes)
        assert "audit_events" not in tables and "webhook_deliveries" in tables

        await database.migrate()
        assert await database.schema_is_current()
        assert (await events.page(EventFilter(), limit=10)).events == []
    finally:
        await database.aclose()


@pytest.fixture
def store(cli_env: Callable[..., None], tmp_path: Path) -> Path:
    data = tmp_path / "data"
    cli_env(GENAI_DATA_DIR=str(data))
    return data


def test_cli_actions_are_logged_and_the_log_prints_filters_and_pages(store: Path) -> None:
    assert run("audit", "log").exit_code == 2  # no store yet: said, not created empty
    assert run("teams", "create", "ops", "--rpm", "10").exit_code == 0
    minted = run("keys", "create", "--scope", "complete", "--name", "bot", "--team", "ops")
    assert minted.exit_code == 0, minted.output
    secret = minted.stdout.splitlines()[-1]
    key_id = minted.stdout.split()[3]
    assert run("keys", "revoke", key_id).exit_code == 0

    table = run("audit", "log")
    assert table.exit_code == 0, table.output
    heading, *rows = table.stdout.splitlines()
    assert heading.split()[:3] == ["when", "(UTC)", "actor"]
    assert [row.split()[3:5] for row in rows] == [
        ["key.revoked", f"key:{key_id}"],
        ["key.created", f"key:{key_id}"],
        ["team.created", "team:ops"],
    ]
    assert all(row.split()[2] == "cli" for row in rows)
    assert secret not in table.stdout

    only = run("audit", "log", "--action", "key.created", "--since", "1d", "--json")
    page = json.loads(only.stdout)
    [event] = page["events"]
    assert (event["actor"], event["target"], event["remote_addr"]) == ("cli", f"key:{key_id}", None)
    assert event["detail"] == {"name": "bot", "scope": "complete", "team": "ops"}
    assert secret not in only.stdout

    first = run("audit", "log", "--limit", "2")
    more = first.stdout.splitlines()[-1]
    assert more.startswith("more: --cursor ")
    rest = run("audit", "log", "--limit", "2", "--cursor", more.split()[-1])
    assert [row.split()[3] for row in rest.stdout.splitlines()[1:]] == ["team.created"]
    assert run("audit", "log", "--since", "2999-01-01").stdout.strip() == "no admin events"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--since", "last tuesday"], "genai: --since: 'last tuesday' is not an ISO date"),
        (["--until", "2026-13-01"], "genai: --until: '2026-13-01' is not an ISO date"),
        (["--cursor", "nope"], "genai: --cursor: is not a cursor"),
    ],
)
def test_bad_cli_input_is_one_line_and_exit_2(store: Path, args: list[str], says: str) -> None:
    result = run("audit", "log", *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(says) and len(result.stderr.splitlines()) == 1


def test_template_label_and_snippet_commands_are_logged_as_the_routes_log_them(
    store: Path, tmp_path: Path
) -> None:
    text = tmp_path / "reply.j2"
    text.write_text("Hello {{ who }}", encoding="utf-8")
    snippet = tmp_path / "tone.txt"
    snippet.write_text("Be brief.", encoding="utf-8")
    commands = [
        ["templates", "create", "reply", "writer", "-f", str(text), "-v", "who"],
        ["templates", "label", "reply", "writer", "staging", "--version", "1", "-m", "try"],
        ["templates", "activate", "reply", "writer", "1"],
        ["snippets", "create", "tone", "--name", "Tone", "-f", str(snippet)],
        ["snippets", "update", "tone", "-f", str(snippet)],
        ["snippets", "activate", "tone", "1"],
        ["snippets", "delete", "tone"],
    ]
    for command in commands:
        result = run(*command)
        assert result.exit_code == 0, (command, result.output)
    page = json.loads(run("audit", "log", "--json").stdout)
    assert [(e["action"], e["target"], e["actor"]) for e in reversed(page["events"])] == [
        ("template.version_created", "template:reply/writer", "cli"),
        ("label.moved", "template:reply/writer@staging", "cli"),
        ("template.activated", "template:reply/writer", "cli"),
        ("snippet.created", "snippet:tone", "cli"),
        ("snippet.updated", "snippet:tone", "cli"),
        ("snippet.activated", "snippet:tone", "cli"),
        ("snippet.deleted", "snippet:tone", "cli"),
    ]
    assert "Be brief" not in json.dumps(page)
