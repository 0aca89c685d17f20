"""The admin event log on SQLite and PostgreSQL, through the real app: every admin action leaves
exactly one event naming the key, the action, the target, the client's address and user agent,
and never a secret; the log filters and pages newest first with an opaque cursor; bad input is a
422 naming the field; only admin keys read it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi import FastAPI
from pydantic import SecretStr
from sqlalchemy import select
from structlog.testing import capture_logs

from app.audit.events import SERVICE
from app.config.settings import WebhookSettings
from app.runtime import Runtime
from app.store.tables import AuditEvent
from app.store.webhooks import Settlement
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for

EVENTS = "/v1/audit/events"
CLIENT_ADDR = "203.0.113.7"
USER_AGENT = "admin-console/2.1 " + "x" * 400  # longer than the column: stored truncated
SUMMARIZE = {"pattern_key": "summarize", "variables": {"max_words": 40}, "user_prompt": "Hi."}
TEMPLATE = {"name": "reply", "role": "writer", "template": "Hello {{ who }}", "variables": ["who"]}


@dataclass(frozen=True)
class Gateway:
    runtime: Runtime
    admin: httpx.AsyncClient  # the admin key, from CLIENT_ADDR, with USER_AGENT
    admin_key_id: str


@pytest.fixture
async def gateway(fake: FakeProviderServer, database_url: str) -> AsyncIterator[Gateway]:
    settings = settings_for(fake, database_url=database_url, database_auto_migrate=True)
    async with running_app(settings) as (app, http):
        assert isinstance(app, FastAPI)
        transport = httpx.ASGITransport(app=app, client=(CLIENT_ADDR, 50123))
        headers = {**http.headers, "user-agent": USER_AGENT}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://gateway.test", headers=headers
        ) as admin:
            keys = (await admin.get("/v1/keys")).json()["keys"]
            [admin_key_id] = [key["id"] for key in keys if key["name"] == "test-admin"]
            yield Gateway(app.state.runtime, admin, admin_key_id)


def _ok(resp: httpx.Response, status: int = 200) -> Any:
    assert resp.status_code == status, resp.text
    return resp.json() if resp.content else None


async def _all_events(admin: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    return list(_ok(await admin.get(EVENTS, params={"limit": 1000, **params}))["events"])


async def _table_dump(runtime: Runtime) -> str:
    async with runtime.database.sessions() as session:
        rows = (await session.execute(select(AuditEvent.__table__))).all()
    return json.dumps([list(row) for row in rows], default=str)


async def _a_failed_delivery(runtime: Runtime) -> int:
    now = dt.datetime.now(dt.UTC)
    deliveries = runtime.deliveries
    await deliveries.add(
        event_id="e1",
        event_type="label.moved",
        urls=["https://hooks.example/x"],
        payload={},
        now=now,
    )
    [claimed] = await deliveries.claim(now=now, lease_seconds=60, limit=1)
    assert await deliveries.settle(claimed, Settlement(status="failed", at=now, status_code=410))
    return claimed.id


async def test_every_admin_action_leaves_exactly_one_event_and_no_secret(
    gateway: Gateway,
) -> None:
    admin = gateway.admin
    _ok(await admin.post("/v1/teams", json={"name": "payments", "rpm": 60}), 201)
    _ok(await admin.patch("/v1/teams/payments", json={"rpm": 120}))
    created = _ok(
        await admin.post("/v1/keys", json={"scope": "complete", "name": "bot", "team": "payments"}),
        201,
    )
    key_id, secret = created["id"], created["key"]
    _ok(await admin.patch(f"/v1/keys/{key_id}", json={"name": "support-bot"}))
    _ok(await admin.post("/v1/templates", json=TEMPLATE), 201)
    labels = "/v1/templates/reply/writer/labels"
    _ok(await admin.put(f"{labels}/staging", json={"version": 1, "message": "try it"}))
    _ok(await admin.post("/v1/templates/reply/writer/versions/1/activate"))
    _ok(await admin.delete(f"{labels}/staging", params={"message": "done"}), 204)
    snippet = {"identifier": "tone", "name": "Tone", "text": "Be brief."}
    _ok(await admin.post("/v1/snippets", json=snippet), 201)
    _ok(await admin.put("/v1/snippets/tone", json={**snippet, "text": "Be briefer."}))
    _ok(await admin.post("/v1/snippets/tone/versions/1/activate"))
    _ok(await admin.delete("/v1/snippets/tone"), 204)
    job_id = _ok(await admin.post("/v1/completions", json=SUMMARIZE))["job_id"]
    revealed = _ok(await admin.post(f"/v1/jobs/{job_id}/replay", params={"reveal": "true"}))
    delivery_id = await _a_failed_delivery(gateway.runtime)
    _ok(await admin.post(f"/v1/webhooks/deliveries/{delivery_id}/retry"))
    _ok(await admin.delete(f"/v1/keys/{key_id}"))
    _ok(await admin.delete("/v1/teams/payments"))
    # Refused actions change nothing and record nothing.
    assert (await admin.delete("/v1/teams/no-such-team")).status_code == 404

    events = list(reversed(await _all_events(admin)))  # oldest first, as done
    assert [(e["action"], e["target"]) for e in events] == [
        ("team.created", "team:payments"),
        ("team.updated", "team:payments"),
        ("key.created", f"key:{key_id}"),
        ("key.updated", f"key:{key_id}"),
        ("template.version_created", "template:reply/writer"),
        ("label.moved", "template:reply/writer@staging"),
        ("template.activated", "template:reply/writer"),
        ("label.deleted", "template:reply/writer@staging"),
        ("snippet.created", "snippet:tone"),
        ("snippet.updated", "snippet:tone"),
        ("snippet.activated", "snippet:tone"),
        ("snippet.deleted", "snippet:tone"),
        ("job.replayed", f"job:{job_id}"),
        ("webhook.retried", f"webhook_delivery:{delivery_id}"),
        ("key.revoked", f"key:{key_id}"),
        ("team.deleted", "team:payments"),
    ]
    for event in events:
        assert (event["actor"], event["actor_key_id"]) == ("key", gateway.admin_key_id)
        assert event["remote_addr"] == CLIENT_ADDR
        assert event["user_agent"] == USER_AGENT[:200]
        assert event["request_id"]
    by_action = {e["action"]: e for e in events}
    assert by_action["key.created"]["detail"] == {
        "name": "bot",
        "scope": "complete",
        "team": "payments",
    }
    assert by_action["key.updated"]["detail"] == {"name": "support-bot"}
    assert by_action["team.updated"]["detail"] == {"rpm": 120}
    created_template = by_action["template.version_created"]["detail"]
    assert (created_template["version"], created_template["active"]) == (1, True)  # the first
    assert by_action["label.moved"]["detail"]["message"] == "try it"
    assert by_action["snippet.activated"]["detail"]["version"] == 1
    assert by_action["job.replayed"]["detail"] == {"reveal": True}
    # Never a secret: not the new key, not the revealed prompt.
    dump = await _table_dump(gateway.runtime)
    assert secret not in dump
    assert revealed["revealed"] is True
    assert "Hi." not in dump and "Be brief" not in dump


async def test_the_log_filters_and_pages_newest_first(gateway: Gateway) -> None:
    admin = gateway.admin
    key_ids = []
    for n in range(5):
        body = {"scope": "complete", "name": f"k{n}"}
        key_ids.append(_ok(await admin.post("/v1/keys", json=body), 201)["id"])
    _ok(await admin.post("/v1/teams", json={"name": "ops"}), 201)

    only_keys = await _all_events(admin, action="key.created")
    assert [e["target"] for e in only_keys] == [f"key:{k}" for k in reversed(key_ids)]
    assert [e["action"] for e in await _all_events(admin, target="team:ops")] == ["team.created"]
    by_admin = await _all_events(admin, actor_key_id=gateway.admin_key_id)
    assert len(by_admin) == 6
    assert await _all_events(admin, actor_key_id="someone-else") == []

    # Pages of two, newest first; an event recorded meanwhile neither shifts nor repeats one.
    seen: list[str] = []
    page = _ok(await admin.get(EVENTS, params={"limit": 2}))
    seen += [e["id"] for e in page["events"]]
    _ok(await admin.post("/v1/teams", json={"name": "late"}), 201)
    while page["next_cursor"] is not None:
        page = _ok(await admin.get(EVENTS, params={"limit": 2, "cursor": page["next_cursor"]}))
        seen += [e["id"] for e in page["events"]]
    everything = [e["id"] for e in await _all_events(admin)]
    assert seen == everything[1:]  # all six, once each, in order; the late one is newest

    # A window in time: `since` inclusive, `until` exclusive.
    first_at = dt.datetime.fromisoformat(only_keys[-1]["at"])
    last_at = dt.datetime.fromisoformat(only_keys[0]["at"])
    window = await _all_events(
        admin, action="key.created", since=first_at.isoformat(), until=last_at.isoformat()
    )
    assert [e["target"] for e in window] == [f"key:{k}" for k in reversed(key_ids[:-1])]
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()
    assert await _all_events(admin, since=future) == []
    day_after = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).date().isoformat()
    assert await _all_events(admin, since=day_after) == []  # a date: its 00:00 UTC
    assert len(await _all_events(admin, until=day_after)) == 7


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "last tuesday"}, "since"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"until": "0.5"}, "until"),  # a number is not an instant here
        ({"action": "Key Created"}, "action"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    gateway: Gateway, params: dict[str, Any], field: str
) -> None:
    resp = await gateway.admin.get(EVENTS, params=params)
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request"
    assert [p["loc"] for p in error["errors"]] == [["query", field]]
    assert field in error["message"]


@pytest.mark.parametrize("cursor", ["not-a-cursor", "WyJ4Il0", "W10", "!!!"])
async def test_a_cursor_the_service_did_not_give_is_a_422_invalid_cursor(
    gateway: Gateway, cursor: str
) -> None:
    resp = await gateway.admin.get(EVENTS, params={"cursor": cursor})
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_cursor"
    assert "next_cursor" in error["message"]


async def test_only_an_admin_key_reads_the_log(gateway: Gateway) -> None:
    created = _ok(await gateway.admin.post("/v1/keys", json={"scope": "complete"}), 201)
    as_caller = {"Authorization": f"Bearer {created['key']}"}
    refused = await gateway.admin.get(EVENTS, headers=as_caller)
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "forbidden"
    anonymous = await gateway.admin.get(EVENTS, headers={"Authorization": ""})
    assert anonymous.status_code == 401


async def test_a_service_event_is_recorded_without_a_caller(gateway: Gateway) -> None:
    """What the retention run calls: `record(SERVICE, "retention.pruned", …)`."""
    detail = {"older_than_days": 90, "jobs": 1200, "secret": "must not be stored"}
    await gateway.runtime.admin_events.record(
        SERVICE, "retention.pruned", target="jobs", detail=detail
    )
    [event] = await _all_events(gateway.admin, action="retention.pruned")
    assert (event["actor"], event["actor_key_id"], event["remote_addr"]) == ("service", None, None)
    assert event["detail"] == {"older_than_days": 90, "jobs": 1200}  # secret-named: dropped


async def test_an_event_that_cannot_be_written_is_logged_loudly_and_the_action_stands(
    gateway: Gateway,
) -> None:
    async with gateway.runtime.database.engine.begin() as conn:
        await conn.exec_driver_sql("DROP TABLE audit_events")
    with capture_logs() as logs:
        created = await gateway.admin.post("/v1/keys", json={"scope": "complete", "name": "x"})
    assert created.status_code == 201  # committed before the record: not undone, not a 5xx
    [lost] = [line for line in logs if line["event"] == "admin_event_unrecorded"]
    assert lost["log_level"] == "error"
    assert lost["event"] == "admin_event_unrecorded"
    assert lost["error"] == "StoreUnavailable"
    keys = (await gateway.admin.get("/v1/keys")).json()["keys"]
    assert created.json()["id"] in [key["id"] for key in keys]
    assert created.json()["key"] not in json.dumps(logs, default=str)


async def test_the_document_describes_the_route_and_real_pages_conform(gateway: Gateway) -> None:
    spec = (await gateway.admin.get("/openapi.json")).json()
    operation = spec["paths"][EVENTS]["get"]
    assert operation["security"] == [{"HTTPBearer": ["admin"]}]
    assert {p["name"] for p in operation["parameters"]} == {
        "action",
        "actor_key_id",
        "target",
        "since",
        "until",
        "limit",
        "cursor",
    }
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/AdminEventPage"}
    validator = jsonschema.Draft202012Validator({**ok, "components": spec["components"]})
    _ok(await gateway.admin.post("/v1/teams", json={"name": "ops"}), 201)
    page = _ok(await gateway.admin.get(EVENTS, params={"limit": 1}))
    validator.validate(page)
    for example in spec["components"]["schemas"]["AdminEventPage"]["examples"]:
        validator.validate(example)


async def test_with_auth_disabled_the_actor_is_anonymous(
    fake: FakeProviderServer, database_url: str
) -> None:
    settings = settings_for(
        fake, database_url=database_url, database_auto_migrate=True, auth_disabled=True
    )
    async with running_app(settings) as (_, http):
        _ok(await http.post("/v1/teams", json={"name": "ops"}), 201)
        [event] = await _all_events(http)
    assert (event["actor"], event["actor_key_id"], event["action"]) == (
        "anonymous",
        None,
        "team.created",
    )
    assert event["remote_addr"] == "127.0.0.1"  # httpx's ASGI transport: the socket's address


async def test_a_test_webhook_is_recorded_without_the_receivers_url(
    fake: FakeProviderServer, database_url: str
) -> None:
    url = "http://127.0.0.1:9/hook?token=receiver-secret"  # nothing listens: it stays pending
    settings = settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        webhooks=WebhookSettings(urls=[url], secret=SecretStr("webhook-signing-secret")),
    )
    async with running_app(settings) as (app, http):
        sent = _ok(await http.post("/v1/webhooks/test"), 202)
        [event] = await _all_events(http, action="webhook.tested")
        dump = await _table_dump(app.state.runtime)
    assert event["detail"] == {"event_id": sent["event_id"], "urls": 1}
    assert "receiver-secret" not in dump and "webhook-signing-secret" not in dump
