"""The snippet library: file snippets, tags, metadata, the composer, database-over-file
precedence, and the API and CLI on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from app.catalog import PatternCatalog
from app.errors import InvalidSnippetLabels, SnippetExists, SnippetNotFound
from app.schemas import Snippet, SnippetIn
from app.snippets import SnippetLibrary
from app.snippets import files as snippet_files
from app.snippets.fields import has_tag, normalise_tags
from app.snippets.files import FileSnippets
from app.store.db import Database
from app.store.snippets import SnippetRepository
from app.store.tables import SnippetRow
from app.tracking import template_checksum
from tests.fakes.provider_server import FakeProviderServer
from tests.support import SHIPPED_PATTERNS, serve_app, settings_for
from tests.support import run_cli as run

FORMAL = "---\nname: Formal\ntags: [tone, formal]\n---\nBe formal.\n"
NOVA = (
    "---\nname: Nova\ndescription: The support persona.\ntags: persona, Support\n"
    "metadata:\n  voice: nova\n---\n\nYou are Nova, a support agent.\n\n"
)


def write(root: Path, identifier: str, text: str) -> Path:
    path = root / "snippets" / f"{identifier}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def snippet_in(identifier: str = "nova", **fields: Any) -> SnippetIn:
    body: dict[str, Any] = {"identifier": identifier, "name": "Nova", "text": "From the database."}
    return SnippetIn(**{**body, **fields})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "patterns"
    path.mkdir()
    return path


@pytest.fixture
async def sqlite(tmp_path: Path) -> AsyncIterator[Database]:
    """For tests about files only: one backend is enough."""
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'files.db'}")
    await db.migrate()
    try:
        yield db
    finally:
        await db.aclose()


def library_on(db: Database, root: Path) -> SnippetLibrary:
    return SnippetLibrary(store=SnippetRepository(db.sessions), file_roots=[root])


# --- file snippets ----------------------------------------------------------------------------


async def test_file_snippets_take_tags_as_a_string_or_a_list(root: Path, sqlite: Database) -> None:
    write(root, "nova", NOVA)
    write(root, "formal", FORMAL)
    library = library_on(sqlite, root)
    nova = await library.get("nova")
    assert (nova.name, nova.description, nova.source) == ("Nova", "The support persona.", "file")
    assert nova.tags == ["persona", "Support"]
    assert nova.text == "You are Nova, a support agent."
    assert nova.metadata == {"voice": "nova"}
    formal = await library.get("formal")
    assert (formal.tags, formal.metadata, formal.description) == (["tone", "formal"], {}, "")


def test_tags_are_stripped_deduplicated_and_keep_their_first_spelling() -> None:
    assert normalise_tags(" Persona, , persona,Support ,") == ["Persona", "Support"]
    assert normalise_tags(["  a ", "", "A", "b"]) == ["a", "b"]
    assert normalise_tags(None) == []
    with pytest.raises(ValueError):
        normalise_tags({"a": 1})


def test_metadata_may_be_a_mapping_or_json_text(root: Path) -> None:
    write(root, "a", '---\nmetadata: \'{"voice": "nova", "speed": 1.2}\'\n---\nA.\n')
    write(root, "b", "---\nmetadata: {voice: alloy}\n---\nB.\n")
    files = FileSnippets([root])
    files.refresh()
    assert files.get("a") and files.get("a").metadata == {"voice": "nova", "speed": 1.2}  # type: ignore[union-attr]
    assert files.get("b") and files.get("b").metadata == {"voice": "alloy"}  # type: ignore[union-attr]


@pytest.mark.parametrize("metadata", ["not json {", "'[1, 2]'", "''", "[1, 2]", "42"])
def test_bad_file_metadata_reads_as_empty_with_a_warning(root: Path, metadata: str) -> None:
    write(root, "a", f"---\nname: A\nmetadata: {metadata}\n---\nA.\n")
    files = FileSnippets([root])
    with capture_logs() as logs:
        files.refresh()
    snippet = files.get("a")
    assert snippet is not None and snippet.metadata == {}
    assert any(e["event"] == "snippet_metadata_invalid" and e["snippet"] == "a" for e in logs)


def test_unknown_front_matter_key_skips_only_that_file(root: Path) -> None:
    write(root, "good", FORMAL)
    write(root, "typo", "---\nname: Typo\ntagz: a, b\n---\nText.\n")
    files = FileSnippets([root])
    with capture_logs() as logs:
        assert files.refresh() is True
    assert files.get("typo") is None
    assert [s.identifier for s in files.all()] == ["good"]
    (warning,) = [e for e in logs if e["event"] == "snippet_file_invalid"]
    assert warning["log_level"] == "warning" and "tagz" in warning["problems"][0]


@pytest.mark.parametrize(
    ("identifier", "text"),
    [
        ("no-front-matter", "Just text.\n"),
        ("unclosed", "---\nname: X\nText.\n"),
        ("empty-body", "---\nname: X\n---\n\n"),
        ("bad-tags", "---\ntags: {a: 1}\n---\nText.\n"),
        ("bad-name", "---\nname: [1, 2]\n---\nText.\n"),
        ("-bad-identifier", "---\nname: X\n---\nText.\n"),
    ],
)
def test_unusable_files_are_skipped_with_a_warning(root: Path, identifier: str, text: str) -> None:
    write(root, identifier, text)
    (root / "snippets" / "latin1.md").write_bytes("---\nname: é\n---\nx\n".encode("latin-1"))
    files = FileSnippets([root])
    with capture_logs() as logs:
        files.refresh()
    assert files.all() == []
    assert {e["snippet"] for e in logs if e["event"] == "snippet_file_invalid"} == {
        identifier,
        "latin1",
    }


def test_refresh_files_picks_up_edits_additions_and_removals(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(root, "formal", FORMAL)
    files = FileSnippets([root])
    assert files.refresh() is True
    reads: list[str] = []
    load = snippet_files._load

    def counted_load(path: Path) -> Snippet | None:
        reads.append(path.stem)
        return load(path)

    monkeypatch.setattr(snippet_files, "_load", counted_load)
    assert files.refresh() is False
    assert reads == []  # unchanged (mtime, size, inode): not re-read

    path.write_text(FORMAL.replace("Be formal.", "Be very formal."), encoding="utf-8")
    write(root, "nova", NOVA)
    assert files.refresh() is True
    assert sorted(reads) == ["formal", "nova"]
    assert files.get("formal") and files.get("formal").text == "Be very formal."  # type: ignore[union-attr]

    path.unlink()
    assert files.refresh() is True
    assert files.get("formal") is None and files.get("nova") is not None


async def test_library_refresh_files_reports_changes(root: Path, sqlite: Database) -> None:
    library = library_on(sqlite, root)
    assert await library.list() == []
    write(root, "formal", FORMAL)
    assert library.refresh_files() is True
    assert [s.identifier for s in await library.list()] == ["formal"]
    assert library.refresh_files() is False


def test_the_first_root_wins_and_only_top_level_md_files_count(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    write(first, "formal", FORMAL)
    write(second, "formal", FORMAL.replace("Be formal.", "Second root."))
    write(second, "extra", FORMAL)
    write(second, "nested/deep", FORMAL)
    (second / "snippets" / "notes.txt").write_text("ignored", encoding="utf-8")
    files = FileSnippets([first, second])
    files.refresh()
    assert files.get("formal") and files.get("formal").text == "Be formal."  # type: ignore[union-attr]
    assert sorted(s.identifier for s in files.all()) == ["extra", "formal"]


def test_the_pattern_catalog_ignores_the_snippets_folder(root: Path) -> None:
    (root / "greet.md").write_text("---\ndescription: Greet.\n---\nHi {{ who }}.\n")
    write(root, "formal", FORMAL)
    write(root, "typo", "---\ntagz: x\n---\nT.\n")
    adapter = PatternCatalog(roots=[root])
    assert adapter.names() == ["greet"]
    assert adapter.problems() == {}


def test_the_shipped_example_snippets_load_cleanly() -> None:
    files = FileSnippets([SHIPPED_PATTERNS])
    with capture_logs() as logs:
        files.refresh()
    assert [e for e in logs if e["log_level"] == "warning"] == []
    persona = files.get("persona-support")
    assert persona is not None and persona.tags == ["persona", "support"]
    assert files.get("tone-formal") is not None


# --- tags -------------------------------------------------------------------------------------


def test_tag_matching_is_exact_and_case_insensitive() -> None:
    assert has_tag(["Style", "tone"], "style")
    assert has_tag(["style"], "  STYLE ")
    assert not has_tag(["lifestyle"], "style")
    assert not has_tag(["style"], "styl")
    assert not has_tag([], "style")


async def test_list_by_tag_never_matches_a_substring(root: Path, sqlite: Database) -> None:
    write(root, "plain", "---\ntags: Style, layout\n---\nPlain.\n")
    write(root, "living", "---\ntags: lifestyle\n---\nLiving.\n")
    library = library_on(sqlite, root)
    await library.create(snippet_in("db-style", tags=["STYLE"]))
    assert [s.identifier for s in await library.list(tag="style")] == ["db-style", "plain"]
    assert [s.identifier for s in await library.list(tag="LifeStyle")] == ["living"]
    assert await library.list(tag="styl") == []
    assert len(await library.list(tag="  ")) == 3


# --- the composer -----------------------------------------------------------------------------


async def test_compose_renders_labeled_blocks_in_order(root: Path, sqlite: Database) -> None:
    write(root, "formal", FORMAL)
    library = library_on(sqlite, root)
    await library.create(snippet_in("nova", text="You are Nova."))
    composed = await library.compose({"PERSONA": "nova", "TONE": "formal"})
    assert composed.text == "PERSONA:\nYou are Nova.\n\nTONE:\nBe formal."
    assert composed.ids == ["nova", "formal"]
    reverse = await library.compose({"TONE_OF_VOICE": "formal", "PERSONA2": "nova"})
    assert reverse.text == "TONE_OF_VOICE:\nBe formal.\n\nPERSONA2:\nYou are Nova."
    assert reverse.ids == ["formal", "nova"]
    assert (await library.compose({})).text == ""


async def test_compose_refuses_unknown_and_inactive_snippets(root: Path, sqlite: Database) -> None:
    write(root, "formal", FORMAL)
    library = library_on(sqlite, root)
    await library.create(snippet_in("sleepy", active=False))
    for identifier in ("missing", "sleepy"):
        with pytest.raises(SnippetNotFound) as caught:
            await library.compose({"TONE": "formal", "PERSONA": identifier})
        assert caught.value.identifier == identifier


async def test_compose_checks_every_label(root: Path, sqlite: Database) -> None:
    write(root, "formal", FORMAL)
    library = library_on(sqlite, root)
    labels = {"persona": "formal", "TONE": "formal", "1X": "formal", "A-B": "formal", "X\n": "x"}
    with pytest.raises(InvalidSnippetLabels) as caught:
        await library.compose(labels)
    assert caught.value.labels == ["persona", "1X", "A-B", "X\n"]
    assert caught.value.status_code == 422


# --- database over files ----------------------------------------------------------------------


async def test_a_database_snippet_overrides_the_file_one(root: Path, database: Database) -> None:
    write(root, "formal", FORMAL)
    library = library_on(database, root)
    await library.create(snippet_in("formal", text="Database formal."))
    assert (await library.get("formal")).source == "database"
    listed = await library.list()
    assert [(s.identifier, s.source, s.text) for s in listed] == [
        ("formal", "database", "Database formal.")
    ]
    assert (await library.compose({"TONE": "formal"})).text == "TONE:\nDatabase formal."
    await library.delete("formal")
    assert (await library.get("formal")).source == "file"


async def test_an_inactive_override_hides_the_file_snippet(root: Path, database: Database) -> None:
    write(root, "formal", FORMAL)
    library = library_on(database, root)
    updated = await library.update("formal", snippet_in("formal", active=False))
    assert (updated.source, updated.active) == ("database", False)
    with pytest.raises(SnippetNotFound):
        await library.get("formal")
    assert await library.list() == []
    assert [s.source for s in await library.list(include_inactive=True)] == ["database"]


async def test_crud_semantics_of_the_library(root: Path, database: Database) -> None:
    write(root, "formal", FORMAL)
    library = library_on(database, root)
    created = await library.create(snippet_in(tags=["a", " A", "b "], metadata={"voice": "x"}))
    assert (created.tags, created.metadata, created.source) == (
        ["a", "b"],
        {"voice": "x"},
        "database",
    )
    with pytest.raises(SnippetExists):
        await library.create(snippet_in())
    replaced = await library.update("nova", snippet_in(name="Nova 2", text="New."))
    assert (replaced.name, replaced.text, replaced.tags, replaced.metadata) == (
        "Nova 2",
        "New.",
        [],
        {},
    )
    with pytest.raises(SnippetNotFound, match="to update"):
        await library.update("ghost", snippet_in("ghost"))
    with pytest.raises(ValueError):
        await library.update("nova", snippet_in("other"))
    with pytest.raises(SnippetNotFound, match="file snippet"):
        await library.delete("formal")
    await library.delete("nova")
    with pytest.raises(SnippetNotFound, match="No database snippet"):
        await library.delete("nova")


@pytest.mark.parametrize("stored", ["oops", [1, 2], None, 7])
async def test_non_object_metadata_in_the_database_reads_as_empty(
    root: Path, database: Database, stored: Any
) -> None:
    library = library_on(database, root)
    async with database.sessions.begin() as session:
        session.add(
            SnippetRow(
                identifier="raw", name="Raw", description="", text="T.", tags="a, b", meta=stored
            )
        )
    with capture_logs() as logs:
        snippet = await library.get("raw")
        composed = await library.compose({"X": "raw"})
    assert (snippet.metadata, snippet.tags, composed.text) == ({}, ["a", "b"], "X:\nT.")
    assert any(e["event"] == "snippet_metadata_invalid" for e in logs)


# --- the API ----------------------------------------------------------------------------------


@pytest.fixture
async def http(
    fake: FakeProviderServer, database_url: str, root: Path
) -> AsyncIterator[httpx.AsyncClient]:
    (root / "greet.md").write_text("---\ndescription: Greet.\n---\nHi {{ who }}.\n")
    write(root, "formal", FORMAL)
    settings = settings_for(
        fake, database_url=database_url, database_auto_migrate=True, pattern_dir=[root]
    )
    async with serve_app(settings) as client:
        yield client


BODY = {
    "identifier": "nova",
    "name": "Nova",
    "description": "Support persona.",
    "text": "You are Nova.",
    "tags": ["persona", " Support "],
    "metadata": {"voice": "nova"},
}


async def test_api_create_get_list_and_conflict(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/snippets", json=BODY)
    assert resp.status_code == 201, resp.text
    created = resp.json()
    stored_at = dt.datetime.fromisoformat(created.pop("created_at"))
    assert stored_at.tzinfo is not None  # when this version was stored, for the console
    assert created == {
        **BODY,
        "tags": ["persona", "Support"],
        "active": True,
        "source": "database",
        "version": 1,
        "checksum": template_checksum("You are Nova."),
        "live": True,
    }
    again = await http.post("/v1/snippets", json=BODY)
    assert again.status_code == 409 and again.json()["error"]["type"] == "snippet_exists"
    got = await http.get("/v1/snippets/nova")
    assert got.status_code == 200 and got.json()["metadata"] == {"voice": "nova"}
    listed = (await http.get("/v1/snippets")).json()["snippets"]
    assert [(s["identifier"], s["source"]) for s in listed] == [
        ("formal", "file"),
        ("nova", "database"),
    ]
    by_tag = (await http.get("/v1/snippets", params={"tag": "SUPPORT"})).json()["snippets"]
    assert [s["identifier"] for s in by_tag] == ["nova"]
    bad = await http.post("/v1/snippets", json={**BODY, "identifier": "no spaces"})
    assert bad.status_code == 422 and bad.json()["error"]["type"] == "invalid_request"


async def test_api_update_replaces_and_overrides_files(http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/snippets", json=BODY)).status_code == 201
    resp = await http.put(
        "/v1/snippets/nova", json={"identifier": "nova", "name": "N", "text": "T"}
    )
    assert resp.status_code == 200, resp.text
    assert {**resp.json(), "created_at": None} == {
        "created_at": None,  # when version 2 was stored: a time (test above)
        "identifier": "nova",
        "name": "N",
        "description": "",
        "text": "T",
        "tags": [],
        "metadata": {},
        "active": True,
        "source": "database",
        "version": 2,  # an edit is the next version
        "checksum": template_checksum("T"),
        "live": True,
    }
    mismatch = await http.put("/v1/snippets/nova", json={**BODY, "identifier": "other"})
    assert mismatch.status_code == 422
    assert mismatch.json()["error"]["errors"][0]["loc"] == ["body", "identifier"]
    override = await http.put("/v1/snippets/formal", json={**BODY, "identifier": "formal"})
    assert override.status_code == 200 and override.json()["source"] == "database"
    missing = await http.put("/v1/snippets/ghost", json={**BODY, "identifier": "ghost"})
    assert missing.status_code == 404 and missing.json()["error"]["snippet"] == "ghost"


async def test_api_inactive_snippets_and_delete(http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/snippets", json={**BODY, "active": False})).status_code == 201
    hidden = await http.get("/v1/snippets/nova")
    assert hidden.status_code == 404 and hidden.json()["error"]["type"] == "snippet_not_found"
    assert [s["identifier"] for s in (await http.get("/v1/snippets")).json()["snippets"]] == [
        "formal"
    ]
    everything = await http.get("/v1/snippets", params={"include_inactive": "true"})
    assert [s["identifier"] for s in everything.json()["snippets"]] == ["formal", "nova"]
    deleted = await http.delete("/v1/snippets/nova")
    assert deleted.status_code == 204 and deleted.content == b""
    assert (await http.delete("/v1/snippets/nova")).status_code == 404
    file_only = await http.delete("/v1/snippets/formal")
    assert file_only.status_code == 404
    assert "file snippet" in file_only.json()["error"]["message"]
    assert (await http.get("/v1/snippets/formal")).json()["source"] == "file"


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli_db(tmp_path: Path, cli_env: Callable[..., None], database_url: str) -> Path:
    """GENAI_* aimed at the test database and a root with one file snippet."""
    pattern_root = tmp_path / "patterns"
    pattern_root.mkdir(exist_ok=True)
    (pattern_root / "greet.md").write_text("---\ndescription: Greet.\n---\nHello {{ name }}.\n")
    write(pattern_root, "formal", FORMAL)
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(pattern_root),
    )
    return tmp_path


def test_cli_create_list_show_and_delete(cli_db: Path) -> None:
    text = cli_db / "nova.txt"
    text.write_text("You are Nova.\n", encoding="utf-8")
    created = run(
        "snippets", "create", "nova", "--name", "Nova", "--file", str(text),
        "--tag", "persona", "--tag", "support, Voice", "--metadata", '{"voice": "nova"}',
        "--description", "Support persona.",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    body = json.loads(created.stdout)
    assert (body["text"], body["tags"], body["metadata"]) == (
        "You are Nova.",
        ["persona", "support", "Voice"],
        {"voice": "nova"},
    )
    listed = run("snippets", "list")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [["formal", "file"], ["nova", "database"]]
    tagged = run("snippets", "list", "--tag", "VOICE")
    assert [line.split()[0] for line in tagged.stdout.splitlines()] == ["nova"]
    shown = run("snippets", "show", "formal")
    assert shown.exit_code == 0 and json.loads(shown.stdout)["source"] == "file"
    assert run("snippets", "create", "nova", "--name", "N", "-f", str(text)).exit_code == 1
    deleted = run("snippets", "delete", "nova")
    assert deleted.exit_code == 0 and deleted.stdout.strip() == "deleted nova"
    gone = run("snippets", "show", "nova")
    assert gone.exit_code == 1
    assert json.loads(gone.stderr)["error"]["type"] == "snippet_not_found"


def test_cli_rejects_bad_input_before_touching_the_database(cli_db: Path) -> None:
    text = cli_db / "x.txt"
    text.write_text("X.", encoding="utf-8")
    not_object = run("snippets", "create", "x", "--name", "X", "-f", str(text), "--metadata", "[1]")
    assert not_object.exit_code == 2 and "JSON object" in not_object.output
    bad_id = run("snippets", "create", "bad id", "--name", "X", "-f", str(text))
    assert bad_id.exit_code == 2 and "identifier" in bad_id.output
    file_only = run("snippets", "delete", "formal")
    assert file_only.exit_code == 1 and "file snippet" in file_only.stderr
