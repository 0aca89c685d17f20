"""Versioned snippets (issue 19): immutable versions, one live, rollback, provenance, replay, drift,
the release events, and the migration of snippets stored by the previous release."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.cache.key import CACHE_KEY_PREFIX, cache_key
from app.errors import SnippetConflict, SnippetNotFound
from app.schemas import (
    ModelParams,
    Provenance,
    RenderedPrompt,
    Snippet,
    SnippetIn,
    SnippetUse,
)
from app.snippets import SnippetLibrary
from app.store.db import Database
from app.store.jobs import JobRepository
from app.store.snippets import SnippetRepository
from app.tracking import canonical_json, sha256_hex, template_checksum
from tests.fakes.provider_server import FakeProviderServer
from tests.support import run_cli as run
from tests.support import serve_app, settings_for

NOTE = "---\ndescription: Write a note.\n---\nWrite a note.\n"


class RecordingSink:
    """An EventSink that keeps what it was given."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        self.events.append((event_type, dict(data)))


def nova(text: str = "You are Nova.", **fields: Any) -> SnippetIn:
    return SnippetIn(**{"identifier": "nova", "name": "Nova", "text": text, **fields})


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "patterns"
    path.mkdir()
    (path / "note.md").write_text(NOTE, encoding="utf-8")
    return path


def library_on(db: Database, root: Path, sink: RecordingSink | None = None) -> SnippetLibrary:
    return SnippetLibrary(store=SnippetRepository(db.sessions), file_roots=[root], events=sink)


# --- the library over a real database --------------------------------------------------------


async def test_edits_add_versions_the_live_one_is_served_and_activate_rolls_back(
    database: Database, root: Path
) -> None:
    sink = RecordingSink()
    library = library_on(database, root, sink)
    first = await library.create(nova())
    second = await library.update("nova", nova("You are Nova, v2."))
    served = await library.get("nova")
    assert (first.version, second.version, served.version) == (1, 2, 2)
    assert served.checksum == template_checksum("You are Nova, v2.")
    listing = await library.versions("nova")
    assert (listing.live_version, [v.version for v in listing.versions]) == (2, [1, 2])
    assert [v.live for v in listing.versions] == [False, True]
    assert (await library.version("nova", 1)).text == "You are Nova."

    rolled = await library.activate("nova", 1)
    assert (rolled.version, (await library.get("nova")).text) == (1, "You are Nova.")
    assert (await library.compose({"PERSONA": "nova"})).used == [
        SnippetUse(
            identifier="nova", version=1, source="database", sha256=template_checksum(first.text)
        )
    ]
    third = await library.update("nova", nova("You are Nova, v3."))
    assert third.version == 3  # numbering continues after a rollback

    assert sink.events == [
        (
            "snippet.version_created",
            {
                "identifier": "nova",
                "version": 1,
                "checksum": first.checksum,
                "previous_version": None,
            },
        ),
        (
            "snippet.version_created",
            {
                "identifier": "nova",
                "version": 2,
                "checksum": second.checksum,
                "previous_version": 1,
            },
        ),
        (
            "snippet.activated",
            {"identifier": "nova", "version": 1, "checksum": first.checksum, "previous_version": 2},
        ),
        (
            "snippet.version_created",
            {"identifier": "nova", "version": 3, "checksum": third.checksum, "previous_version": 1},
        ),
    ]


async def test_delete_retires_keeps_versions_and_activate_restores(
    database: Database, root: Path
) -> None:
    library = library_on(database, root)
    await library.create(nova())
    await library.update("nova", nova("Second."))
    await library.delete("nova")
    with pytest.raises(SnippetNotFound):
        await library.get("nova")
    listing = await library.versions("nova")
    assert (listing.live_version, len(listing.versions)) == (None, 2)
    with pytest.raises(SnippetNotFound):  # retired: PUT does not bring it back, POST does
        await library.update("nova", nova("Third."))
    recreated = await library.create(nova("Third."))
    assert recreated.version == 3
    await library.delete("nova")
    replayed = await library.compose({"PERSONA": "nova"}, pinned={"nova": 1})  # replay still can
    assert replayed.text == "PERSONA:\nYou are Nova."
    assert (await library.activate("nova", 2)).text == "Second."
    with pytest.raises(SnippetNotFound) as missing:
        await library.activate("nova", 9)
    assert "no version 9" in str(missing.value)


async def test_concurrent_edits_each_store_a_version_or_get_a_clean_conflict(
    database: Database, root: Path
) -> None:
    library = library_on(database, root)
    creates = await asyncio.gather(
        *(library.create(nova(f"Create {n}.")) for n in range(4)), return_exceptions=True
    )
    assert sorted(type(r).__name__ for r in creates) == ["Snippet"] + ["SnippetExists"] * 3
    stored: list[Snippet] = []
    for _ in range(3):  # a few rounds: a deadlock or a half-applied edit shows in one of them
        results = await asyncio.gather(
            *(library.update("nova", nova(f"Edit {n}.")) for n in range(6)),
            return_exceptions=True,
        )
        unexpected = [r for r in results if isinstance(r, BaseException)]
        assert all(isinstance(r, SnippetConflict) for r in unexpected), unexpected
        stored += [r for r in results if isinstance(r, Snippet)]
    assert stored, "edits win"
    listing = await library.versions("nova")
    versions = [v.version for v in listing.versions]
    assert versions == list(range(1, len(stored) + 2))  # no gaps, no duplicates
    assert sorted(s.version or 0 for s in stored) == versions[1:]  # each answer names its own
    assert [v.version for v in listing.versions if v.live] == [listing.live_version]
    assert (await library.get("nova")).version == listing.live_version


async def test_replay_pins_database_versions_and_file_snippets_use_no_version(
    database: Database, root: Path
) -> None:
    (root / "snippets").mkdir()
    (root / "snippets" / "formal.md").write_text("---\nname: F\n---\nBe formal.\n")
    library = library_on(database, root)
    await library.create(nova())
    await library.update("nova", nova("Newer."))
    composed = await library.compose({"PERSONA": "nova", "TONE": "formal"}, pinned={"nova": 1})
    assert composed.text == "PERSONA:\nYou are Nova.\n\nTONE:\nBe formal."
    assert [(u.identifier, u.version, u.source) for u in composed.used] == [
        ("nova", 1, "database"),
        ("formal", None, "file"),
    ]
    assert composed.used[1].sha256 == template_checksum("Be formal.")


# --- the cache key ---------------------------------------------------------------------------


def _provenance(uses: list[SnippetUse]) -> Provenance:
    return Provenance(
        pattern_name="note",
        pattern_base_path="p",
        pattern_content_hash="sha256:a",
        variables_hash="sha256:b",
        user_prompt_hash="sha256:c",
        provider="openai",
        model="m",
        snippet_ids=[u.identifier for u in uses],
        snippet_versions=uses,
    )


def test_the_cache_key_changes_with_a_used_snippets_text_and_only_then() -> None:
    prompt = RenderedPrompt.model_validate(
        {"system": "", "messages": [{"role": "user", "content": "hi"}]}
    )

    def key(provenance: Provenance) -> str:
        return cache_key(provenance=provenance, params=ModelParams(), prompt=prompt)

    def use(sha: str) -> SnippetUse:
        return SnippetUse(identifier="nova", version=1, source="database", sha256=sha)

    assert key(_provenance([use("sha256:1")])) != key(_provenance([use("sha256:2")]))
    # A snippet-free request keeps the key it had before snippets had versions.
    without = _provenance([])
    material: dict[str, Any] = {
        "pattern_name": "note",
        "pattern_content_hash": "sha256:a",
        "variables_hash": "sha256:b",
        "user_prompt_hash": "sha256:c",
        "snippet_ids": [],
        "provider": "openai",
        "model": "m",
        "params": ModelParams().model_dump(mode="json"),
        "prompt_hash": sha256_hex(canonical_json(prompt.model_dump(mode="json")).encode()),
        "output_schema_hash": None,
    }
    digest = sha256_hex(canonical_json(material).encode()).removeprefix("sha256:")
    assert key(without) == CACHE_KEY_PREFIX + digest


# --- over HTTP: provenance, drift, replay, the version routes ---------------------------------


@pytest.fixture
async def http(
    fake: FakeProviderServer, database_url: str, root: Path, tmp_path: Path
) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        pattern_dir=[root],
        data_dir=tmp_path / "data",
    )
    async with serve_app(settings) as client:
        yield client


REQUEST = {"pattern_key": "note", "user_prompt": "hi", "snippets": {"PERSONA": "nova"}}
BODY = {"identifier": "nova", "name": "Nova", "text": "You are Nova."}


async def test_a_snippet_edit_is_drift_and_replay_reproduces_the_old_version(
    http: httpx.AsyncClient,
) -> None:
    assert (await http.post("/v1/snippets", json=BODY)).status_code == 201
    envelope = (await http.post("/v1/completions", json=REQUEST)).json()
    used = {
        "identifier": "nova",
        "version": 1,
        "source": "database",
        "sha256": template_checksum("You are Nova."),
    }
    assert envelope["provenance"]["snippet_versions"] == [used]
    job = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
    assert job["snippet_versions"] == [used]
    assert (await http.get("/v1/drift")).json()["drifted"] == []

    edited = await http.put("/v1/snippets/nova", json={**BODY, "text": "You are Rex."})
    assert edited.status_code == 200 and edited.json()["version"] == 2
    drift = (await http.get("/v1/drift")).json()
    replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay?reveal=true")).json()
    after = (await http.post("/v1/completions", json=REQUEST)).json()

    [finding] = drift["drifted"]
    assert (finding["source_kind"], finding["source_name"], finding["jobs"]) == (
        "snippet",
        "nova",
        1,
    )
    assert (finding["recorded_version"], finding["current_version"]) == (1, 2)
    assert finding["recorded_sha256"] == used["sha256"]
    assert finding["current_sha256"] == template_checksum("You are Rex.")
    assert replay["reproduced"] is True, replay["differing"]
    assert replay["hashes"]["snippet_hashes"]["matches"] is True
    assert "You are Nova." in replay["prompt"]["system"]
    assert "Rex" not in json.dumps(replay["prompt"])
    assert after["provenance"]["snippet_versions"][0]["version"] == 2  # new jobs: the live one


async def test_a_snippet_changed_behind_the_api_fails_replay_on_its_hash(
    http: httpx.AsyncClient, database_url: str
) -> None:
    assert (await http.post("/v1/snippets", json=BODY)).status_code == 201
    envelope = (await http.post("/v1/completions", json=REQUEST)).json()
    db = Database(database_url)
    try:
        async with db.engine.begin() as conn:  # versions are meant to be immutable
            await conn.execute(text("UPDATE snippets SET text = 'Tampered.'"))
    finally:
        await db.aclose()
    replay = (await http.post(f"/v1/jobs/{envelope['job_id']}/replay")).json()
    assert replay["reproduced"] is False
    assert "snippet_hashes" in replay["differing"]


async def test_the_version_routes_list_get_and_activate(http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/snippets", json=BODY)).status_code == 201
    assert (await http.put("/v1/snippets/nova", json={**BODY, "text": "Two."})).status_code == 200
    listing = (await http.get("/v1/snippets/nova/versions")).json()
    assert listing["live_version"] == 2
    assert [(v["version"], v["live"]) for v in listing["versions"]] == [(1, False), (2, True)]
    one = await http.get("/v1/snippets/nova/versions/1")
    assert one.status_code == 200 and one.json()["text"] == "You are Nova."
    activated = await http.post("/v1/snippets/nova/versions/1/activate")
    assert activated.status_code == 200 and activated.json()["live"] is True
    served = (await http.get("/v1/snippets/nova")).json()
    assert (served["version"], served["text"]) == (1, "You are Nova.")
    missing = await http.get("/v1/snippets/nova/versions/7")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "snippet_not_found"
    none = await http.get("/v1/snippets/ghost/versions")
    assert none.status_code == 404
    bad = await http.post("/v1/snippets/nova/versions/0/activate")
    assert bad.status_code == 422


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli_db(tmp_path: Path, cli_env: Callable[..., None], database_url: str, root: Path) -> Path:
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(root),
    )
    return tmp_path


def test_cli_update_versions_show_and_activate(cli_db: Path) -> None:
    first, second = cli_db / "one.txt", cli_db / "two.txt"
    first.write_text("You are Nova.\n", encoding="utf-8")
    second.write_text("You are Nova, v2.\n", encoding="utf-8")
    created = run("snippets", "create", "nova", "--name", "Nova", "-f", str(first), "-t", "persona")
    assert created.exit_code == 0, created.output
    updated = run("snippets", "update", "nova", "-f", str(second))
    assert updated.exit_code == 0, updated.output
    body = json.loads(updated.stdout)
    assert (body["version"], body["name"], body["tags"]) == (2, "Nova", ["persona"])  # kept
    versions = run("snippets", "versions", "nova")
    assert versions.exit_code == 0, versions.output
    lines = versions.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["1", template_checksum("You are Nova.")],
        [
            "*",
            "2",
        ],
    ]
    old = run("snippets", "show", "nova", "--version", "1")
    assert old.exit_code == 0 and json.loads(old.stdout)["text"] == "You are Nova."
    activated = run("snippets", "activate", "nova", "1")
    assert activated.exit_code == 0 and json.loads(activated.stdout)["version"] == 1
    assert json.loads(run("snippets", "show", "nova").stdout)["version"] == 1
    missing = run("snippets", "activate", "nova", "9")
    assert missing.exit_code == 1
    assert json.loads(missing.stderr)["error"]["type"] == "snippet_not_found"
    empty = cli_db / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    assert run("snippets", "update", "nova", "-f", str(empty)).exit_code == 2


# --- migration 0008 on a database the previous release populated ------------------------------


async def test_migration_keeps_every_snippet_of_the_previous_release_as_version_1(
    empty_database_url: str, root: Path
) -> None:
    database = Database(empty_database_url)
    try:
        await database.migrate("0007")
        async with database.engine.begin() as conn:  # rows as the 0007 release wrote them
            for identifier, body, active in (
                ("nova", "You are Nova.", True),
                ("old", "Old.", False),
            ):
                await conn.execute(
                    text(
                        "INSERT INTO snippets (identifier, name, description, text, tags, "
                        "metadata, active, created_at, updated_at) VALUES (:i, :n, '', :t, "
                        "'[\"persona\"]', '{}', :a, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"i": identifier, "n": identifier.title(), "t": body, "a": active},
                )
            await conn.execute(
                text(
                    "INSERT INTO jobs (id, status, source_kind, source_name, source_base_path, "
                    "pattern_content_hash, variables_hash, user_prompt_hash, provider, model, "
                    "params, prompt_redacted, redaction_map, snippet_ids, created_at) VALUES "
                    "('j1', 'completed', 'pattern', 'note', 'patterns', 'sha256:aa', 'sha256:v', "
                    "'sha256:u', 'openai', 'm', '{}', '{}', '{}', '[\"nova\"]', CURRENT_TIMESTAMP)"
                )
            )
        await database.migrate()
        assert await database.schema_is_current()
        async with database.engine.connect() as conn:
            rows = (
                await conn.execute(
                    text("SELECT identifier, version, live, active, checksum FROM snippets")
                )
            ).all()
        job = await JobRepository(database.sessions, database.lane).get("j1")
        library = library_on(database, root)
        served = await library.get("nova")
        edited = await library.update("nova", nova("You are Nova, v2."))
        hidden = await library.list(include_inactive=True)
        await database.downgrade("0007")  # back to one row per identifier: the live versions
        async with database.engine.connect() as conn:
            down = (await conn.execute(text("SELECT identifier, text FROM snippets"))).all()
        await database.migrate()
        assert await database.schema_is_current()
    finally:
        await database.aclose()
    assert job is not None and (job.snippet_ids, job.snippet_versions) == (["nova"], None)
    assert sorted(tuple(r) for r in down) == [("nova", "You are Nova, v2."), ("old", "Old.")]
    assert sorted((r[0], r[1], bool(r[2]), bool(r[3]), r[4]) for r in rows) == [
        ("nova", 1, True, True, template_checksum("You are Nova.")),
        ("old", 1, True, False, template_checksum("Old.")),
    ]
    assert (served.version, served.tags, edited.version) == (1, ["persona"], 2)
    assert [(s.identifier, s.active, s.version) for s in hidden] == [
        ("nova", True, 2),
        ("old", False, 1),
    ]
