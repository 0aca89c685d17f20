"""A release of a database template end to end, over HTTP on SQLite and PostgreSQL, with the
real release gate (the version's own test cases, rendered) and a loopback webhook receiver:
new version → its tests → staging → canary → production → rollback. A version whose tests fail
cannot take `production` (nothing moves, nothing is announced); every committed step reaches the
receiver signed; the record names the version and label that answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.config.settings import WebhookSettings
from app.webhooks import signing
from tests.fakes.provider_server import FakeProviderServer
from tests.fakes.webhook_receiver import WebhookReceiver, eventually, running_receiver
from tests.support import running_app, settings_for

SECRET = "release-flow-secret"
TEMPLATES = "/v1/templates"
REPLY = f"{TEMPLATES}/reply/writer"
NAMES_THE_BRAND = {
    "name": "names the brand",
    "variables": {"brand": "Acme"},
    "user_prompt": "Where is my parcel?",
    "expect": {"prompt_contains": ["Acme support"], "prompt_not_contains": ["{{"]},
}


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with running_receiver() as server:
        yield server


async def new_version(http: httpx.AsyncClient, text: str, **fields: Any) -> httpx.Response:
    body = {"name": "reply", "role": "writer", "template": text, "variables": ["brand"]}
    return await http.post(TEMPLATES, json={**body, "tests": [NAMES_THE_BRAND], **fields})


async def move(http: httpx.AsyncClient, label: str, message: str, **to: Any) -> httpx.Response:
    return await http.put(f"{REPLY}/labels/{label}", json={"message": message, **to})


async def labels(http: httpx.AsyncClient) -> dict[str, Any]:
    listed = (await http.get(f"{REPLY}/labels")).json()["labels"]
    return {entry["label"]: entry["split"] or entry["version"] for entry in listed}


async def test_a_template_release_from_new_version_to_rollback(
    fake: FakeProviderServer, database_url: str, receiver: WebhookReceiver
) -> None:
    settings = settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        webhooks=WebhookSettings(
            urls=[receiver.url], secret=SecretStr(SECRET), backoff_initial_seconds=0.05
        ),
    )
    async with running_app(settings) as (_, http):
        # v1: the first version takes production, through the gate (its one case passes).
        first = await new_version(http, "Answer as {{ brand }} support.")
        assert first.status_code == 201, first.text
        assert first.json()["labels"] == ["production"]

        # v2 drops the wording its own case expects: its tests report the failure...
        second = await new_version(http, "Answer for {{ brand }}.")
        assert second.status_code == 201, second.text
        report = (await http.post(f"{REPLY}/versions/2/test", json={})).json()
        assert (report["total"], report["passed"], report["failed"]) == (1, 0, 1)
        assert report["cases"][0]["messages"] == ["prompt does not contain 'Acme support'"]
        # ...staging (unprotected) takes it, production refuses it and nothing moves.
        assert (await move(http, "staging", "try v2", version=2)).status_code == 200
        refused = await move(http, "production", "ship v2", version=2)
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["type"] == "tests_failed"
        assert "names the brand" in error["message"]
        # A new version asking for production at once is refused before it is stored.
        eager = await new_version(http, "Answer for {{ brand }}!", activate=True)
        assert eager.status_code == 422 and eager.json()["error"]["type"] == "tests_failed"
        assert await labels(http) == {"production": 1, "staging": 2}

        # v3 passes: staging, then a 90/10 canary, then production, then a rollback to v1.
        third = await new_version(http, "Answer as {{ brand }} support, briefly.")
        assert third.json()["version"] == 3, third.text
        passed = (await http.post(f"{REPLY}/versions/3/test", json={})).json()
        assert (passed["passed"], passed["failed"]) == (1, 0)
        assert (await move(http, "staging", "try v3", version=3)).status_code == 200
        canary = [{"version": 1, "weight": 90}, {"version": 3, "weight": 10}]
        assert (await move(http, "production", "canary v3", split=canary)).status_code == 200
        answered = await http.post(
            "/v1/completions",
            json={
                "template": {"name": "reply", "role": "writer"},
                "variables": {"brand": "Acme"},
                "user_prompt": "Where is my parcel?",
            },
            headers={"x-request-id": "release-flow-1"},
        )
        assert answered.status_code == 200, answered.text
        job = (await http.get(f"/v1/jobs/{answered.json()['job_id']}")).json()
        assert job["template_label"] == "production"
        assert job["template_version"] in (1, 3)
        assert (await move(http, "production", "ship v3", version=3)).status_code == 200
        assert (await move(http, "production", "roll back", version=1)).status_code == 200
        assert await labels(http) == {"production": 1, "staging": 3}

        moves = (await http.get(f"{REPLY}/labels/history")).json()["moves"]
        production = [m for m in moves if m["label"] == "production"]
        newest = [(m["from_version"], m["to_version"], m["message"]) for m in production]
        assert newest == [
            (3, 1, "roll back"),
            (1, 3, "ship v3"),
            (1, 1, "canary v3"),  # a split names its first version, and the split
            (None, 1, "version 1 created (the first)"),
        ]
        assert production[2]["to_split"] == canary

        # Every committed step reached the receiver, signed; the refusals sent nothing.
        announced = (
            3 + 6
        )  # 3 versions stored; v1 took production, staging twice, canary, ship, back

        async def all_delivered() -> bool:
            return len(receiver.received) >= announced

        await eventually(all_delivered)
        assert all(
            signing.verify(SECRET.encode(), r.body, r.headers[signing.SIGNATURE_HEADER])
            for r in receiver.received
        )
        events = [json.loads(request.body) for request in receiver.received]
        assert len(events) == announced
        stored = [e["data"] for e in events if e["type"] == "template.version_created"]
        assert sorted(data["version"] for data in stored) == [1, 2, 3]
        moved = {e["data"]["message"]: e["data"] for e in events if e["type"] == "label.moved"}
        assert set(moved) - {"try v2", "try v3", "canary v3", "ship v3", "roll back"} == {
            next(m for m, data in moved.items() if data["from"] is None)
        }  # the one other move: v1 taking production when it was stored
        assert moved["roll back"]["from"] == {"version": 3, "split": None}
        assert moved["roll back"]["to"] == {"version": 1, "split": None}
        assert moved["canary v3"]["to"]["split"] == canary
        assert moved["ship v3"]["template"] == {"name": "reply", "role": "writer"}
