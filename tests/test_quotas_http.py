"""Limits on keys over real HTTP: allowlists, rate limits and budgets refuse before any provider
is called and before any record is written, on every door and on streams; budgets settle to the
recorded cost; two replicas sharing Redis hold one budget; a fallback skips a disallowed model.

On SQLite and PostgreSQL, with the counters in the database and in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from app.config import QuotaSettings, Settings
from tests.clock import tomorrow_at
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import running_app, settings_for
from tests.test_anthropic_door import serving
from tests.test_cache import REDIS_URL, require_redis

MODEL = "openai/gpt-4o-mini"
COST = (11 * 0.15 + 7 * 0.60) / 1_000_000  # one fake answer: 11 input, 7 output tokens


def render(**extra: Any) -> dict[str, Any]:
    return {
        "pattern_key": "summarize",
        "variables": {"max_words": 10},
        "user_prompt": "Quarterly revenue rose.",
        "model": MODEL,
        "params": {"max_tokens": 20},
        **extra,
    }


@pytest.fixture(params=["database", "redis"])
async def counters(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        await require_redis()
    return str(request.param)


def settings_with(
    fake: FakeProviderServer, database_url: str, counters: str, **overrides: Any
) -> Settings:
    extra: dict[str, Any] = {}
    if counters == "redis":
        extra["redis_url"] = SecretStr(REDIS_URL)
    return settings_for(
        fake,
        database_url=database_url,
        database_auto_migrate=True,
        # A CI machine can stall a Redis call past the 0.25 s default; these tests are about
        # sums and refusals, so a stall must not turn into a 503 (the timeout has its own test).
        quotas=QuotaSettings(store=counters, redis_timeout_seconds=5),
        **extra,
        **overrides,
    )


@contextlib.asynccontextmanager
async def gateway(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with running_app(settings) as (app, admin):
        yield app, admin


async def new_key(admin: httpx.AsyncClient, **limits: Any) -> dict[str, Any]:
    made = await admin.post("/v1/keys", json={"scope": "complete", "name": "limited", **limits})
    assert made.status_code == 201, made.text
    return dict(made.json())


def bearer(key: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key['key']}"}


async def jobs_of(app: FastAPI, key_id: str) -> list[dict[str, Any]]:
    """The key's audit records, as stored (queued writes first)."""
    recent = await app.state.runtime.audit.reader.recent(limit=500)
    return [job.model_dump() for job in recent if job.key_id == key_id]


async def test_allowlists_refuse_before_any_call_or_record(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with gateway(settings_with(fake, database_url, "database")) as (app, admin):
        key = await new_key(admin, allowed_models=["openai/*"], allowed_patterns=["summ*"])
        other_model = await admin.post(
            "/v1/completions",
            json=render(model="anthropic/claude-haiku-4-5"),
            headers=bearer(key),
        )
        assert other_model.status_code == 403, other_model.text
        assert other_model.json()["error"]["type"] == "model_not_allowed"
        other_pattern = await admin.post(
            "/v1/completions",
            json={**render(), "pattern_key": "classify", "variables": {"labels": ["a"]}},
            headers=bearer(key),
        )
        assert other_pattern.status_code == 403
        assert other_pattern.json()["error"]["type"] == "pattern_not_allowed"
        assert fake.requests == [] and await jobs_of(app, key["id"]) == []
        allowed = await admin.post("/v1/completions", json=render(), headers=bearer(key))
        assert allowed.status_code == 200, allowed.text
        assert len(await jobs_of(app, key["id"])) == 1


async def test_the_doors_answer_refusals_as_their_sdks_expect(
    fake: FakeProviderServer, database_url: str
) -> None:
    """The OpenAI and Anthropic SDKs, unchanged, over real HTTP (uvicorn on loopback)."""
    async with serving(settings_with(fake, database_url, "database")) as door:
        key = await new_key(door.admin, allowed_models=["openai/*"], rpm=1)
        oai = openai.AsyncOpenAI(api_key=key["key"], base_url=f"{door.base_url}/v1", max_retries=0)
        claude = anthropic.AsyncAnthropic(api_key=key["key"], base_url=door.base_url, max_retries=0)
        async with oai, claude:
            with pytest.raises(openai.PermissionDeniedError) as denied:
                await oai.chat.completions.create(
                    model="anthropic/claude-haiku-4-5",
                    messages=[{"role": "user", "content": "hi"}],
                )
            assert denied.value.code is None or denied.value.body is not None
            assert denied.value.response.json()["error"]["type"] == "model_not_allowed"
            first = await oai.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
            assert first.choices[0].message.content
            with pytest.raises(openai.RateLimitError) as limited:
                await oai.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
                )
            assert limited.value.response.headers["retry-after"].isdigit()
            with pytest.raises(anthropic.RateLimitError) as anthropic_limited:
                await claude.messages.create(
                    model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "hi"}]
                )
            error = anthropic_limited.value.response.json()["error"]
            assert (error["type"], error["gateway_type"]) == ("rate_limit_error", "rate_limited")
        assert len(fake.requests) == 1  # only the one admitted call reached a provider


async def test_rate_limits_refuse_streams_and_start_over_by_the_clock(
    fake: FakeProviderServer, database_url: str, counters: str
) -> None:
    async with gateway(settings_with(fake, database_url, counters)) as (app, admin):
        quotas = app.state.runtime.quotas
        now = tomorrow_at(12, 0, 45)
        quotas.clock = lambda: now
        key = await new_key(admin, rpm=2)
        for _ in range(2):
            ok = await admin.post("/v1/completions", json=render(), headers=bearer(key))
            assert ok.status_code == 200, ok.text
        streamed = await admin.post(
            "/v1/completions", json=render(stream=True), headers=bearer(key)
        )
        assert streamed.status_code == 429, streamed.text
        assert streamed.json()["error"]["type"] == "rate_limited"
        assert streamed.headers["retry-after"] == "15"
        assert len(await jobs_of(app, key["id"])) == 2  # the refusal left no record
        now += dt.timedelta(minutes=1)
        again = await admin.post("/v1/completions", json=render(stream=True), headers=bearer(key))
        assert again.status_code == 200, again.text


async def test_a_budget_settles_to_the_recorded_cost_then_refuses(
    fake: FakeProviderServer, database_url: str, counters: str
) -> None:
    async with gateway(settings_with(fake, database_url, counters)) as (app, admin):
        quotas = app.state.runtime.quotas
        budget = 3e-5
        key = await new_key(admin, budget_usd=budget, budget_window="day")
        answered = 0
        while True:
            done = await admin.post("/v1/completions", json=render(), headers=bearer(key))
            await quotas.drain()  # the settlement runs after the answer
            if done.status_code != 200:
                break
            answered += 1
            assert answered < 50, "the budget never refused"
        assert done.status_code == 429
        error = done.json()["error"]
        assert (error["type"], error["limit"], error["limit_owner"]) == (
            "budget_exceeded",
            "day",
            "key",
        )
        costs = [job["cost_usd"] for job in await jobs_of(app, key["id"])]
        assert len(costs) == answered and all(cost == pytest.approx(COST) for cost in costs)
        assert budget <= sum(costs) < budget + COST  # over by less than the last call
        me = await admin.get("/v1/keys/me", headers=bearer(key))
        assert me.status_code == 200, me.text
        spend = me.json()["limits"]["budgets"][0]
        assert spend["window"] == "day" and spend["spent_usd"] == pytest.approx(sum(costs))
        assert spend["remaining_usd"] == 0
        assert me.json()["key"]["id"] == key["id"]


async def test_two_replicas_sharing_redis_hold_one_budget_under_concurrency(
    fake: FakeProviderServer,
) -> None:
    await require_redis()
    from tests.conftest import _drop_postgres_database, _postgres_database

    url, name = await _postgres_database()
    try:
        settings = settings_with(fake, url, "redis")
        async with gateway(settings) as (one, admin), gateway(settings) as (other, _):
            app = one
            budget = 4e-5
            key = await new_key(admin, budget_usd=budget, budget_window="total")
            clients = [
                httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app),
                    base_url="http://gateway.test",
                    headers=bearer(key),
                )
                for app in (one, other)
            ]
            refused = 0
            for _ in range(40):  # waves of concurrent requests until one is refused whole
                answers = await asyncio.gather(
                    *(clients[i % 2].post("/v1/completions", json=render()) for i in range(12))
                )
                for quotas in (one.state.runtime.quotas, other.state.runtime.quotas):
                    await quotas.drain()
                assert {answer.status_code for answer in answers} <= {200, 429}
                refused += sum(answer.status_code == 429 for answer in answers)
                if all(answer.status_code == 429 for answer in answers):
                    break
            for client in clients:
                await client.aclose()
            await other.state.runtime.writer.catch_up()  # its records are durable too
            costs = [job["cost_usd"] for job in await jobs_of(app, key["id"])]
            assert refused > 0
            assert budget <= sum(costs) < budget + COST
    finally:
        await _drop_postgres_database(name)


async def test_a_fallback_chain_skips_a_model_the_key_may_not_use(
    fake: FakeProviderServer, database_url: str
) -> None:
    chain = {MODEL: ["anthropic/claude-haiku-4-5", "ollama/qwen2.5"]}
    settings = settings_with(fake, database_url, "database", fallbacks=chain)
    async with gateway(settings) as (_, admin):
        key = await new_key(admin, allowed_models=["openai/*", "ollama/*"])
        fake.script("openai", *[Reply.error(500)] * 3)
        done = await admin.post("/v1/completions", json=render(), headers=bearer(key))
        assert done.status_code == 200, done.text
        assert done.json()["response"]["provider"] == "ollama"
        assert fake.calls("anthropic") == []


@pytest.mark.parametrize("on_error", ["closed", "open"])
async def test_unreachable_redis_refuses_limited_keys_or_serves_them_as_configured(
    fake: FakeProviderServer, tmp_path: Any, on_error: str
) -> None:
    settings = settings_for(
        fake,
        redis_url=SecretStr("redis://127.0.0.1:9/0"),
        quotas=QuotaSettings(store="redis", on_store_error=on_error, redis_timeout_seconds=0.2),
    )
    async with gateway(settings) as (_, admin):
        limited, unlimited = await new_key(admin, rpm=100), await new_key(admin)
        served = await admin.post("/v1/completions", json=render(), headers=bearer(unlimited))
        assert served.status_code == 200, served.text
        answer = await admin.post("/v1/completions", json=render(), headers=bearer(limited))
        if on_error == "closed":
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["type"] == "quota_store_unavailable"
        else:
            assert answer.status_code == 200, answer.text


async def test_an_admin_reads_any_keys_limits_and_a_complete_key_only_its_own(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with gateway(settings_with(fake, database_url, "database")) as (_, admin):
        key = await new_key(admin, rpm=5, tpm=1000)
        other = await new_key(admin)
        seen = await admin.get(f"/v1/keys/{key['id']}/limits")
        assert seen.status_code == 200, seen.text
        assert seen.json()["limits"]["rpm"]["limit"] == 5
        assert seen.json()["limits"]["tpm"]["limit"] == 1000
        forbidden = await admin.get(f"/v1/keys/{key['id']}/limits", headers=bearer(other))
        assert forbidden.status_code == 403
        own = await admin.get("/v1/keys/me", headers=bearer(other))
        assert own.status_code == 200 and own.json()["key"]["id"] == other["id"]
        assert own.json()["limits"] == {"budgets": [], "rpm": None, "tpm": None}


async def test_a_dry_run_obeys_the_allowlists_too(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with gateway(settings_with(fake, database_url, "database")) as (_, admin):
        key = await new_key(admin, allowed_models=["openai/*"], allowed_patterns=["summarize"])
        assert (await admin.post("/v1/render", json=render(), headers=bearer(key))).is_success
        refused = await admin.post(
            "/v1/render", json=render(model="anthropic/claude-haiku-4-5"), headers=bearer(key)
        )
        assert refused.json()["error"]["type"] == "model_not_allowed"
        refused = await admin.post(
            "/v1/render",
            json={**render(), "pattern_key": "classify", "variables": {"labels": ["a"]}},
            headers=bearer(key),
        )
        assert refused.json()["error"]["type"] == "pattern_not_allowed"
