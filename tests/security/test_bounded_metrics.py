"""What a caller controls cannot grow `/metrics`, and the response cache tells no caller about
another's prompts nor serves an answer past its TTL: over real HTTP to `genai serve`, on SQLite
and PostgreSQL, with the cache in a real Redis for the cache cases.

`/metrics` is open, so a scrape that grows with made-up names is both a memory leak and a slow
scrape that blocks the event loop; a cache shared across keys answers "did anyone send this
exact prompt?"; and an entry kept past its TTL (someone with Redis access ran PERSIST) would
pin an old answer for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from app.cache import cache_key
from app.cache.answer import decode_answer, encode_answer
from app.cache.seal import AnswerSealer
from app.schemas import ModelParams, Provenance, RenderedPrompt
from app.store.secrets import decode_key, new_key_text
from tests.security.conftest import Serve
from tests.security.live import LiveService
from tests.test_cache import require_redis

# A database of its own in the local Redis; every key a test writes is deleted afterwards (and
# expires within CACHE_TTL_SECONDS should a run die first).
REDIS_URL = "redis://127.0.0.1:6379/11"
CACHE_TTL_SECONDS = 600
CONCURRENCY = 8
FIRST_ROUND, SECOND_ROUND = 400, 1600  # requests, each with names never seen before


def _attack(tag: str, index: int) -> tuple[str, dict[str, Any]]:
    """One request whose model, pattern or template names are made up (`made-up-…`)."""
    name = f"made-up-{tag}-{index}"
    requests: list[tuple[str, dict[str, Any]]] = [
        # A provider the gateway knows, with a model no one configured: answered (the fake).
        (
            "/v1/completions",
            {
                "pattern_key": "summarize",
                "variables": {},
                "user_prompt": "x",
                "model": f"openai/{name}",
            },
        ),
        ("/v1/completions", {"pattern_key": name, "variables": {}, "user_prompt": "x"}),
        # A template that does not exist renders the fallback prompt, naming its role.
        ("/v1/render", {"template": {"name": name, "role": name}, "user_prompt": "x"}),
        (
            "/v1/chat/completions",
            {"model": f"anthropic/{name}", "messages": [{"role": "user", "content": "hi"}]},
        ),
        (
            "/v1/chat/completions",
            {"model": f"pattern:{name}", "messages": [{"role": "user", "content": "hi"}]},
        ),
    ]
    return requests[index % len(requests)]


async def _send_all(http: httpx.AsyncClient, tag: str, count: int) -> set[int]:
    """`count` made-up requests, CONCURRENCY at a time; the statuses they got."""
    statuses: set[int] = set()
    pending = iter(range(count))

    async def sender() -> None:
        for index in pending:
            path, body = _attack(tag, index)
            statuses.add((await http.post(path, json=body)).status_code)

    await asyncio.gather(*(sender() for _ in range(CONCURRENCY)))
    return statuses


def _series(exposition: str) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


@pytest.fixture
def service(serve: Serve) -> Iterator[LiveService]:
    with serve(GENAI_DEFAULT_MODEL="openai/gpt-4o-mini") as running:
        yield running


async def test_made_up_models_patterns_and_templates_leave_metrics_bounded(
    service: LiveService,
) -> None:
    async with service.client(service.first_admin_key()) as http:
        await http.get("/metrics")  # a scrape counts itself: its own series exist from here on
        first = await _send_all(http, "one", FIRST_ROUND)
        after_first = (await http.get("/metrics")).text
        second = await _send_all(http, "two", SECOND_ROUND)
        after_second = (await http.get("/metrics")).text
    print(f"/metrics: {len(after_first)} bytes, then {len(after_second)} bytes")
    # Answered or refused, never shed or failed: every request reached the labelling code.
    assert first | second <= {200, 404}, (first, second)
    assert {200, 404} <= first
    # Four times as many new names add no series at all: the sizes differ only by digits.
    grown = _series(after_second) - _series(after_first)
    assert not grown, sorted(grown)[:10]
    assert "made-up" not in after_second
    assert len(after_second) < len(after_first) + 4096, (len(after_first), len(after_second))


# --- the response cache -------------------------------------------------------------------------


def _entry_key(envelope: dict[str, Any], key_id: str | None) -> str:
    """Where the gateway keeps this answer: the calling key's own entry (GENAI_CACHE__SCOPE=key),
    or with `key_id` None the one every key shares."""
    return cache_key(
        provenance=Provenance.model_validate(envelope["provenance"]),
        params=ModelParams.model_validate(envelope["params"]),
        prompt=RenderedPrompt.model_validate(envelope["prompt"]),
        output_schema=None,  # summarize has no output_schema
        partition=key_id,
    )


def _either_entry(envelope: dict[str, Any], key: str) -> list[str]:
    """Both places an answer may be kept, so none is left behind whatever the scope."""
    return [_entry_key(envelope, _key_id(key)), _entry_key(envelope, None)]


def _key_id(key: str) -> str:
    return key.split("_")[1]  # gsk_<id>_<secret>


def _prompt() -> dict[str, Any]:
    """A request no other test or run has made (its user prompt is unique), cached."""
    return {
        "pattern_key": "summarize",
        "variables": {},
        "user_prompt": f"The board met on Tuesday ({uuid.uuid4().hex}).",
        "cache": True,
    }


async def _complete(http: httpx.AsyncClient, request: dict[str, Any]) -> dict[str, Any]:
    resp = await http.post("/v1/completions", json=request)
    assert resp.status_code == 200, resp.text
    envelope: dict[str, Any] = resp.json()
    return envelope


@pytest.fixture
async def redis() -> AsyncIterator[tuple[Redis, list[str]]]:
    """The test Redis database and a list of the keys to delete afterwards."""
    await require_redis(REDIS_URL)
    client = Redis.from_url(REDIS_URL)
    written: list[str] = []
    try:
        yield client, written
    finally:
        if written:
            await client.delete(*written)
        await client.aclose()


@contextlib.contextmanager
def cached_service(serve: Serve, scope: str = "") -> Iterator[tuple[LiveService, bytes]]:
    """The service with its cache in Redis (in `scope`, when named); the data key it seals with."""
    data_key = new_key_text()
    env = {"GENAI_CACHE__SCOPE": scope} if scope else {}
    with serve(
        GENAI_DEFAULT_MODEL="openai/gpt-4o-mini",
        GENAI_REDIS_URL=REDIS_URL,
        GENAI_DATA_KEY=data_key,
        GENAI_CACHE__TTL_SECONDS=str(CACHE_TTL_SECONDS),
        **env,
    ) as running:
        yield running, decode_key(data_key, what="GENAI_DATA_KEY")


async def test_by_default_a_second_key_gets_no_hit_on_another_keys_prompt(
    serve: Serve, redis: tuple[Redis, list[str]]
) -> None:
    _, written = redis
    request = _prompt()
    with cached_service(serve) as (service, _):  # the scope's default
        admin = service.first_admin_key()
        async with service.client(admin) as http:
            created = await http.post("/v1/keys", json={"name": "tenant-b", "scope": "complete"})
            assert created.status_code == 201, created.text
            other = created.json()["key"]
            first = await _complete(http, request)
            written += _either_entry(first, admin)
            again = await _complete(http, request)
        async with service.client(other) as http:
            theirs = await _complete(http, request)
            written += _either_entry(theirs, other)
    assert (first["cache"], again["cache"]) == ("miss", "hit")  # the cache is on and works
    assert theirs["cache"] == "miss"  # nothing tells tenant B that A sent this prompt


async def test_an_entry_kept_past_its_ttl_in_redis_is_a_miss(
    serve: Serve, redis: tuple[Redis, list[str]]
) -> None:
    client, written = redis
    request = _prompt()
    # The scope named, so the test knows where the entry is whatever the default.
    scoped = cached_service(serve, scope="key")
    with scoped as (service, data_key):
        admin = service.first_admin_key()
        async with service.client(admin) as http:
            first = await _complete(http, request)
            written += _either_entry(first, admin)
            key = _entry_key(first, _key_id(admin))
            # The entry as it is two TTLs on, had someone run PERSIST on it when it was written.
            sealer = AnswerSealer(data_key)
            sealed = await client.get(key)
            assert isinstance(sealed, bytes), "the answer is not stored under the expected key"
            stored = decode_answer(sealer.open(key, sealed))
            aged = stored.model_copy(
                update={
                    "text": "a pinned old answer",
                    "stored_at": stored.stored_at - dt.timedelta(seconds=2 * CACHE_TTL_SECONDS),
                }
            )
            await client.set(key, sealer.seal(key, encode_answer(aged)), keepttl=True)
            assert await client.persist(key)  # no expiry left: only the stored age can end it
            again = await _complete(http, request)
    assert first["cache"] == "miss"
    assert again["cache"] == "miss", again["response"]["text"]
    assert again["response"]["text"] != "a pinned old answer"
