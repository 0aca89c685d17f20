"""Template labels over HTTP and the CLI, on SQLite and PostgreSQL: moves recorded with their
author, refused without admin or when the release gate fails, rollbacks, canary splits that are
stable per request id, the label a request asks for (body or header), and bad input refused with
nothing half-applied."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.catalog.canary import bucket, choose_version
from app.config.settings import ReleaseSettings
from app.schemas import SplitShare, TemplateLabelInfo
from tests.fakes.provider_server import FakeProviderServer
from tests.support import run_cli as run
from tests.support import serve_app, settings_for

LABELS = "/v1/templates/reply/writer/labels"
CASE = {"name": "greets", "variables": {"who": "Ada"}, "expect": {"prompt_contains": "Ada"}}


@pytest.fixture
async def http(fake: FakeProviderServer, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(
        settings_for(fake, database_url=database_url, database_auto_migrate=True)
    ) as client:
        yield client


async def created(http: httpx.AsyncClient, text: str, **fields: Any) -> dict[str, Any]:
    body = {"name": "reply", "role": "writer", "template": text, "variables": ["who"]}
    resp = await http.post("/v1/templates", json={**body, **fields})
    assert resp.status_code == 201, resp.text
    version: dict[str, Any] = resp.json()
    return version


async def move(http: httpx.AsyncClient, label: str, **body: Any) -> httpx.Response:
    return await http.put(f"{LABELS}/{label}", json={"message": "why not", **body})


async def three_versions(http: httpx.AsyncClient) -> None:
    for text in ("One {{ who }}.", "Two {{ who }}.", "Three {{ who }}."):
        await created(http, text)


async def labels(http: httpx.AsyncClient) -> dict[str, Any]:
    resp = await http.get(LABELS)
    assert resp.status_code == 200, resp.text
    return {entry["label"]: entry for entry in resp.json()["labels"]}


async def history(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    resp = await http.get(f"{LABELS}/history")
    assert resp.status_code == 200, resp.text
    moves: list[dict[str, Any]] = resp.json()["moves"]
    return moves


async def own_key_id(http: httpx.AsyncClient) -> str:
    keys = (await http.get("/v1/keys")).json()["keys"]
    return str(next(key["id"] for key in keys if key["name"] == "test-admin"))


def rendered(text: str, **ref: Any) -> dict[str, Any]:
    return {
        "template": {"name": "reply", "role": "writer", **ref},
        "variables": {"who": "Ada"},
        "user_prompt": "Hi.",
        **({"label": text} if text else {}),
    }


async def system_of(http: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> str:
    resp = await http.post("/v1/render", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    return str(resp.json()["prompt"]["system"])


# --- moves and their history ------------------------------------------------------------------


async def test_a_move_is_recorded_with_its_author_and_a_rollback_is_a_move_back(
    http: httpx.AsyncClient,
) -> None:
    await three_versions(http)
    key_id = await own_key_id(http)
    resp = await move(http, "production", version=3, message="ship v3")
    assert resp.status_code == 200, resp.text
    assert (resp.json()["version"], resp.json()["revision"]) == (3, 2)
    assert await system_of(http, rendered("")) == "Three Ada."
    assert (await move(http, "production", version=1, message="v3 is rude")).status_code == 200
    assert await system_of(http, rendered("")) == "One Ada."
    moves = await history(http)
    assert [(m["from_version"], m["to_version"], m["message"]) for m in moves] == [
        (3, 1, "v3 is rude"),
        (1, 3, "ship v3"),
        (None, 1, "version 1 created (the first)"),
    ]
    assert [m["author"] for m in moves] == [key_id, key_id, key_id]
    versions = (await http.get("/v1/templates?name=reply")).json()["versions"]
    assert [(v["version"], v["active"], v["labels"]) for v in versions] == [
        (1, True, ["production"]),
        (2, False, []),
        (3, False, []),
    ]


async def test_a_non_admin_key_cannot_move_or_delete_a_label(http: httpx.AsyncClient) -> None:
    await three_versions(http)
    minted = await http.post("/v1/keys", json={"scope": "complete", "name": "app"})
    headers = {"Authorization": f"Bearer {minted.json()['key']}"}
    put = await http.put(
        f"{LABELS}/production", json={"version": 2, "message": "x"}, headers=headers
    )
    gone = await http.delete(f"{LABELS}/production", headers=headers)
    assert (put.status_code, gone.status_code) == (403, 403)
    assert put.json()["error"]["type"] == "forbidden"
    readable = await http.get(LABELS, headers=headers)
    assert readable.status_code == 200
    assert (await labels(http))["production"]["version"] == 1
    assert len(await history(http)) == 1


async def test_the_activate_route_still_moves_production_and_is_recorded(
    http: httpx.AsyncClient,
) -> None:
    await three_versions(http)
    resp = await http.post("/v1/templates/reply/writer/versions/2/activate")
    assert (resp.status_code, resp.json()["active"], resp.json()["labels"]) == (
        200,
        True,
        ["production"],
    )
    assert [m["to_version"] for m in await history(http)] == [2, 1]


async def test_a_label_is_created_deleted_and_production_cannot_be_deleted(
    http: httpx.AsyncClient,
) -> None:
    await three_versions(http)
    assert (await move(http, "staging", version=2)).status_code == 200
    assert await system_of(http, rendered("staging")) == "Two Ada."
    refused = await http.delete(f"{LABELS}/production")
    assert (refused.status_code, refused.json()["error"]["type"]) == (409, "label_protected")
    deleted = await http.delete(f"{LABELS}/staging", params={"message": "done testing"})
    assert deleted.status_code == 204
    assert set(await labels(http)) == {"production"}
    latest = (await history(http))[0]
    assert (latest["label"], latest["from_version"], latest["to_version"]) == ("staging", 2, None)
    assert latest["message"] == "done testing"
    again = await http.delete(f"{LABELS}/staging")
    assert (again.status_code, again.json()["error"]["type"]) == (404, "label_not_found")


# --- protected labels and the release gate -----------------------------------------------------


async def test_with_require_tests_a_version_without_tests_cannot_take_production(
    fake: FakeProviderServer, database_url: str
) -> None:
    settings = settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        release=ReleaseSettings(require_tests=True),
    )
    async with serve_app(settings) as http:
        await created(http, "One {{ who }}.", tests=[CASE])
        await created(http, "Two {{ who }}.")
        refused = await move(http, "production", version=2)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "tests_failed"
        assert error["failures"] == ["v2: has no tests (GENAI_RELEASE__REQUIRE_TESTS is on)"]
        canary = await move(
            http, "production", split=[{"version": 1, "weight": 90}, {"version": 2, "weight": 10}]
        )
        assert canary.json()["error"]["type"] == "tests_failed"
        assert (await move(http, "staging", version=2)).status_code == 200  # not protected
        assert (await labels(http))["production"]["version"] == 1
        assert [m["label"] for m in await history(http)] == ["staging", "production"]
        stored = (await http.get("/v1/templates/reply/writer/versions/1")).json()
        assert stored["tests"][0]["name"] == "greets"


# --- canary splits ----------------------------------------------------------------------------


def test_a_split_sends_each_version_its_share_within_statistical_bounds() -> None:
    info = TemplateLabelInfo(
        name="reply",
        role="writer",
        label="production",
        version=7,
        split=[SplitShare(version=7, weight=90), SplitShare(version=8, weight=10)],
        revision=1,
        moved_at=dt.datetime(2026, 11, 27, tzinfo=dt.UTC),
    )
    ids = [f"req-{n}" for n in range(2000)]
    chosen = [choose_version(info, request_id) for request_id in ids]
    canary = chosen.count(8)
    sigma = (2000 * 0.1 * 0.9) ** 0.5  # about 13.4
    assert abs(canary - 200) <= 4 * sigma, canary
    assert set(chosen) == {7, 8}
    assert [choose_version(info, request_id) for request_id in ids] == chosen  # stable per id
    other = info.model_copy(update={"label": "staging"})
    assert [bucket(i, "reply", "writer", "production") for i in ids[:50]] != [
        bucket(i, "reply", "writer", "staging") for i in ids[:50]
    ]  # two labels' canaries are independent
    assert choose_version(other, "req-1") in {7, 8}


async def test_a_canary_answers_by_request_id_and_the_record_names_version_and_label(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    await three_versions(http)
    split = [{"version": 1, "weight": 50}, {"version": 3, "weight": 50}]
    resp = await move(http, "production", split=split, message="half and half")
    assert resp.status_code == 200, resp.text
    info = TemplateLabelInfo.model_validate(resp.json())
    answered = {}
    for n in range(12):
        request_id = f"canary-{n:04d}"
        expected = choose_version(info, request_id)
        for _ in range(2):  # the same id answers with the same version every time
            sent = await http.post(
                "/v1/completions", json=rendered(""), headers={"x-request-id": request_id}
            )
            assert sent.status_code == 200, sent.text
            envelope = sent.json()
            assert envelope["prompt"]["system"] == ("One Ada." if expected == 1 else "Three Ada.")
            assert envelope["provenance"]["pattern_name"] == f"template:reply:writer:v{expected}"
            assert envelope["provenance"]["template_label"] == "production"
            job = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
            assert (job["template_version"], job["template_label"]) == (expected, "production")
        answered[request_id] = expected
    assert set(answered.values()) == {1, 3}
    pinned = await http.post("/v1/completions", json=rendered("", version=2))
    assert "template_label" not in pinned.json()["provenance"]
    job = (await http.get(f"/v1/jobs/{pinned.json()['job_id']}")).json()
    assert (job["template_version"], job["template_label"]) == (2, None)


# --- which label a request asks for -----------------------------------------------------------


async def test_the_label_comes_from_the_body_or_the_header_and_the_body_wins(
    http: httpx.AsyncClient,
) -> None:
    await three_versions(http)
    await move(http, "staging", version=2)
    await move(http, "beta", version=3)
    assert await system_of(http, rendered("")) == "One Ada."
    assert await system_of(http, rendered("staging")) == "Two Ada."
    assert await system_of(http, rendered("", label="beta")) == "Three Ada."
    assert await system_of(http, rendered(""), **{"x-genai-label": "staging"}) == "Two Ada."
    assert await system_of(http, rendered("beta"), **{"x-genai-label": "staging"}) == "Three Ada."
    assert await system_of(http, rendered("", version=1, label="beta")) == "One Ada."
    missing = await http.post("/v1/render", json=rendered("nightly"))
    assert (missing.status_code, missing.json()["error"]["type"]) == (404, "label_not_found")


# --- bad input, nothing half-applied ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        ({"version": 9}, 404, "template_not_found"),
        (
            {"split": [{"version": 1, "weight": 90}, {"version": 9, "weight": 10}]},
            404,
            "template_not_found",
        ),
        (
            {"split": [{"version": 1, "weight": 90}, {"version": 2, "weight": 20}]},
            422,
            "invalid_request",
        ),
        ({"split": [{"version": 1, "weight": 100}]}, 422, "invalid_request"),
        (
            {"split": [{"version": 1, "weight": 50}, {"version": 1, "weight": 50}]},
            422,
            "invalid_request",
        ),
        (
            {"version": 1, "split": [{"version": 1, "weight": 50}, {"version": 2, "weight": 50}]},
            422,
            "invalid_request",
        ),
        ({}, 422, "invalid_request"),
    ],
)
async def test_bad_moves_are_refused_and_nothing_moves(
    http: httpx.AsyncClient, body: dict[str, Any], status: int, error_type: str
) -> None:
    await three_versions(http)
    for label in ("production", "staging"):
        resp = await move(http, label, **body)
        assert (resp.status_code, resp.json()["error"]["type"]) == (status, error_type), resp.text
    assert set(await labels(http)) == {"production"}
    assert len(await history(http)) == 1


async def test_history_is_not_a_label_name(http: httpx.AsyncClient) -> None:
    await three_versions(http)
    resp = await move(http, "history", version=2)
    assert resp.status_code == 405
    assert resp.headers["allow"] == "GET"
    bad = await move(http, "Not_A_Label", version=2)
    assert (bad.status_code, bad.json()["error"]["type"]) == (422, "invalid_request")


# --- concurrency ------------------------------------------------------------------------------


async def test_a_version_with_broken_test_cases_is_refused_and_not_stored(
    http: httpx.AsyncClient,
) -> None:
    """The rules of a test file hold for a version's `tests`: a regular expression that does
    not compile, a schema that is not one, a name used twice."""
    await created(http, "One {{ who }}.")
    broken: list[tuple[list[dict[str, Any]], str]] = [
        ([{**CASE, "expect": {"prompt_matches": ["(["]}}], "bad regular expression"),
        ([{**CASE, "expect": {"answer_schema": {"type": "nope"}}}], "not a JSON Schema"),
        ([CASE, CASE], "case name 'greets' is used twice"),
    ]
    for tests, fragment in broken:
        body = {
            "name": "reply",
            "role": "writer",
            "template": "Two {{ who }}.",
            "variables": ["who"],
        }
        refused = await http.post("/v1/templates", json={**body, "tests": tests})
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"]["type"] == "invalid_request"
        assert fragment in refused.json()["error"]["message"], refused.text
    versions = (await http.get("/v1/templates", params={"name": "reply"})).json()["versions"]
    assert [v["version"] for v in versions] == [1]


async def test_concurrent_moves_of_one_label_are_serialized_or_one_is_refused(
    http: httpx.AsyncClient,
) -> None:
    await three_versions(http)
    results = await asyncio.gather(
        *(move(http, "production", version=v, message=f"to {v}") for v in (2, 3, 2, 3))
    )
    statuses = [r.status_code for r in results]
    assert set(statuses) <= {200, 409} and 200 in statuses, statuses
    assert all(
        r.json()["error"]["type"] == "label_conflict" for r in results if r.status_code == 409
    )
    winners = [r.json() for r in results if r.status_code == 200]
    moves = await history(http)
    assert len(moves) == 1 + len(winners)  # every accepted move is recorded, no other
    final = (await labels(http))["production"]
    assert final["revision"] == 1 + len(winners)
    assert final["version"] == moves[0]["to_version"]


# --- the CLI ------------------------------------------------------------------------------------


@pytest.fixture
def cli_db(tmp_path: Path, cli_env: Callable[..., None], database_url: str) -> Path:
    """GENAI_* aimed at the test database and an empty pattern root."""
    (tmp_path / "patterns").mkdir()
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(tmp_path / "patterns"),
    )
    return tmp_path


def test_cli_moves_splits_and_lists_labels_with_one_line_errors(cli_db: Path) -> None:
    tmp = cli_db
    for text in ("One {{ a }}.", "Two {{ a }}."):
        source = tmp / "t.txt"
        source.write_text(text)
        assert (
            run("templates", "create", "reply", "writer", "-f", str(source), "-v", "a").exit_code
            == 0
        )
    cases = tmp / "cases.yaml"
    cases.write_text("- name: greets\n  variables: {a: Ada}\n  expect: {prompt_contains: Ada}\n")
    with_tests = run(
        "templates",
        "create",
        "reply",
        "writer",
        "-f",
        str(source),
        "-v",
        "a",
        "--tests",
        str(cases),
    )
    assert with_tests.exit_code == 0, with_tests.output
    assert json.loads(with_tests.stdout)["tests"][0]["expect"]["prompt_contains"] == ["Ada"]
    cases.write_text("- name: [unclosed\n")
    broken = run("templates", "create", "reply", "writer", "-f", str(source), "--tests", str(cases))
    assert broken.exit_code == 2 and len(broken.output.strip().splitlines()) == 1, broken.output
    moved = run("templates", "label", "reply", "writer", "production", "--version", "2", "-m", "go")
    assert moved.exit_code == 0, moved.output
    assert "reply/writer production → v2" in moved.stdout
    split = run(
        "templates", "label", "reply", "writer", "beta", "--split", "1:90,2:10", "-m", "try"
    )
    assert split.exit_code == 0, split.output
    listed = run("templates", "labels", "reply", "writer")
    assert listed.stdout.splitlines() == ["beta             v1 90% v2 10%", "production       v2"]
    past = run("templates", "labels", "reply", "writer", "--history").stdout.splitlines()
    assert len(past) == 3 and "cli: go" in past[1] and "v1 → v2" in past[1]
    for args, fragment in [
        (("--split", "1:90,2:20"), "sum to 110"),
        (("--split", "1-90"), "--split"),
        (("--version", "7"), "template_not_found"),
    ]:
        bad = run("templates", "label", "reply", "writer", "production", *args, "-m", "x")
        assert bad.exit_code != 0 and fragment in bad.output, bad.output
        assert len(bad.output.strip().splitlines()) == 1, bad.output
    assert run("templates", "labels", "reply", "writer").stdout.splitlines()[1].endswith("v2")


def test_cli_runs_a_stored_versions_tests_as_the_gate_would(cli_db: Path) -> None:
    source, cases = cli_db / "t.txt", cli_db / "cases.yaml"
    cases.write_text(
        "- name: greets\n  variables: {a: Ada}\n  expect: {prompt_contains: Hello Ada}\n"
    )
    for text in ("Hello {{ a }}.", "Bye {{ a }}."):
        source.write_text(text)
        made = run(
            "templates", "create", "reply", "writer", "-f", str(source), "-v", "a",
            "--tests", str(cases),
        )  # fmt: skip
        assert made.exit_code == 0, made.output
    junit = cli_db / "junit.xml"
    passing = run("templates", "test", "reply", "writer", "1", "--junit", str(junit))
    assert passing.exit_code == 0, passing.output
    assert "1 passed, 0 failed, 0 skipped" in passing.stdout
    assert 'tests="1"' in junit.read_text()
    failing = run("templates", "test", "reply", "writer", "2")
    assert failing.exit_code == 1, failing.output
    assert "reply/writer@v2 > greets: prompt does not contain 'Hello Ada'" in failing.stdout
    missing = run("templates", "test", "reply", "writer", "9")
    assert missing.exit_code != 0 and "template_not_found" in missing.output, missing.output
    assert len(missing.output.strip().splitlines()) == 1, missing.output
