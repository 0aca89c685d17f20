"""The webhook delivery log over HTTP and the settings that turn webhooks on, on both stores."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from app.config.settings import Settings, WebhookSettings
from app.errors import ConfigurationError
from app.runtime import Runtime, build_runtime
from app.store.webhooks import DeliveryRepository
from app.webhooks import NoEvents, backoff, signing
from app.webhooks.dispatcher import dispatcher_from_settings
from tests.fakes.provider_server import FakeProviderServer
from tests.fakes.webhook_receiver import WebhookReceiver, eventually, running_receiver
from tests.support import running_app, settings_for

SECRET = "http-test-secret"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with running_receiver() as server:
        yield server


def hooked(fake: FakeProviderServer, database_url: str, url: str, **webhooks: Any) -> Settings:
    return settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        webhooks=WebhookSettings(
            urls=[url], secret=SecretStr(SECRET), backoff_initial_seconds=0.05, **webhooks
        ),
    )


async def test_a_test_event_is_delivered_signed_and_shows_in_the_log(
    fake: FakeProviderServer, database_url: str, receiver: WebhookReceiver
) -> None:
    async with running_app(hooked(fake, database_url, receiver.url)) as (app, http):
        runtime: Runtime = app.state.runtime
        assert runtime.events is runtime.webhooks
        sent = await http.post("/v1/webhooks/test")
        assert sent.status_code == 202, sent.text
        event_id = sent.json()["event_id"]
        assert sent.json()["urls"] == 1

        async def delivered() -> bool:
            answer = await http.get("/v1/webhooks/deliveries", params={"status": "delivered"})
            return len(answer.json()["deliveries"]) == 1

        await eventually(delivered)
        [request] = receiver.received
        header = request.headers[signing.SIGNATURE_HEADER]
        assert signing.verify(SECRET.encode(), request.body, header)
        assert json.loads(request.body)["id"] == event_id
        listed = await http.get(
            "/v1/webhooks/deliveries", params={"event_type": "webhook.test", "limit": 10}
        )
        [row] = listed.json()["deliveries"]
        assert (row["event_id"], row["status"], row["attempts"]) == (event_id, "delivered", 1)
        none = await http.get("/v1/webhooks/deliveries", params={"event_type": "label.moved"})
        assert none.json()["deliveries"] == []

        # What a release action does once it has committed: the runtime's sink, then the log.
        await runtime.events.emit("label.moved", {"label": "prod", "from": 1, "to": 2})

        async def moved() -> bool:
            answer = await http.get(
                "/v1/webhooks/deliveries",
                params={"event_type": "label.moved", "status": "delivered"},
            )
            return len(answer.json()["deliveries"]) == 1

        await eventually(moved)
        moved_body = json.loads(receiver.received[-1].body)
        assert moved_body["type"] == "label.moved" and moved_body["data"]["to"] == 2


async def test_a_failed_delivery_is_retried_through_the_api(
    fake: FakeProviderServer, database_url: str, receiver: WebhookReceiver
) -> None:
    receiver.reply(410)  # gone: failed for good, until an operator retries it
    async with running_app(hooked(fake, database_url, receiver.url)) as (_, http):
        await http.post("/v1/webhooks/test")

        async def with_status(status: str) -> Any:
            answer = await http.get("/v1/webhooks/deliveries", params={"status": status})
            return answer.json()["deliveries"]

        async def failed() -> bool:
            return bool(await with_status("failed"))

        await eventually(failed)
        [row] = await with_status("failed")
        assert (row["last_status_code"], row["attempts"]) == (410, 1)

        retried = await http.post(f"/v1/webhooks/deliveries/{row['id']}/retry")
        assert retried.status_code == 200, retried.text
        assert (retried.json()["status"], retried.json()["attempts"]) == ("pending", 0)

        async def delivered() -> bool:
            return bool(await with_status("delivered"))

        await eventually(delivered)
        again = await http.post(f"/v1/webhooks/deliveries/{row['id']}/retry")
        assert again.status_code == 409
        assert again.json()["error"]["type"] == "delivery_not_retriable"
        missing = await http.post("/v1/webhooks/deliveries/999999/retry")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "delivery_not_found"
        assert len(receiver.received) == 2


async def test_without_urls_the_test_route_refuses_and_events_go_nowhere(
    fake: FakeProviderServer,
) -> None:
    async with running_app(settings_for(fake)) as (app, http):
        runtime: Runtime = app.state.runtime
        assert runtime.webhooks is None
        assert isinstance(runtime.events, NoEvents)
        answer = await http.post("/v1/webhooks/test")
        assert answer.status_code == 409
        assert answer.json()["error"]["type"] == "webhooks_not_configured"
        assert "GENAI_WEBHOOKS__URLS" in answer.json()["error"]["message"]
        listed = await http.get("/v1/webhooks/deliveries", params={"status": "lost"})
        assert listed.status_code == 422


async def test_urls_without_a_secret_refuse_to_start(fake: FakeProviderServer) -> None:
    settings = settings_for(fake, webhooks=WebhookSettings(urls=["https://hooks.example/x"]))
    with pytest.raises(ConfigurationError, match="GENAI_WEBHOOKS__SECRET"):
        await build_runtime(settings)


def test_the_dispatcher_is_built_only_with_urls_and_a_secret() -> None:
    repo = DeliveryRepository.__new__(DeliveryRepository)
    assert dispatcher_from_settings(WebhookSettings(), deliveries=repo) is None
    with pytest.raises(ConfigurationError, match="required when GENAI_WEBHOOKS__URLS"):
        dispatcher_from_settings(WebhookSettings(urls=["http://127.0.0.1/x"]), deliveries=repo)


def test_urls_come_as_a_json_list_or_comma_separated_and_only_http(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GENAI_WEBHOOKS__URLS", "https://a.example/h, http://b.example/h")
    assert Settings(_env_file=None).webhooks.urls == ["https://a.example/h", "http://b.example/h"]
    monkeypatch.setenv("GENAI_WEBHOOKS__URLS", '["https://a.example/h"]')
    assert Settings(_env_file=None).webhooks.urls == ["https://a.example/h"]
    monkeypatch.setenv("GENAI_WEBHOOKS__URLS", "file:///etc/passwd")
    with pytest.raises(ValidationError, match="must be http"):
        Settings(_env_file=None)


def test_a_receiver_rejects_a_forged_tampered_or_old_signature() -> None:
    body, secret = b'{"id":"e1"}', b"s3cret"
    header = signing.signature_header(secret, body, timestamp=1_000_000)
    assert signing.verify(secret, body, header, now=1_000_100)
    assert not signing.verify(b"other", body, header, now=1_000_100)
    assert not signing.verify(secret, body + b" ", header, now=1_000_100)
    assert not signing.verify(secret, body, header, now=1_000_000 + 301)  # replayed later
    assert not signing.verify(secret, body, "v1=abc", now=1_000_000)


def test_back_off_doubles_up_to_its_cap_with_jitter_in_the_upper_half() -> None:
    waits = [
        backoff.delay_seconds(n, initial=5, maximum=60, jitter=lambda: 1.0) for n in range(1, 7)
    ]
    assert waits == [5, 10, 20, 40, 60, 60]
    assert backoff.delay_seconds(3, initial=5, maximum=60, jitter=lambda: 0.0) == 10
    now = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
    assert backoff.retry_after_seconds("30", now=now) == 30
    assert backoff.retry_after_seconds("Fri, 27 Nov 2026 00:01:00 GMT", now=now) == 60
    assert backoff.retry_after_seconds("soon", now=now) is None
    assert backoff.retry_after_seconds("999999", now=now) == backoff.MAX_RETRY_AFTER_SECONDS
