"""Versioned database templates, on SQLite and PostgreSQL: storage, activation, the strict
variable contract, rendering by reference, the fallback prompt, blueprints and the CLI."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import create_async_engine

from app.store.tables import TemplateLabel
from app.tracking import canonical_json, sha256_hex
from tests.fakes.provider_server import FakeProviderServer
from tests.support import run_cli as run
from tests.support import serve_app, settings_for

SEPARATOR = "--- STRUCTURE BLUEPRINT INSTRUCTIONS ---"
SCHEMA = {"type": "object", "required": ["title"], "properties": {"title": {"type": "string"}}}


@pytest.fixture
async def http(fake: FakeProviderServer, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app on a fresh database of each backend, migrated at start-up."""
    async with serve_app(
        settings_for(fake, database_url=database_url, database_auto_migrate=True)
    ) as client:
        yield client


async def create(http: httpx.AsyncClient, **fields: Any) -> httpx.Response:
    body = {"name": "reply", "role": "writer", "template": "Hi {{ who }}.", "variables": ["who"]}
    return await http.post("/v1/templates", json={**body, **fields})


async def created(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    resp = await create(http, **fields)
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def get_version(
    http: httpx.AsyncClient, version: int, name: str = "reply", role: str = "writer"
) -> dict[str, Any]:
    resp = await http.get(f"/v1/templates/{name}/{role}/versions/{version}")
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def activate(
    http: httpx.AsyncClient, version: int, name: str = "reply", role: str = "writer"
) -> httpx.Response:
    return await http.post(f"/v1/templates/{name}/{role}/versions/{version}/activate")


def by_ref(variables: dict[str, Any], **ref: Any) -> dict[str, Any]:
    return {
        "template": {"name": "reply", "role": "writer", **ref},
        "variables": variables,
        "user_prompt": "Please answer.",
    }


# --- creating versions ------------------------------------------------------------------------


async def test_first_version_is_1_and_active_with_the_text_checksum(
    http: httpx.AsyncClient,
) -> None:
    resp = await create(http, template="Hello {{ who }}!")
    assert resp.status_code == 201, resp.text
    v1 = resp.json()
    assert (v1["name"], v1["role"], v1["version"], v1["active"]) == ("reply", "writer", 1, True)
    assert v1["template"] == "Hello {{ who }}!"
    assert v1["variables"] == ["who"]
    assert v1["checksum"] == sha256_hex(b"Hello {{ who }}!")


async def test_second_version_is_2_and_inactive_unless_activate_is_asked(
    http: httpx.AsyncClient,
) -> None:
    await created(http)
    v2 = await created(http, template="Hey {{ who }}.")
    assert (v2["version"], v2["active"]) == (2, False)
    assert (await get_version(http, 1))["active"] is True
    v3 = await created(http, template="Yo {{ who }}.", activate=True)
    assert (v3["version"], v3["active"]) == (3, True)
    assert (await get_version(http, 1))["active"] is False
    assert (await get_version(http, 2))["active"] is False


async def test_each_role_has_its_own_version_sequence(http: httpx.AsyncClient) -> None:
    await created(http, role="writer")
    await created(http, role="writer", template="Again {{ who }}.")
    reviewer = await created(http, role="reviewer", template="Review for {{ who }}.")
    assert (reviewer["version"], reviewer["active"]) == (1, True)
    other_name = await created(http, name="summary", role="writer")
    assert (other_name["version"], other_name["active"]) == (1, True)
    resp = await http.get("/v1/templates", params={"name": "reply"})
    listed = [(v["role"], v["version"], v["active"]) for v in resp.json()["versions"]]
    assert listed == [("reviewer", 1, True), ("writer", 1, True), ("writer", 2, False)]


# --- immutability -----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["PUT", "PATCH"])
async def test_no_route_changes_a_stored_version(http: httpx.AsyncClient, method: str) -> None:
    await created(http)
    for path in ("/v1/templates/reply/writer/versions/1", "/v1/templates"):
        resp = await http.request(method, path, json={"template": "Changed {{ who }}."})
        assert resp.status_code == 405, (path, resp.text)
        assert resp.json()["error"]["type"] == "method_not_allowed"
    assert (await get_version(http, 1))["template"] == "Hi {{ who }}."


async def test_creating_v2_leaves_the_stored_text_of_v1_unchanged(
    http: httpx.AsyncClient,
) -> None:
    v1 = await created(http)
    await created(http, template="Completely new {{ who }}.", activate=True)
    stored = await get_version(http, 1)
    assert stored["template"] == "Hi {{ who }}."
    assert stored["checksum"] == v1["checksum"] == sha256_hex(b"Hi {{ who }}.")
    assert stored["created_at"] == v1["created_at"]
    # Timestamps come back as UTC on every backend (SQLite keeps no offset of its own).
    assert stored["created_at"].endswith("Z") and stored["updated_at"].endswith("Z")


# --- activation -------------------------------------------------------------------------------


async def test_activating_v2_deactivates_v1(http: httpx.AsyncClient) -> None:
    await created(http)
    await created(http, template="Second {{ who }}.")
    resp = await activate(http, 2)
    assert resp.status_code == 200, resp.text
    assert (resp.json()["version"], resp.json()["active"]) == (2, True)
    assert (await get_version(http, 1))["active"] is False
    assert (await get_version(http, 2))["active"] is True


async def test_exactly_one_version_is_active_after_any_sequence_of_activations(
    http: httpx.AsyncClient,
) -> None:
    for n in range(1, 5):
        await created(http, template=f"Variant {n} for {{{{ who }}}}.")
    await created(http, role="reviewer")  # another (name, role) is never touched
    for target in (3, 1, 1, 4, 2, 3):
        resp = await activate(http, target)
        assert resp.status_code == 200, resp.text
        versions = (await http.get("/v1/templates", params={"role": "writer"})).json()["versions"]
        assert [v["version"] for v in versions if v["active"]] == [target]
        assert (await get_version(http, 1, role="reviewer"))["active"] is True


async def test_activating_an_unknown_version_is_404_template_not_found(
    http: httpx.AsyncClient,
) -> None:
    await created(http)
    for name, role, version in (("reply", "writer", 9), ("reply", "nobody", 1), ("nope", "x", 1)):
        resp = await activate(http, version, name=name, role=role)
        assert resp.status_code == 404, resp.text
        assert resp.json()["error"]["type"] == "template_not_found"
    assert (await get_version(http, 1))["active"] is True


async def test_the_database_itself_refuses_a_second_production_label(
    http: httpx.AsyncClient, database_url: str
) -> None:
    await created(http)
    await created(http, template="Second {{ who }}.")
    engine = create_async_engine(database_url)
    try:
        with pytest.raises(IntegrityError):
            async with engine.begin() as connection:
                await connection.execute(
                    insert(TemplateLabel).values(
                        name="reply",
                        role="writer",
                        label="production",
                        version=2,
                        revision=1,
                        moved_at=dt.datetime.now(dt.UTC),
                    )
                )
    finally:
        await engine.dispose()
    assert (await get_version(http, 2))["active"] is False


# --- validation -------------------------------------------------------------------------------


async def test_body_and_declared_variables_must_agree(http: httpx.AsyncClient) -> None:
    resp = await create(
        http, template="{{ greeting }}, {{ who }}.", variables=["who", "who", "unused"]
    )
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_template"
    problems = error["problems"]
    assert len(problems) == 3
    assert any("'greeting'" in p and "not declared" in p for p in problems)
    assert any("'unused'" in p and "never used" in p for p in problems)
    assert any("'who'" in p and "twice" in p for p in problems)
    assert (await http.get("/v1/templates")).json()["versions"] == []


@pytest.mark.parametrize(
    ("template", "variables", "expected"),
    [
        ("Hi {{ who }} and {{ extra }}.", ["who"], "'extra' is used but not declared"),
        ("Hi {{ who }}.", ["who", "spare"], "'spare' is declared but never used"),
        ("Hi {{ who }}.", ["who", "who"], "'who' is declared twice"),
        ("Hi {{ who }.", ["who"], "Jinja syntax error"),
        ("{% if who %}Hi", ["who"], "Jinja syntax error"),
    ],
)
async def test_each_template_problem_alone_is_422_invalid_template(
    http: httpx.AsyncClient, template: str, variables: list[str], expected: str
) -> None:
    resp = await create(http, template=template, variables=variables)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_template"
    assert len(error["problems"]) == 1
    assert expected in error["problems"][0]


@pytest.mark.parametrize(
    "field",
    [
        {"name": "bad name"},
        {"role": "-writer"},
        {"name": "a/b"},
        {"role": ""},
        {"name": "ünïcode"},
        {"role": "x" * 101},
    ],
)
async def test_names_and_roles_outside_the_slug_alphabet_are_invalid_requests(
    http: httpx.AsyncClient, field: dict[str, str]
) -> None:
    resp = await create(http, **field)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request"
    assert error["errors"][0]["loc"] == ["body", next(iter(field))]


@pytest.mark.parametrize(
    "ref", [{"name": "bad name", "role": "writer"}, {"name": "reply", "role": "../writer"}]
)
async def test_a_template_reference_outside_the_slug_alphabet_is_an_invalid_request(
    http: httpx.AsyncClient, fake: FakeProviderServer, ref: dict[str, str]
) -> None:
    resp = await http.post(
        "/v1/completions", json={"template": ref, "variables": {}, "user_prompt": "x"}
    )
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["type"] == "invalid_request"
    assert fake.requests == []


async def test_names_and_roles_with_dots_dashes_and_underscores_are_accepted(
    http: httpx.AsyncClient,
) -> None:
    v1 = await created(http, name="Support.reply-v2_x", role="9writer")
    assert (v1["name"], v1["role"]) == ("Support.reply-v2_x", "9writer")


# --- rendering by reference -------------------------------------------------------------------


async def test_render_by_reference_uses_the_active_version(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    await created(http, template="Old {{ who }}.")
    v2 = await created(http, template="New {{ who }}.", activate=True)
    resp = await http.post("/v1/render", json=by_ref({"who": "Ada"}))
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["prompt"]["system"] == "New Ada."
    prov = result["provenance"]
    assert prov["pattern_name"] == "template:reply:writer:v2"
    assert prov["pattern_base_path"] == "database"
    assert prov["pattern_content_hash"] == v2["checksum"] == sha256_hex(b"New {{ who }}.")
    assert fake.requests == []


async def test_render_by_exact_version_uses_it_even_when_inactive(
    http: httpx.AsyncClient,
) -> None:
    v1 = await created(http, template="Old {{ who }}.")
    await created(http, template="New {{ who }}.", activate=True)
    resp = await http.post("/v1/render", json=by_ref({"who": "Ada"}, version=1))
    assert resp.status_code == 200, resp.text
    result = resp.json()
    assert result["prompt"]["system"] == "Old Ada."
    assert result["provenance"]["pattern_name"] == "template:reply:writer:v1"
    assert result["provenance"]["pattern_content_hash"] == v1["checksum"]


async def test_render_of_an_unknown_exact_version_is_404_template_not_found(
    http: httpx.AsyncClient,
) -> None:
    await created(http)
    resp = await http.post("/v1/render", json=by_ref({"who": "Ada"}, version=7))
    assert resp.status_code == 404, resp.text
    assert resp.json()["error"]["type"] == "template_not_found"


@pytest.mark.parametrize(("ref", "expected"), [({}, "Active Ada."), ({"version": 1}, "Old Ada.")])
async def test_completion_by_reference_sends_the_rendered_text_as_system_prompt(
    http: httpx.AsyncClient, fake: FakeProviderServer, ref: dict[str, Any], expected: str
) -> None:
    v1 = await created(http, template="Old {{ who }}.")
    v2 = await created(http, template="Active {{ who }}.", activate=True)
    resp = await http.post("/v1/completions", json=by_ref({"who": "Ada"}, **ref))
    assert resp.status_code == 200, resp.text
    envelope = resp.json()
    [sent] = fake.calls("openai")
    assert sent.body["messages"] == [
        {"role": "system", "content": expected},
        {"role": "user", "content": "Please answer."},
    ]
    assert envelope["prompt"]["system"] == expected
    used = v1 if ref else v2
    prov = envelope["provenance"]
    assert prov["pattern_name"] == f"template:reply:writer:v{used['version']}"
    assert prov["pattern_base_path"] == "database"
    assert prov["pattern_content_hash"] == used["checksum"]
    job = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
    assert (job["source_kind"], job["template_id"]) == ("template", used["id"])
    assert (job["template_role"], job["template_version"]) == ("writer", used["version"])
    assert job["pattern_content_hash"] == used["checksum"]


# --- the strict variable contract -------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["/v1/render", "/v1/completions"])
async def test_missing_and_extra_variables_are_named_and_no_provider_is_called(
    http: httpx.AsyncClient, fake: FakeProviderServer, endpoint: str
) -> None:
    await created(http, template="{{ who }} in {{ lang }}.", variables=["who", "lang"])
    resp = await http.post(endpoint, json=by_ref({"who": "Ada", "tone": "warm", "mood": "ok"}))
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "variable_contract_violation"
    assert error["missing"] == ["lang"]
    assert error["unexpected"] == ["mood", "tone"]
    assert fake.requests == []


async def test_an_extra_variable_alone_breaks_the_contract(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    await created(http)
    resp = await http.post("/v1/completions", json=by_ref({"who": "Ada", "spare": 1}))
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["missing"], error["unexpected"]) == (
        "variable_contract_violation",
        [],
        ["spare"],
    )
    assert fake.requests == []


@pytest.mark.parametrize(
    "body",
    [
        {"pattern_key": "summarize", "template": {"name": "reply", "role": "writer"}},
        {},
    ],
)
async def test_exactly_one_of_pattern_key_and_template_is_required(
    http: httpx.AsyncClient, fake: FakeProviderServer, body: dict[str, Any]
) -> None:
    for endpoint in ("/v1/render", "/v1/completions"):
        resp = await http.post(endpoint, json={**body, "variables": {}, "user_prompt": "x"})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["type"] == "invalid_request"
    assert fake.requests == []


# --- the fallback prompt ----------------------------------------------------------------------


async def test_a_role_without_templates_renders_the_fallback_and_counts_it(
    http: httpx.AsyncClient,
) -> None:
    await created(http)  # a template for another role does not count
    variables = {"zeta": [1, 2], "alpha": "Ada", "nested": {"b": True, "a": None}}
    resp = await http.post(
        "/v1/render",
        json={
            "template": {"name": "reply", "role": "critic"},
            "variables": variables,
            "user_prompt": "x",
        },
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["prompt"]["system"] == "ROLE: critic\nINPUT: " + canonical_json(variables)
    metrics = (await http.get("/metrics")).text
    # Counted once (the render of the writer's template was no fallback), the role unnamed: a
    # role without templates is the caller's invention, so it is no label value.
    assert "genai_template_fallbacks_total 1.0" in metrics.splitlines()
    assert "critic" not in metrics


async def test_a_completion_through_the_fallback_stores_a_fallback_job(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    variables = {"topic": "tides"}
    resp = await http.post(
        "/v1/completions",
        json={
            "template": {"name": "brief", "role": "planner"},
            "variables": variables,
            "user_prompt": "Plan it.",
        },
    )
    assert resp.status_code == 200, resp.text
    expected = "ROLE: planner\nINPUT: " + canonical_json(variables)
    [sent] = fake.calls("openai")
    assert sent.body["messages"][0] == {"role": "system", "content": expected}
    job_resp = await http.get(f"/v1/jobs/{resp.json()['job_id']}")
    assert job_resp.status_code == 200, job_resp.text
    job = job_resp.json()
    assert job["source_kind"] == "fallback"
    assert job["template_id"] is None
    assert job["template_role"] == "planner"
    assert job["created_at"].endswith("Z")
    metrics = (await http.get("/metrics")).text
    assert "genai_template_fallbacks_total 1.0" in metrics.splitlines()


# --- blueprints -------------------------------------------------------------------------------


async def test_formatter_role_gets_instructions_and_the_sorted_schema_appended(
    http: httpx.AsyncClient,
) -> None:
    await created(
        http,
        role="formatter",
        template="Format for {{ who }}.",
        blueprint_instructions="  Use headings.\nKeep it short.  ",
        blueprint_schema=SCHEMA,
    )
    resp = await http.post("/v1/render", json=by_ref({"who": "Ada"}, role="formatter"))
    assert resp.status_code == 200, resp.text
    system = resp.json()["prompt"]["system"]
    schema_text = json.dumps(SCHEMA, sort_keys=True, indent=2)
    assert system == (
        f"Format for Ada.\n\n{SEPARATOR}\nUse headings.\nKeep it short."
        f"\n\nSCHEMA JSON:\n{schema_text}"
    )
    assert system.index(SEPARATOR) < system.index("SCHEMA JSON:")
    assert json.loads(system.split("SCHEMA JSON:\n", 1)[1]) == SCHEMA


async def test_blueprint_fields_on_other_roles_leave_the_text_untouched(
    http: httpx.AsyncClient,
) -> None:
    await created(
        http,
        role="writer",
        template="Write for {{ who }}.",
        blueprint_instructions="Use headings.",
        blueprint_schema=SCHEMA,
    )
    resp = await http.post("/v1/render", json=by_ref({"who": "Ada"}))
    assert resp.status_code == 200, resp.text
    assert resp.json()["prompt"]["system"] == "Write for Ada."


async def test_whitespace_only_instructions_add_no_separator(http: httpx.AsyncClient) -> None:
    await created(
        http,
        role="formatter",
        template="Format for {{ who }}.",
        blueprint_instructions=" \n\t ",
        blueprint_schema=None,
    )
    resp = await http.post("/v1/render", json=by_ref({"who": "Ada"}, role="formatter"))
    assert resp.status_code == 200, resp.text
    system = resp.json()["prompt"]["system"]
    assert system == "Format for Ada."
    assert SEPARATOR not in system


# --- the CLI ----------------------------------------------------------------------------------


@pytest.fixture
def cli_db(tmp_path: Path, cli_env: Callable[..., None], database_url: str) -> Path:
    """GENAI_* aimed at the test database and a tiny pattern root."""
    pattern_root = tmp_path / "patterns"
    pattern_root.mkdir()
    (pattern_root / "greet.md").write_text(
        "---\ndescription: Greet someone.\n---\nHello {{ name }}.\n", encoding="utf-8"
    )
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(pattern_root),
    )
    return tmp_path


def test_cli_db_upgrade_migrates_the_configured_database(cli_db: Path) -> None:
    result = run("db", "upgrade")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("migrated ")
    # Migrating again is a no-op, not an error.
    assert run("db", "upgrade").exit_code == 0


def test_cli_db_new_key_prints_base64_of_32_bytes(cli_db: Path) -> None:
    first, second = run("db", "new-key"), run("db", "new-key")
    assert first.exit_code == 0, first.output
    keys = [first.stdout.strip(), second.stdout.strip()]
    assert all(len(base64.urlsafe_b64decode(key)) == 32 for key in keys)
    assert keys[0] != keys[1]


def test_cli_create_list_activate_and_show_templates(cli_db: Path) -> None:
    body = cli_db / "reply.j2"
    body.write_text("Hello {{ a }}.", encoding="utf-8")
    first = run("templates", "create", "reply", "writer", "--file", str(body), "--variable", "a")
    assert first.exit_code == 0, first.output
    v1 = json.loads(first.stdout)
    assert (v1["version"], v1["active"], v1["variables"]) == (1, True, ["a"])
    assert v1["checksum"] == sha256_hex(b"Hello {{ a }}.")

    body.write_text("Hi again {{ a }}.", encoding="utf-8")
    second = run("templates", "create", "reply", "writer", "-f", str(body), "-v", "a")
    assert second.exit_code == 0, second.output
    assert (json.loads(second.stdout)["version"], json.loads(second.stdout)["active"]) == (2, False)

    listed = run("templates", "list")
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("* reply") and " v1 " in lines[0] and v1["checksum"] in lines[0]
    assert lines[1].startswith("  reply") and " v2 " in lines[1]

    activated = run("templates", "activate", "reply", "writer", "2")
    assert activated.exit_code == 0, activated.output
    assert "reply/writer v2 is active" in activated.stdout
    lines = run("templates", "list", "reply").stdout.splitlines()
    assert [line.startswith("*") for line in lines] == [False, True]

    shown = run("templates", "show", "reply", "writer", "1")
    assert shown.exit_code == 0, shown.output
    stored = json.loads(shown.stdout)
    assert (stored["template"], stored["active"]) == ("Hello {{ a }}.", False)


def test_cli_refuses_an_invalid_template_or_unknown_version(cli_db: Path) -> None:
    body = cli_db / "bad.j2"
    body.write_text("Hello {{ b }}.", encoding="utf-8")
    bad = run("templates", "create", "reply", "writer", "--file", str(body), "--variable", "a")
    assert bad.exit_code == 1
    assert json.loads(bad.stderr)["error"]["type"] == "invalid_template"
    missing = run("templates", "activate", "reply", "writer", "3")
    assert missing.exit_code == 1
    assert json.loads(missing.stderr)["error"]["type"] == "template_not_found"
    assert run("templates", "list").stdout == ""


def test_cli_check_drift_exits_0_when_nothing_drifted(cli_db: Path) -> None:
    body = cli_db / "reply.j2"
    body.write_text("Hello {{ a }}.", encoding="utf-8")
    assert run("templates", "create", "reply", "writer", "-f", str(body), "-v", "a").exit_code == 0
    result = run("templates", "check-drift")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["drifted"] == []
