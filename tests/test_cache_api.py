"""The response cache through the HTTP API: what a caller and the audit trail see.

A hit makes no upstream call (counted at the loopback fake), is marked `cache: "hit"` in the
envelope and still leaves its own audit record with status `cached`, on SQLite and PostgreSQL.
Each test asks about a user prompt of its own, so entries left in a shared Redis by another
test or run can never answer it.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from pydantic import SecretStr
from redis.asyncio import Redis

from app.cache import cache_key
from app.config import CacheSettings, Settings
from app.schemas import ApiKeyCreate, ModelParams, Provenance, RenderedPrompt
from app.store.secrets import new_key_text
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import running_app, serve_app, settings_for
from tests.test_cache import CLOSED_PORT_URL, REDIS_URL, require_redis


def summarize(**changes: Any) -> dict[str, Any]:
    """A request no other test (or earlier run) has made: its user prompt is unique."""
    request = {
        "pattern_key": "summarize",
        "variables": {"max_words": 40},
        "user_prompt": f"Quarterly revenue rose 12% ({uuid.uuid4().hex}).",
        "model": "openai/gpt-4o-mini",
    }
    return {**request, **changes}


async def complete(http: httpx.AsyncClient, request: dict[str, Any]) -> dict[str, Any]:
    resp = await http.post("/v1/completions", json=request)
    assert resp.status_code == 200, resp.text
    envelope: dict[str, Any] = resp.json()
    return envelope


async def job(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    resp = await http.get(f"/v1/jobs/{job_id}")
    assert resp.status_code == 200, resp.text
    record: dict[str, Any] = resp.json()
    return record


def stored_key(envelope: dict[str, Any], authorization: str) -> str:
    """The key the entry must live under: `cache_key` over what the envelope says was sent,
    for the calling API key (`Bearer gsk_<id>_…`), whose own entries they are by default."""
    return cache_key(
        provenance=Provenance.model_validate(envelope["provenance"]),
        params=ModelParams.model_validate(envelope["params"]),
        prompt=RenderedPrompt.model_validate(envelope["prompt"]),
        output_schema=None,  # summarize has no output_schema
        partition=authorization.removeprefix("Bearer ").split("_")[1],
    )


async def test_a_cached_repeat_makes_no_upstream_call_and_is_recorded_as_cached(
    fake: FakeProviderServer, database_url: str, tmp_path: Path
) -> None:
    settings = settings_for(
        fake, database_url=database_url, database_auto_migrate=True, data_dir=tmp_path / "data"
    )
    request = summarize(cache=True)
    async with serve_app(settings) as http:
        first = await complete(http, request)
        assert first["cache"] == "miss"
        assert len(fake.calls("openai")) == 1 and len(first["attempts"]) == 1

        repeat = await complete(http, request)
        assert repeat["cache"] == "hit"
        assert len(fake.calls("openai")) == 1  # answered without the provider
        assert repeat["attempts"] == []
        assert repeat["job_id"] != first["job_id"]
        assert repeat["response"]["text"] == first["response"]["text"]
        for same in ("provider", "model", "finish_reason"):
            assert repeat["response"][same] == first["response"][same]
        assert repeat["provenance"] == first["provenance"]
        assert repeat["prompt"] == first["prompt"]

        first_record = await job(http, first["job_id"])
        hit_record = await job(http, repeat["job_id"])
        metrics = (await http.get("/metrics")).text
    assert first_record["status"] == "completed"
    assert hit_record["status"] == "cached"
    assert hit_record["response_redacted"] == first_record["response_redacted"]
    assert hit_record["user_prompt_hash"] == first_record["user_prompt_hash"]
    assert not hit_record["attempts"]  # no upstream call
    assert 'genai_cache_requests_total{result="hit"} 1.0' in metrics
    assert 'genai_cache_requests_total{result="miss"} 1.0' in metrics


async def test_cache_false_bypasses_the_cache_and_leaves_the_entry_in_place(
    fake: FakeProviderServer,
) -> None:
    request = summarize()
    async with serve_app(settings_for(fake)) as http:
        assert (await complete(http, {**request, "cache": True}))["cache"] == "miss"
        bypassed = await complete(http, {**request, "cache": False})
        assert bypassed["cache"] == "off"
        assert len(fake.calls("openai")) == 2
        assert (await job(http, bypassed["job_id"]))["status"] == "completed"
        assert (await complete(http, {**request, "cache": True}))["cache"] == "hit"
    assert len(fake.calls("openai")) == 2


async def test_without_a_flag_a_pattern_that_did_not_opt_in_is_never_cached(
    fake: FakeProviderServer,
) -> None:
    request = summarize()  # summarize has no `cache` front-matter
    async with serve_app(settings_for(fake)) as http:
        envelopes = [await complete(http, request) for _ in range(2)]
    assert [e["cache"] for e in envelopes] == ["off", "off"]
    assert len(fake.calls("openai")) == 2


async def test_a_pattern_with_cache_front_matter_caches_without_the_request_flag(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    root = tmp_path / "patterns"
    root.mkdir()
    (root / "capital.md").write_text(
        "---\ndescription: Name a capital.\ncache: true\n---\nName the capital city.\n"
    )
    request = {"pattern_key": "capital", "user_prompt": f"France {uuid.uuid4().hex}"}
    async with serve_app(settings_for(fake, pattern_dir=[root])) as http:
        first = await complete(http, request)
        repeat = await complete(http, request)
        bypassed = await complete(http, {**request, "cache": False})
        detail = (await http.get("/v1/patterns/capital")).json()
    assert [first["cache"], repeat["cache"], bypassed["cache"]] == ["miss", "hit", "off"]
    assert (detail["cache"], detail["fallbacks"]) == (True, [])
    assert len(fake.calls("openai")) == 2  # the first and the bypass


CHANGES: dict[str, dict[str, Any]] = {
    "variables": {"variables": {"max_words": 41}},
    "user prompt": {"user_prompt": "Another text."},
    "model": {"model": "openai/gpt-4o"},
    "params": {"params": {"temperature": 0.7}},
    "instructions": {"instructions": "Answer in French."},
}


@pytest.mark.parametrize("change", CHANGES.values(), ids=CHANGES.keys())
async def test_a_request_differing_in_anything_that_shapes_the_answer_is_a_miss(
    fake: FakeProviderServer, change: dict[str, Any]
) -> None:
    request = summarize(cache=True)
    async with serve_app(settings_for(fake)) as http:
        assert (await complete(http, request))["cache"] == "miss"
        changed = await complete(http, {**request, **change})
    assert changed["cache"] == "miss"
    assert len(fake.calls("openai")) == 2


async def test_a_failed_completion_is_not_cached(fake: FakeProviderServer) -> None:
    fake.script("openai", *[Reply.error(500)] * 3)  # the first request and its two retries
    request = summarize(cache=True)
    async with serve_app(settings_for(fake)) as http:
        failed = await http.post("/v1/completions", json=request)
        assert failed.status_code == 502, failed.text
        after = await complete(http, request)
    assert after["cache"] == "miss"
    assert after["response"]["text"].startswith("echo: ")


def _sse_events(body: str) -> list[tuple[str, Any]]:
    events = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append((fields["event"], json.loads(fields.get("data", "null"))))
    return events


async def test_a_streamed_request_is_answered_from_the_cache_too(fake: FakeProviderServer) -> None:
    request = summarize(cache=True)
    async with serve_app(settings_for(fake)) as http:
        first = await complete(http, request)
        resp = await http.post("/v1/completions", json={**request, "stream": True})
    assert resp.status_code == 200, resp.text
    events = _sse_events(resp.text)
    text = "".join(data["text"] for name, data in events if name == "delta")
    [envelope] = [data for name, data in events if name == "envelope"]
    assert text == first["response"]["text"] == envelope["response"]["text"]
    assert envelope["cache"] == "hit"
    assert len(fake.calls("openai")) == 1


async def test_a_streamed_answer_is_stored_for_the_next_request(fake: FakeProviderServer) -> None:
    request = summarize(cache=True)
    async with serve_app(settings_for(fake)) as http:
        resp = await http.post("/v1/completions", json={**request, "stream": True})
        assert resp.status_code == 200, resp.text
        [streamed] = [data for name, data in _sse_events(resp.text) if name == "envelope"]
        repeat = await complete(http, request)
    assert (streamed["cache"], repeat["cache"]) == ("miss", "hit")
    assert repeat["response"]["text"] == streamed["response"]["text"]
    assert len(fake.calls("openai")) == 1


def replica_settings(
    fake: FakeProviderServer, database_url: str, data_dir: Path, secrets: tuple[str, str]
) -> Settings:
    """Replicas share the database and two secrets: the data key (so each reads the others'
    sealed entries) and the auth secret (so a key works on each)."""
    data_key, auth_secret = secrets
    return settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        data_dir=data_dir,
        redis_url=SecretStr(REDIS_URL),
        data_key=SecretStr(data_key),
        auth_secret=SecretStr(auth_secret),
        cache=CacheSettings(ttl_seconds=60),  # bounds what a failed run leaves in Redis
    )


async def test_a_second_replica_gets_the_hit_through_redis(
    fake: FakeProviderServer, database_url: str, tmp_path: Path
) -> None:
    await require_redis()
    secrets = (new_key_text(), new_key_text())
    request = summarize(cache=True)
    one = replica_settings(fake, database_url, tmp_path / "one", secrets)
    two = replica_settings(fake, database_url, tmp_path / "two", secrets)
    redis = Redis.from_url(REDIS_URL)
    written: list[str] = []
    try:
        async with serve_app(one) as http:
            first = await complete(http, request)
            caller = http.headers["authorization"]
        written.append(stored_key(first, caller))
        async with serve_app(two) as http:
            # The same key on the other replica: its entries are this key's own (the default).
            http.headers["authorization"] = caller
            repeat = await complete(http, request)
            record = await job(http, repeat["job_id"])
        assert (first["cache"], repeat["cache"]) == ("miss", "hit")
        assert repeat["response"]["text"] == first["response"]["text"]
        assert len(fake.calls("openai")) == 1
        assert record["status"] == "cached"
        sealed = await redis.get(written[0])
        assert sealed is not None and first["response"]["text"].encode() not in sealed
    finally:
        if written:
            await redis.delete(*written)
        await redis.aclose()


async def test_a_redis_that_is_down_never_fails_a_completion(fake: FakeProviderServer) -> None:
    settings = settings_for(fake, redis_url=SecretStr(CLOSED_PORT_URL))
    request = summarize(cache=True)
    async with serve_app(settings) as http:
        envelopes = [await complete(http, request) for _ in range(2)]
        ready = await http.get("/readyz")
    assert [e["cache"] for e in envelopes] == ["miss", "miss"]
    assert len(fake.calls("openai")) == 2
    assert ready.status_code == 200, ready.text  # a cache outage costs calls, not readiness


@pytest.mark.parametrize(
    ("scope", "shared"), [(None, False), ("key", False), ("shared", True)], ids=str
)
async def test_each_api_key_has_its_own_entries_unless_shared_is_chosen(
    fake: FakeProviderServer, scope: Literal["shared", "key"] | None, shared: bool
) -> None:
    """By default (scope None: the setting left alone) no key learns what another sent."""
    request = summarize(cache=True)
    cache = CacheSettings() if scope is None else CacheSettings(scope=scope)
    settings = settings_for(fake, cache=cache)
    async with running_app(settings) as (app, http):
        other = await app.state.runtime.authenticator.create(
            ApiKeyCreate(scope="complete", name="other")
        )
        first = await complete(http, request)
        again = await complete(http, request)
        resp = await http.post(
            "/v1/completions",
            json=request,
            headers={"authorization": f"Bearer {other.key}"},
        )
        assert resp.status_code == 200, resp.text
    assert (first["cache"], again["cache"]) == ("miss", "hit")
    assert resp.json()["cache"] == ("hit" if shared else "miss")
    assert len(fake.calls("openai")) == (1 if shared else 2)
