"""GET /v1/jobs through the real app on SQLite and PostgreSQL: completions run through the fake
provider are listed newest first as summaries (never a prompt), filter by status, pattern,
model, key and time, page with an opaque cursor, refuse bad input with a 422 naming the field,
and only an admin key reads them."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import jsonschema
import pytest

from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import running_app, settings_for

JOBS = "/v1/jobs"
SECRET_PROMPT = "my card is 4111 1111 1111 1111 and the word is xyzzy-unlisted"


def _ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json()


@pytest.fixture
async def admin(fake: FakeProviderServer, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_for(fake, database_url=database_url, database_auto_migrate=True)
    async with running_app(settings) as (_, http):
        yield http


async def _complete(
    http: httpx.AsyncClient, pattern: str, *, key: str | None = None, **extra: Any
) -> str:
    body = {"pattern_key": pattern, "user_prompt": SECRET_PROMPT, **extra}
    if pattern == "summarize":
        body["variables"] = {"max_words": 40}
    headers = {"Authorization": f"Bearer {key}"} if key else None
    resp = await http.post("/v1/completions", json=body, headers=headers)
    answer = resp.json()
    return str(answer["job_id"] if resp.is_success else answer["error"]["job_id"])


async def _ids(http: httpx.AsyncClient, **params: Any) -> list[str]:
    return [job["id"] for job in _ok(await http.get(JOBS, params=params))["jobs"]]


async def test_jobs_are_listed_newest_first_filtered_and_paged(
    admin: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    caller = _ok(await admin.post("/v1/keys", json={"scope": "complete", "name": "bot"}), 201)
    first = await _complete(admin, "summarize")
    second = await _complete(admin, "proofread")
    by_caller = await _complete(
        admin, "proofread", key=caller["key"], model="anthropic/claude-sonnet-4-5"
    )
    fake.script("openai", *[Reply.error(400)] * 3)  # refused: no retry, a failed job
    failed = await _complete(admin, "summarize")

    listed = _ok(await admin.get(JOBS))
    assert [job["id"] for job in listed["jobs"]] == [failed, by_caller, second, first]
    assert listed["next_cursor"] is None
    newest = listed["jobs"][0]
    assert newest["status"] == "failed" and newest["error_type"] is not None
    assert listed["jobs"][1]["key_id"] == caller["id"]
    assert listed["jobs"][1]["provider"] == "anthropic"
    assert SECRET_PROMPT not in str(listed) and "prompt_redacted" not in listed["jobs"][0]

    assert await _ids(admin, status="failed") == [failed]
    assert await _ids(admin, status="completed") == [by_caller, second, first]
    assert await _ids(admin, pattern="summarize") == [failed, first]
    assert await _ids(admin, model="anthropic/claude-sonnet-4-5") == [by_caller]
    assert await _ids(admin, key=caller["id"]) == [by_caller]
    assert await _ids(admin, key=caller["id"], pattern="summarize") == []
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)).isoformat()
    assert await _ids(admin, since=later) == []
    assert await _ids(admin, until=later) == [failed, by_caller, second, first]

    # Pages of one; a job written meanwhile is newer, so it shifts nothing.
    seen: list[str] = []
    page = _ok(await admin.get(JOBS, params={"limit": 1}))
    late = await _complete(admin, "proofread")
    while True:
        seen += [job["id"] for job in page["jobs"]]
        if page["next_cursor"] is None:
            break
        page = _ok(await admin.get(JOBS, params={"limit": 1, "cursor": page["next_cursor"]}))
    assert seen == [failed, by_caller, second, first]
    assert (await _ids(admin))[0] == late


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "done"}, "status"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"since": "yesterday"}, "since"),
        ({"model": "gpt-4o"}, "model"),  # `provider/model`, as requests and usage name it
        ({"key": "not-a-key-id"}, "key"),
        ({"pattern": "<script>"}, "pattern"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    admin: httpx.AsyncClient, params: dict[str, Any], field: str
) -> None:
    resp = await admin.get(JOBS, params=params)
    assert resp.status_code == 422, resp.text
    assert [p["loc"] for p in resp.json()["error"]["errors"]] == [["query", field]]


def _cursor(*values: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


async def test_a_cursor_not_given_by_the_service_and_a_complete_key_are_refused(
    admin: httpx.AsyncClient,
) -> None:
    at = "2026-11-27T08:00:00+00:00"
    # Not a cursor; an empty one; no offset; an id with a NUL (PostgreSQL text cannot hold it).
    for cursor in ("W10", _cursor(), _cursor(at[:19], "a"), _cursor(at, "a\u0000b")):
        resp = await admin.get(JOBS, params={"cursor": cursor})
        assert resp.status_code == 422, cursor
        assert resp.json()["error"]["type"] == "invalid_cursor"
    caller = _ok(await admin.post("/v1/keys", json={"scope": "complete"}), 201)
    refused = await admin.get(JOBS, headers={"Authorization": f"Bearer {caller['key']}"})
    assert refused.status_code == 403


async def test_the_document_describes_the_route_and_real_pages_conform(
    admin: httpx.AsyncClient,
) -> None:
    spec = _ok(await admin.get("/openapi.json"))
    operation = spec["paths"][JOBS]["get"]
    assert operation["operationId"] == "listJobs"
    assert operation["security"] == [{"HTTPBearer": ["admin"]}]
    assert {p["name"] for p in operation["parameters"]} == {
        "status",
        "pattern",
        "model",
        "key",
        "since",
        "until",
        "limit",
        "cursor",
    }
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/JobPage"}
    validator = jsonschema.Draft202012Validator({**ok, "components": spec["components"]})
    await _complete(admin, "proofread")
    validator.validate(_ok(await admin.get(JOBS)))
    for example in spec["components"]["schemas"]["JobPage"]["examples"]:
        validator.validate(example)
