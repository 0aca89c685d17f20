"""The response cache as a component: the key, the in-memory LRU, Redis, and what never fails.

Redis tests run against the real server (GENAI_TEST_REDIS_URL, default 127.0.0.1:6379 DB 0)
under keys of their own, removed afterwards; with CI set an unreachable Redis fails them.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from redis.asyncio import Redis
from redis.exceptions import RedisError
from structlog.testing import capture_logs

from app.cache import CACHE_KEY_PREFIX, CachedAnswer, MemoryCache, build_cache, cache_key
from app.cache.answer import encode_answer
from app.cache.redis_cache import RedisCache, RedisOptions
from app.cache.seal import AnswerSealer
from app.catalog import PatternCatalog
from app.catalog.pattern import read_pattern
from app.catalog.renderer import TemplateRenderer
from app.catalog.resolver import SourceResolver
from app.config import CacheSettings, Settings
from app.errors import ConfigurationError, InvalidPattern
from app.observability.metrics import Metrics
from app.schemas import (
    Message,
    ModelParams,
    Provenance,
    RenderedPrompt,
    StructuredOutcome,
    TemplateLabelInfo,
    TemplateRef,
    TemplateVersion,
    Usage,
)

REDIS_URL = os.environ.get("GENAI_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLOSED_PORT_URL = "redis://127.0.0.1:9/0"  # loopback discard port: nothing listens
DATA_KEY = b"k" * 32
STORED_AT = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)


async def require_redis(url: str = REDIS_URL) -> None:
    """Skip without Redis, except under CI, where the Redis suite must run and so this fails."""
    client = Redis.from_url(url)
    try:
        await asyncio.wait_for(client.ping(), timeout=3)
    except (RedisError, OSError, TimeoutError) as exc:
        message = f"Redis at {url} is unreachable: {type(exc).__name__}: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run the Redis suite, so this fails)")
        pytest.skip(message)
    finally:
        await client.aclose()


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    """A raw client to the test Redis; every key under `test_prefix` is deleted afterwards."""
    await require_redis()
    client = Redis.from_url(REDIS_URL)
    try:
        yield client
    finally:
        keys = [key async for key in client.scan_iter(match=f"{TEST_PREFIX}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


# One prefix per test process, so parallel runs never read each other's entries.
TEST_PREFIX = f"genai:cache:test:{uuid.uuid4().hex}:"


def unique_key(name: str = "") -> str:
    return f"{TEST_PREFIX}{name or uuid.uuid4().hex}"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def answer(text: str = "Paris.", **changes: Any) -> CachedAnswer:
    fields: dict[str, Any] = {
        "text": text,
        "finish_reason": "stop",
        "usage": Usage(input_tokens=11, output_tokens=7, total_tokens=18, cached_input_tokens=3),
        "parsed": {"city": "Paris", "facts": [1, 2.5, None, True]},
        "validation": StructuredOutcome(valid=True, attempts=1, mode="native"),
        "provider": "openai",
        "model": "gpt-4o-mini",
        "cost_usd": 0.000123,
        "stored_at": STORED_AT,  # fixed, so equal answers compare equal
    }
    return CachedAnswer(**{**fields, **changes})


def lookups(metrics: Metrics, result: str) -> float:
    value = metrics.registry.get_sample_value("genai_cache_requests_total", {"result": result})
    return value or 0.0


def write_failures(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("genai_cache_write_failures_total") or 0.0


# --- the key ----------------------------------------------------------------------------------

PROVENANCE = Provenance(
    pattern_name="summarize",
    pattern_base_path="/srv/patterns",
    pattern_content_hash="sha256:" + "a" * 64,
    variables_hash="sha256:" + "b" * 64,
    user_prompt_hash="sha256:" + "c" * 64,
    provider="openai",
    model="gpt-4o-mini",
    snippet_ids=["persona-nova", "tone-calm"],
)
PARAMS = ModelParams(temperature=0.2, max_tokens=800, top_p=0.9, stop=["END"], seed=7)
PROMPT = RenderedPrompt(
    system="Summarise in at most 40 words.",
    messages=[
        Message(role="user", content="Example text."),
        Message(role="assistant", content="Example summary."),
        Message(role="user", content="Long text."),
    ],
)
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def key_with(**changes: Any) -> str:
    parts: dict[str, Any] = {
        "provenance": PROVENANCE,
        "params": PARAMS,
        "prompt": PROMPT,
        "output_schema": SCHEMA,
    }
    return cache_key(**{**parts, **changes})


def test_the_key_is_stable_versioned_and_a_sha256() -> None:
    key = key_with()
    assert key == key_with()
    assert key.startswith(CACHE_KEY_PREFIX) and CACHE_KEY_PREFIX == "genai:cache:v2:"
    digest = key.removeprefix(CACHE_KEY_PREFIX)
    assert len(digest) == 64 and int(digest, 16) >= 0
    # The encoding is part of the format: a change that alters keys must bump the version
    # (replicas running the old and new code side by side would otherwise disagree).
    assert digest == "67b8d0ef5f6e6aa68bbcfd5b71fcc67eb68cfe9e7f54d06509bde17ad92a08ee"


def test_dict_ordering_never_changes_the_key() -> None:
    reordered_schema = {"required": ["city"], "properties": {"city": {"type": "string"}}}
    reordered_schema["type"] = "object"
    assert list(reordered_schema) != list(SCHEMA)
    reordered_params = ModelParams(seed=7, stop=["END"], top_p=0.9, max_tokens=800, temperature=0.2)
    assert key_with(output_schema=reordered_schema, params=reordered_params) == key_with()


def test_replicas_with_patterns_under_other_directories_share_keys() -> None:
    moved = PROVENANCE.model_copy(update={"pattern_base_path": "/opt/other/patterns"})
    assert key_with(provenance=moved) == key_with()


def _prov(**update: Any) -> Provenance:
    return PROVENANCE.model_copy(update=update)


def _params(**update: Any) -> ModelParams:
    return PARAMS.model_copy(update=update)


def _prompt(**update: Any) -> RenderedPrompt:
    return PROMPT.model_copy(update=update)


KEY_INPUT_CHANGES: dict[str, dict[str, Any]] = {
    "pattern name": {"provenance": _prov(pattern_name="summarise")},
    "pattern content": {"provenance": _prov(pattern_content_hash="sha256:" + "d" * 64)},
    "variables": {"provenance": _prov(variables_hash="sha256:" + "e" * 64)},
    "user prompt": {"provenance": _prov(user_prompt_hash="sha256:" + "f" * 64)},
    "a snippet more": {"provenance": _prov(snippet_ids=["persona-nova", "tone-calm", "x"])},
    "snippet order": {"provenance": _prov(snippet_ids=["tone-calm", "persona-nova"])},
    "no snippets": {"provenance": _prov(snippet_ids=[])},
    "provider": {"provenance": _prov(provider="anthropic")},
    "model": {"provenance": _prov(model="gpt-4o")},
    "temperature": {"params": _params(temperature=0.3)},
    "temperature unset": {"params": _params(temperature=None)},
    "max_tokens": {"params": _params(max_tokens=801)},
    "top_p": {"params": _params(top_p=0.8)},
    "stop": {"params": _params(stop=["END", "STOP"])},
    "seed": {"params": _params(seed=8)},
    "system text (instructions, snippet text)": {"prompt": _prompt(system="Summarise briefly.")},
    "a message's text": {
        "prompt": _prompt(messages=[*PROMPT.messages[:2], Message(role="user", content="Other.")])
    },
    "a message's role": {
        "prompt": _prompt(
            messages=[Message(role="assistant", content="Example text."), *PROMPT.messages[1:]]
        )
    },
    "system folded into the user message": {"prompt": _prompt(system_folded=True)},
    "output schema": {"output_schema": {**SCHEMA, "required": []}},
    "no output schema": {"output_schema": None},
}


@pytest.mark.parametrize("changes", KEY_INPUT_CHANGES.values(), ids=KEY_INPUT_CHANGES.keys())
def test_every_input_that_shapes_the_answer_changes_the_key(changes: dict[str, Any]) -> None:
    assert key_with(**changes) != key_with()


def test_no_two_input_changes_collide() -> None:
    keys = {key_with(**changes) for changes in KEY_INPUT_CHANGES.values()}
    assert len(keys) == len(KEY_INPUT_CHANGES)


# --- the answer's byte form -------------------------------------------------------------------


def test_an_answer_survives_its_byte_form_unchanged() -> None:
    from app.cache.answer import decode_answer

    original = answer(parsed={"nested": {"list": [1, "two", 3.5]}, "unicode": "ça va 👍"})
    assert decode_answer(encode_answer(original)) == original


# --- memory -----------------------------------------------------------------------------------


def memory(clock: Callable[[], float], *, max_entries: int = 100, ttl: float = 60.0) -> MemoryCache:
    return MemoryCache(max_entries=max_entries, ttl_seconds=ttl, metrics=Metrics(), clock=clock)


async def test_memory_evicts_the_least_recently_used_entry_first() -> None:
    cache = memory(FakeClock(), max_entries=2)
    await cache.put("a", answer("A"))
    await cache.put("b", answer("B"))
    assert (await cache.get("a")) == answer("A")  # a is now more recent than b
    await cache.put("c", answer("C"))
    assert await cache.get("b") is None
    assert [await cache.get(k) for k in ("a", "c")] == [answer("A"), answer("C")]
    assert len(cache) == 2


async def test_memory_storing_a_key_again_replaces_it_and_makes_it_recent() -> None:
    cache = memory(FakeClock(), max_entries=2)
    await cache.put("a", answer("A"))
    await cache.put("b", answer("B"))
    await cache.put("a", answer("A2"))
    await cache.put("c", answer("C"))
    assert await cache.get("b") is None
    assert (await cache.get("a")) == answer("A2")


async def test_memory_entries_expire_after_the_ttl() -> None:
    clock = FakeClock()
    cache = memory(clock, ttl=10.0)
    await cache.put("a", answer())
    clock.now += 9.99
    assert await cache.get("a") == answer()
    clock.now += 0.01
    assert await cache.get("a") is None
    assert len(cache) == 0  # an expired entry is dropped, not kept until evicted


async def test_memory_hits_do_not_extend_the_ttl() -> None:
    clock = FakeClock()
    cache = memory(clock, ttl=10.0)
    await cache.put("a", answer())
    for _ in range(3):
        clock.now += 4
        found = await cache.get("a")
    assert found is None  # 12 s after it was stored, however often it was read


async def test_memory_counts_hits_and_misses_and_reports_its_size() -> None:
    metrics = Metrics()
    cache = MemoryCache(max_entries=10, ttl_seconds=60, metrics=metrics, clock=FakeClock())
    await cache.get("a")
    await cache.put("a", answer())
    await cache.put("b", answer())
    await cache.get("a")
    await cache.get("a")
    assert (lookups(metrics, "hit"), lookups(metrics, "miss"), lookups(metrics, "error")) == (
        2,
        1,
        0,
    )
    assert metrics.registry.get_sample_value("genai_cache_entries") == 2
    assert await cache.ping() is True
    assert cache.name == "memory"


async def test_memory_hands_each_hit_its_own_copy_of_the_parsed_json() -> None:
    cache = memory(FakeClock())
    await cache.put("a", answer(parsed={"items": [1]}))
    first = await cache.get("a")
    assert first is not None and isinstance(first.parsed, dict)
    first.parsed["items"].append(2)  # a caller mutating its answer
    second = await cache.get("a")
    assert second is not None and second.parsed == {"items": [1]}


async def test_an_answer_json_cannot_carry_is_not_stored_and_nothing_fails() -> None:
    metrics = Metrics()
    cache = MemoryCache(max_entries=10, ttl_seconds=60, metrics=metrics)
    with capture_logs() as logs:
        await cache.put("a", answer(parsed={"n": 2**70}))  # beyond JSON's 64-bit integers
    assert await cache.get("a") is None
    assert write_failures(metrics) == 1
    assert [e["event"] for e in logs] == ["cache_store_skipped"]


# --- Redis ------------------------------------------------------------------------------------


def redis_cache(
    url: str = REDIS_URL,
    *,
    data_key: bytes = DATA_KEY,
    ttl: float = 60.0,
    timeout: float = 0.25,
    metrics: Metrics | None = None,
    now: Callable[[], dt.datetime] = lambda: STORED_AT,
) -> RedisCache:
    """A cache whose wall clock stands at the moment `answer()` says it was stored."""
    return RedisCache.from_url(
        url,
        data_key=data_key,
        options=RedisOptions(ttl_seconds=ttl, timeout_seconds=timeout),
        metrics=metrics or Metrics(),
        now=now,
    )


@contextlib.asynccontextmanager
async def opened(cache: RedisCache) -> AsyncIterator[RedisCache]:
    try:
        yield cache
    finally:
        await cache.aclose()


async def test_redis_round_trip_is_sealed_at_rest_and_expires_by_itself(redis: Redis) -> None:
    key, metrics = unique_key(), Metrics()
    async with opened(redis_cache(ttl=30.0, metrics=metrics)) as cache:
        assert cache.name == "redis" and await cache.ping() is True
        assert await cache.get(key) is None
        await cache.put(key, answer("The capital is Paris."))
        assert await cache.get(key) == answer("The capital is Paris.")
    stored = await redis.get(key)
    assert stored is not None
    assert b"Paris" not in stored and b"gpt-4o-mini" not in stored  # a dump reveals nothing
    assert 0 < await redis.pttl(key) <= 30_000  # Redis drops it; no sweeper is needed
    assert (lookups(metrics, "miss"), lookups(metrics, "hit")) == (1, 1)


async def test_a_second_replica_sharing_the_data_key_gets_the_hit(redis: Redis) -> None:
    key = unique_key()
    async with opened(redis_cache()) as one, opened(redis_cache()) as two:
        await one.put(key, answer())
        assert await two.get(key) == answer()


async def test_a_replica_with_another_data_key_misses_and_says_why(redis: Redis) -> None:
    key, metrics = unique_key(), Metrics()
    async with (
        opened(redis_cache()) as writer,
        opened(redis_cache(data_key=b"o" * 32, metrics=metrics)) as reader,
    ):
        await writer.put(key, answer())
        with capture_logs() as logs:
            assert await reader.get(key) is None
    assert lookups(metrics, "error") == 1
    [warning] = [e for e in logs if e["event"] == "cache_entry_unreadable"]
    assert "GENAI_DATA_KEY" in warning["reason"]


async def test_an_entry_copied_under_another_key_does_not_answer_it(redis: Redis) -> None:
    original, copy = unique_key(), unique_key()
    async with opened(redis_cache()) as cache:
        await cache.put(original, answer())
        sealed = await redis.get(original)
        assert sealed is not None
        await redis.set(copy, sealed)
        assert await cache.get(copy) is None


class WallClock:
    def __init__(self, now: dt.datetime = STORED_AT) -> None:
        self.now = now

    def __call__(self) -> dt.datetime:
        return self.now


async def test_an_entry_kept_past_its_ttl_by_persist_is_a_miss(redis: Redis) -> None:
    key, metrics, clock = unique_key(), Metrics(), WallClock()
    async with opened(redis_cache(ttl=60.0, metrics=metrics, now=clock)) as cache:
        await cache.put(key, answer())
        assert await redis.persist(key)  # Redis will never drop it now
        clock.now += dt.timedelta(seconds=60)
        assert await cache.get(key) == answer()  # exactly the TTL old: still an answer
        clock.now += dt.timedelta(seconds=1)
        with capture_logs() as logs:
            assert await cache.get(key) is None
    assert (lookups(metrics, "hit"), lookups(metrics, "miss")) == (1, 1)
    [warning] = [e for e in logs if e["event"] == "cache_entry_outlived_ttl"]
    assert (warning["age_seconds"], warning["ttl_seconds"]) == (61, 60.0)


async def test_an_entry_stored_under_a_longer_ttl_than_now_configured_is_a_miss(
    redis: Redis,
) -> None:
    key, clock = unique_key(), WallClock()
    async with opened(redis_cache(ttl=3600.0, now=clock)) as before:
        await before.put(key, answer())
    clock.now += dt.timedelta(seconds=120)
    async with opened(redis_cache(ttl=60.0, now=clock)) as after:
        assert await after.get(key) is None
        await after.put(key, answer(stored_at=clock.now))  # the next answer replaces it
        assert await after.get(key) == answer(stored_at=clock.now)


@pytest.mark.parametrize(
    "stored",
    [
        b"not sealed at all",
        b"\x01" + b"\x00" * 40,  # the sealed format's marker, then garbage
        b"",
    ],
)
async def test_a_corrupt_redis_entry_is_a_miss(redis: Redis, stored: bytes) -> None:
    key, metrics = unique_key(), Metrics()
    await redis.set(key, stored)
    async with opened(redis_cache(metrics=metrics)) as cache:
        assert await cache.get(key) is None
        await cache.put(key, answer())  # the next answer replaces it
        assert await cache.get(key) == answer()
    assert (lookups(metrics, "error"), lookups(metrics, "hit")) == (1, 1)


async def test_a_sealed_entry_that_is_not_an_answer_is_a_miss(redis: Redis) -> None:
    key = unique_key()
    sealer = AnswerSealer(DATA_KEY)
    await redis.set(key, sealer.seal(key, b'{"text": "no other field"}'))
    async with opened(redis_cache()) as cache:
        assert await cache.get(key) is None


async def test_redis_down_is_a_miss_and_a_skipped_store_never_an_error() -> None:
    metrics = Metrics()
    async with opened(redis_cache(CLOSED_PORT_URL, metrics=metrics)) as cache:
        with capture_logs() as logs:
            assert await cache.get(unique_key()) is None
            await cache.put(unique_key(), answer())
            assert await cache.get(unique_key()) is None
        assert await cache.ping() is False
    assert lookups(metrics, "error") == 2 and lookups(metrics, "miss") == 0
    assert write_failures(metrics) == 1
    # One warning when Redis goes away, not one per request.
    assert [e["event"] for e in logs] == ["cache_unavailable"]
    assert logs[0]["log_level"] == "warning" and logs[0]["operation"] == "get"


async def _stalled_redis(accepted: list[int]) -> asyncio.Server:
    """A server that accepts connections and never answers: Redis stuck, not down."""

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(1)
        with contextlib.suppress(ConnectionError):
            await reader.read()  # until the client gives up and closes
        writer.close()

    return await asyncio.start_server(hang, "127.0.0.1", 0)


async def test_a_stalled_redis_costs_one_timeout_then_is_left_alone_for_a_while() -> None:
    accepted: list[int] = []
    server = await _stalled_redis(accepted)
    port = server.sockets[0].getsockname()[1]
    clock, metrics = FakeClock(), Metrics()
    cache = RedisCache(
        Redis.from_url(f"redis://127.0.0.1:{port}/0"),
        sealer=AnswerSealer(DATA_KEY),
        options=RedisOptions(ttl_seconds=60, timeout_seconds=0.05, pause_after_failure_seconds=5.0),
        metrics=metrics,
        clock=clock,
    )
    try:
        assert await asyncio.wait_for(cache.get(unique_key()), timeout=5) is None
        assert len(accepted) == 1
        clock.now += 4.9  # still paused: straight to a miss, no connection attempted
        assert await cache.get(unique_key()) is None
        await cache.put(unique_key(), answer())
        assert len(accepted) == 1
        clock.now += 0.2  # the pause is over: Redis is tried again
        assert await asyncio.wait_for(cache.get(unique_key()), timeout=5) is None
        assert len(accepted) == 2
    finally:
        await cache.aclose()
        server.close()
        await server.wait_closed()
    assert lookups(metrics, "error") == 3 and write_failures(metrics) == 1


# --- the factory ------------------------------------------------------------------------------


def settings(**overrides: Any) -> Settings:
    return Settings(_env_file=None, **overrides)


def test_without_a_redis_url_the_cache_is_in_memory_with_the_configured_size() -> None:
    cache = build_cache(
        settings(cache=CacheSettings(max_entries=7, ttl_seconds=5)),
        metrics=Metrics(),
        data_key=DATA_KEY,
    )
    assert isinstance(cache, MemoryCache) and cache.name == "memory"


async def test_with_a_redis_url_the_cache_is_redis(redis: Redis) -> None:
    cache = build_cache(
        settings(redis_url=SecretStr(REDIS_URL)), metrics=Metrics(), data_key=DATA_KEY
    )
    try:
        assert cache.name == "redis" and await cache.ping() is True
    finally:
        await cache.aclose()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://:hunter2@cache:6379", "must start with redis://, rediss:// or unix://"),
        ("redis://:hunter2@cache:notaport", "is not a valid Redis URL"),
        ("redis://:hunter2@cache:6379/0?decode_responses=true", "remove decode_responses"),
    ],
)
def test_a_bad_redis_url_is_refused_at_start_without_echoing_it(url: str, problem: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        build_cache(settings(redis_url=SecretStr(url)), metrics=Metrics(), data_key=DATA_KEY)
    assert caught.value.setting == "GENAI_REDIS_URL"
    assert problem in caught.value.problem
    assert "hunter2" not in str(caught.value)


def test_the_redis_timeout_is_a_setting_with_a_short_default() -> None:
    assert settings().cache.redis_timeout_seconds == 0.25
    with pytest.raises(ValueError, match="redis_timeout_seconds"):
        settings(cache={"redis_timeout_seconds": 0})


# --- the pattern's `cache` front-matter -------------------------------------------------------


def _pattern(front_matter: str) -> bytes:
    return f"---\ndescription: Capital.\n{front_matter}---\nName the capital.\n".encode()


def test_cache_front_matter_defaults_to_off_and_must_be_a_boolean() -> None:
    assert read_pattern("p", "/r", _pattern("")).info.meta.cache is False
    assert read_pattern("p", "/r", _pattern("cache: true\n")).info.meta.cache is True
    with pytest.raises(InvalidPattern) as caught:
        read_pattern("p", "/r", _pattern("cache: [1]\n"))
    assert any("cache" in problem for problem in caught.value.problems)


class _NoActiveTemplates:
    async def get(self, name: str, role: str, version: int) -> TemplateVersion:
        raise AssertionError("no pinned version is asked for here")


class _NoLabels:
    async def get(self, name: str, role: str, label: str) -> TemplateLabelInfo | None:
        return None  # no `production` label: the fallback prompt


async def test_the_resolved_source_carries_the_patterns_cache_flag(tmp_path: Path) -> None:
    (tmp_path / "cached.md").write_bytes(_pattern("cache: true\n"))
    (tmp_path / "plain.md").write_bytes(_pattern(""))
    renderer = TemplateRenderer(timeout_seconds=2, max_chars=100_000, workers=1)
    resolver = SourceResolver(
        patterns=PatternCatalog(roots=[tmp_path]),
        templates=_NoActiveTemplates(),
        labels=_NoLabels(),
        renderer=renderer,
    )
    try:
        cached = await resolver.pattern("cached", {}, "France")
        plain = await resolver.pattern("plain", {}, "France")
        fallback = await resolver.template(TemplateRef(name="t", role="writer"), {}, "France")
    finally:
        renderer.close()
    assert (cached.cache, plain.cache, fallback.cache) == (True, False, False)
