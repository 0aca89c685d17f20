"""The release side of template labels, on SQLite and PostgreSQL: a failing release gate refuses
a protected move with nothing moved, committed actions are announced as events, and migration 0009
turns every active version of a database written by the previous release into `production`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import text

from app.catalog.labels import TemplateLabels
from app.errors import TestsFailed
from app.schemas import LabelMoveIn, TemplateCreate, TemplateVersion
from app.store.db import Database
from app.store.labels import LabelRepository
from app.store.templates import TemplateRepository


class FailingGate:
    """Fails every version but the first, naming a case, and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    async def failures(self, version: TemplateVersion) -> list[str]:
        self.asked.append(version.version)
        return [] if version.version == 1 else ["greets: prompt does not contain 'Ada'"]


class RecordingEvents:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        self.events.append((event_type, dict(data)))


def release(database: Database, gate: FailingGate, events: RecordingEvents) -> TemplateLabels:
    return TemplateLabels(
        templates=TemplateRepository(database.sessions),
        labels=LabelRepository(database.sessions),
        gate=gate,
        events=events,
        protected=["production", "prod-eu"],
    )


def version(text_: str, **fields: Any) -> TemplateCreate:
    return TemplateCreate.model_validate(
        {"name": "reply", "role": "writer", "template": text_, "variables": [], **fields}
    )


async def test_a_failing_gate_refuses_a_protected_move_and_nothing_moves(
    database: Database,
) -> None:
    gate, events = FailingGate(), RecordingEvents()
    labels = release(database, gate, events)
    first = await labels.create_version(version("One."), author="k1")
    assert (first.version, first.labels) == (1, ["production"])
    with pytest.raises(TestsFailed) as refused:
        await labels.create_version(version("Two.", activate=True), author="k1")
    assert refused.value.failures == ["v2: greets: prompt does not contain 'Ada'"]
    assert refused.value.status_code == 422 and "greets" in str(refused.value)
    assert await labels.templates.latest_version("reply", "writer") == 1  # not stored either
    await labels.create_version(version("Two."), author="k1")
    for label in ("production", "prod-eu"):
        with pytest.raises(TestsFailed):
            await labels.move(
                "reply", "writer", label, LabelMoveIn(version=2, message="go"), author="k1"
            )
    split = LabelMoveIn.model_validate(
        {"split": [{"version": 1, "weight": 90}, {"version": 2, "weight": 10}], "message": "c"}
    )
    with pytest.raises(TestsFailed):
        await labels.move("reply", "writer", "production", split, author="k1")
    assert [info.label for info in await labels.labels.labels_of("reply", "writer")] == [
        "production"
    ]
    assert [m.to_version for m in await labels.history("reply", "writer")] == [1]
    staged = await labels.move(
        "reply", "writer", "staging", LabelMoveIn(version=2, message="try"), author="k2"
    )
    assert staged.version == 2  # not protected: the gate is not asked
    assert gate.asked == [1, 2, 2, 2, 1, 2]


async def test_committed_actions_are_announced_and_refused_ones_are_not(
    database: Database,
) -> None:
    gate, events = FailingGate(), RecordingEvents()
    labels = release(database, gate, events)
    await labels.create_version(version("One."), author="k1")
    await labels.create_version(version("Two."), author="k1")
    with pytest.raises(TestsFailed):
        await labels.move(
            "reply", "writer", "production", LabelMoveIn(version=2, message="no"), author="k1"
        )
    await labels.move(
        "reply", "writer", "staging", LabelMoveIn(version=2, message="try v2"), author="k2"
    )
    await labels.delete("reply", "writer", "staging", message="done", author="k2")
    kinds = [kind for kind, _ in events.events]
    assert kinds == [
        "template.version_created",
        "label.moved",
        "template.version_created",
        "label.moved",
        "label.moved",
    ]
    created = events.events[0][1]
    assert created["template"] == {"name": "reply", "role": "writer"}
    assert (created["version"], created["labels"], created["key_id"]) == (1, ["production"], "k1")
    assert created["checksum"].startswith("sha256:")
    first_move = events.events[1][1]
    assert (first_move["to"], first_move["message"]) == (
        {"version": 1, "split": None},
        "version 1 created (the first)",
    )
    staged, deleted = events.events[3][1], events.events[4][1]
    assert staged["label"] == "staging" and staged["from"] is None
    assert staged["to"] == {"version": 2, "split": None}
    assert (staged["message"], staged["key_id"]) == ("try v2", "k2")
    assert deleted["from"] == {"version": 2, "split": None} and deleted["to"] is None
    assert dt.datetime.fromisoformat(deleted["moved_at"]).tzinfo is not None


# --- migration 0009 on a database written by the previous release ------------------------------

# Rows as release 0007 wrote them: reply/writer v2 active, reply/reviewer v1 active, and
# draft/writer with no active version at all (requests for it got the fallback prompt).
PREVIOUS_RELEASE = [
    ("reply", "writer", 1, "Old {{ who }}.", False),
    ("reply", "writer", 2, "Active {{ who }}.", True),
    ("reply", "writer", 3, "Newer {{ who }}.", False),
    ("reply", "reviewer", 1, "Review.", True),
    ("draft", "writer", 1, "Draft.", False),
]


async def test_migration_0009_keeps_every_active_version_as_production_and_back(
    empty_database_url: str,
) -> None:
    database = Database(empty_database_url)
    await database.migrate("0007")
    async with database.engine.begin() as conn:
        for name, role, number, body, active in PREVIOUS_RELEASE:
            await conn.execute(
                text(
                    "INSERT INTO prompt_templates (name, role, version, template, variables, "
                    "active, checksum, created_at, updated_at) VALUES (:name, :role, :version, "
                    ":template, '[\"who\"]', :active, 'sha256:00', CURRENT_TIMESTAMP, "
                    "CURRENT_TIMESTAMP)"
                ),
                {"name": name, "role": role, "version": number, "template": body, "active": active},
            )
    await database.migrate()
    assert await database.schema_is_current()
    templates = TemplateRepository(database.sessions)
    labels = LabelRepository(database.sessions)
    listed = await templates.list_versions()
    assert [(v.name, v.role, v.version, v.active, v.labels) for v in listed] == [
        ("draft", "writer", 1, False, []),
        ("reply", "reviewer", 1, True, ["production"]),
        ("reply", "writer", 1, False, []),
        ("reply", "writer", 2, True, ["production"]),
        ("reply", "writer", 3, False, []),
    ]
    assert await labels.get("draft", "writer", "production") is None  # still the fallback
    [moved] = await labels.history("reply", "writer")
    assert (moved.author, moved.from_version, moved.to_version) == ("migration", None, 2)
    after = await templates.create_version(version("Four {{ who }}.", variables=["who"]))
    assert (after[0].version, after[0].active) == (4, False)  # production stays on v2

    await database.downgrade("0007")
    async with database.engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT name, role, version FROM prompt_templates WHERE active ORDER BY name, role"
            )
        )
        restored = [tuple(row) for row in rows]
    await database.migrate()
    await database.aclose()
    assert restored == [("reply", "reviewer", 1), ("reply", "writer", 2)]
