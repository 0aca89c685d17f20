"""One label rule (`app.schemas.is_snippet_label`): a pattern's front-matter `snippets:` and a
request's composed snippets accept exactly the same labels."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.catalog.pattern import read_pattern
from app.errors import InvalidPattern, InvalidSnippetLabels
from app.schemas import is_snippet_label
from app.snippets import SnippetLibrary
from app.store.db import Database
from app.store.snippets import SnippetRepository

LABELS = [
    "PERSONA",
    "A",
    "A1_B",
    "TONE_2",
    "persona",
    "Persona",
    "1A",
    "_A",
    "A-B",
    "A B",
    "PERSONA\n",
    " PERSONA",
    "",
    "ÄRGER",
]


def pattern_expecting(label: str) -> bytes:
    # JSON is YAML: a double-quoted scalar carries any label, a trailing newline included.
    return f"---\ndescription: d\nsnippets: [{json.dumps(label)}]\n---\nBody.\n".encode()


def pattern_accepts(label: str) -> bool:
    try:
        read_pattern("p", "root", pattern_expecting(label))
    except InvalidPattern:
        return False
    return True


@given(st.text(max_size=8))
def test_the_rule_is_one_upper_snake_word(label: str) -> None:
    expected = (
        bool(label)
        and "A" <= label[0] <= "Z"
        and all("A" <= c <= "Z" or "0" <= c <= "9" or c == "_" for c in label)
    )
    assert is_snippet_label(label) is expected


@pytest.fixture
async def library(tmp_path: Path) -> AsyncIterator[SnippetLibrary]:
    root = tmp_path / "root"
    (root / "snippets").mkdir(parents=True)
    (root / "snippets" / "nova.md").write_text("---\nname: Nova\n---\nYou are Nova.\n")
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'labels.db'}")
    await db.migrate()
    try:
        yield SnippetLibrary(store=SnippetRepository(db.sessions), file_roots=[root])
    finally:
        await db.aclose()


@pytest.mark.parametrize("label", LABELS, ids=repr)
async def test_patterns_and_composition_accept_the_same_labels(
    library: SnippetLibrary, label: str
) -> None:
    try:
        composed = await library.compose({label: "nova"})
    except InvalidSnippetLabels:
        compose_accepts = False
    else:
        compose_accepts = composed.text == f"{label}:\nYou are Nova."
    assert compose_accepts is pattern_accepts(label) is is_snippet_label(label)
