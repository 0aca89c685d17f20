"""The cost of a call reconciles with the provider's bill: recorded answers in each provider's
documented usage shape go through the real SDKs (the loopback fake) and the whole service, and
the envelope and the audit record carry the same cost, token kinds and prompt-cache saving as a
hand computation (rate x tokens per kind, USD per million) written out beside each case.

Rates (USD per million tokens, app/routing/prices.yaml):
  openai/o4-mini               input 1.10, cached 0.275, output 4.40
  anthropic/claude-sonnet-4-5  input 3.00, cache read 0.30, 5m write 3.75, 1h write 6.00,
                               output 15.00; over 200,000 prompt tokens: 6.00, 0.60, 7.50,
                               12.00, 22.50 for the whole request
  anthropic/claude-haiku-4-5   input 1.00, cache read 0.10, 5m write 1.25, output 5.00
  ollama/*                     0
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import httpx
import pytest

from app.routing.prices import PriceTable
from app.schemas import Usage
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import serve_app, settings_for

SUMMARIZE = {"pattern_key": "summarize", "variables": {"max_words": 40}, "user_prompt": "Text."}

# OpenAI's documented chat.completion of a reasoning model with a prompt-cache hit.
OPENAI_ANSWER: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "o4-mini-2025-04-16",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Yearly.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 192,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_fc9f1d7035",
}
# 86 plain x 1.10 + 1920 cached x 0.275 + 300 output x 4.40 = 94.6 + 528 + 1320 µ$
OPENAI_COST = 0.0019426
# Without the cache: 2006 x 1.10 + 1320 = 3526.6 µ$; saved 3526.6 - 1942.6 = 1584 µ$
OPENAI_SAVED = 0.001584
OPENAI_TOKENS = {
    "input_tokens": 2006,
    "cached_input_tokens": 1920,
    "cache_write_tokens": None,
    "cache_write_1h_tokens": None,
    "output_tokens": 300,
    "reasoning_tokens": 192,
}

# Anthropic's documented Message usage: cache reads and writes beside input_tokens, the writes
# split by lifetime in cache_creation.
ANTHROPIC_USAGE: dict[str, Any] = {
    "input_tokens": 50,
    "cache_creation_input_tokens": 3000,
    "cache_read_input_tokens": 10000,
    "cache_creation": {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 1000},
    "output_tokens": 400,
    "service_tier": "standard",
}
# 50 x 3 + 10000 x 0.30 + 2000 x 3.75 + 1000 x 6 + 400 x 15 = 150 + 3000 + 7500 + 6000 + 6000 µ$
ANTHROPIC_COST = 0.02265
# Without the cache: 13050 x 3 + 6000 = 45150 µ$; saved 45150 - 22650 = 22500 µ$
ANTHROPIC_SAVED = 0.0225
ANTHROPIC_TOKENS = {
    "input_tokens": 13050,
    "cached_input_tokens": 10000,
    "cache_write_tokens": 3000,
    "cache_write_1h_tokens": 1000,
    "output_tokens": 400,
    "reasoning_tokens": None,
}

OLLAMA_ANSWER: dict[str, Any] = {
    "model": "llama3.2",
    "created_at": "2023-12-12T14:13:43.416799Z",
    "message": {"role": "assistant", "content": "Hello! How are you today?"},
    "done": True,
    "done_reason": "stop",
    "total_duration": 5191566416,
    "load_duration": 2154458,
    "prompt_eval_count": 26,
    "prompt_eval_duration": 383809000,
    "eval_count": 298,
    "eval_duration": 4799921000,
}


def anthropic_message(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "Yearly."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


@pytest.fixture
async def http(fake: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(settings_for(fake)) as client:
        yield client


def assert_billed(cost: float | None, expected: float) -> None:
    """To the cent, and exact to 1e-8 USD (the table's rounding)."""
    assert cost is not None
    assert round(cost, 2) == round(expected, 2)
    assert cost == round(expected, 8)


async def complete(http: httpx.AsyncClient, model: str, *, stream: bool) -> dict[str, Any]:
    """The envelope of a /v1/completions call, whole or at the end of its event stream."""
    resp = await http.post("/v1/completions", json={**SUMMARIZE, "model": model, "stream": stream})
    assert resp.status_code == 200, resp.text
    if not stream:
        envelope: dict[str, Any] = resp.json()
        return envelope
    frames = [frame for frame in resp.text.split("\n\n") if frame.startswith("event: envelope")]
    assert len(frames) == 1
    return dict(json.loads(frames[0].split("\ndata: ", 1)[1]))


async def record_of(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    resp = await http.get(f"/v1/jobs/{job_id}")
    assert resp.status_code == 200, resp.text
    record: dict[str, Any] = resp.json()
    return record


async def assert_reconciled(
    http: httpx.AsyncClient,
    envelope: dict[str, Any],
    *,
    cost: float,
    saved: float | None,
    tokens: Mapping[str, int | None],
) -> None:
    """Envelope and audit record: the same cost, saving and token kinds, all as computed."""
    response = envelope["response"]
    assert_billed(response["cost_usd"], cost)
    assert response["cache_saved_usd"] == (None if saved is None else round(saved, 8))
    assert {kind: response["usage"][kind] for kind in tokens} == tokens
    record = await record_of(http, envelope["job_id"])
    assert record["cost_usd"] == response["cost_usd"]
    assert record["cache_saved_usd"] == response["cache_saved_usd"]
    assert {kind: record[kind] for kind in tokens} == tokens


# --- /v1/completions, each provider, whole and streamed ----------------------------------------


async def test_openai_cached_and_reasoning_tokens_reconcile(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.raw(200, OPENAI_ANSWER))
    envelope = await complete(http, "openai/o4-mini", stream=False)
    await assert_reconciled(
        http, envelope, cost=OPENAI_COST, saved=OPENAI_SAVED, tokens=OPENAI_TOKENS
    )


async def test_openai_streamed_final_usage_chunk_reconciles(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script(
        "openai",
        Reply.ok(
            input_tokens=2006, cached_input_tokens=1920, output_tokens=300, reasoning_tokens=192
        ),
    )
    envelope = await complete(http, "openai/o4-mini", stream=True)
    [sent] = fake.calls("openai")
    assert sent.body["stream_options"] == {"include_usage": True}
    await assert_reconciled(
        http, envelope, cost=OPENAI_COST, saved=OPENAI_SAVED, tokens=OPENAI_TOKENS
    )


async def test_anthropic_cache_reads_and_both_kinds_of_write_reconcile(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.raw(200, anthropic_message(ANTHROPIC_USAGE)))
    envelope = await complete(http, "anthropic/claude-sonnet-4-5", stream=False)
    await assert_reconciled(
        http, envelope, cost=ANTHROPIC_COST, saved=ANTHROPIC_SAVED, tokens=ANTHROPIC_TOKENS
    )


async def test_anthropic_streamed_message_start_and_delta_reconcile(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    # message_start carries the input side and the write split; message_delta the cumulative
    # counts without the split.
    fake.script(
        "anthropic",
        Reply.ok(
            input_tokens=50,
            cached_input_tokens=10000,
            cache_write_tokens=3000,
            cache_write_1h_tokens=1000,
            output_tokens=400,
        ),
    )
    envelope = await complete(http, "anthropic/claude-sonnet-4-5", stream=True)
    await assert_reconciled(
        http, envelope, cost=ANTHROPIC_COST, saved=ANTHROPIC_SAVED, tokens=ANTHROPIC_TOKENS
    )


async def test_a_call_that_only_writes_the_cache_saves_a_negative_amount(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    usage = {
        "input_tokens": 20,
        "cache_creation_input_tokens": 5000,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 5000, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 100,
    }
    fake.script("anthropic", Reply.raw(200, anthropic_message(usage)))
    envelope = await complete(http, "anthropic/claude-haiku-4-5", stream=False)
    # 20 x 1 + 5000 x 1.25 + 100 x 5 = 20 + 6250 + 500 = 6770 µ$
    # Without the cache: 5020 x 1 + 500 = 5520 µ$; saved 5520 - 6770 = -1250 µ$
    tokens = {"input_tokens": 5020, "cache_write_tokens": 5000, "cache_write_1h_tokens": 0}
    await assert_reconciled(http, envelope, cost=0.00677, saved=-0.00125, tokens=tokens)


async def test_a_long_context_request_is_billed_whole_at_the_higher_rates(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    usage = {
        "input_tokens": 1000,
        "cache_creation_input_tokens": 60000,
        "cache_read_input_tokens": 150000,
        "cache_creation": {"ephemeral_5m_input_tokens": 60000, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 2000,
    }
    fake.script("anthropic", Reply.raw(200, anthropic_message(usage)))
    envelope = await complete(http, "anthropic/claude-sonnet-4-5", stream=False)
    # 211,000 prompt tokens > 200,000: every token at the long-context rates.
    # 1000 x 6 + 150000 x 0.60 + 60000 x 7.50 + 2000 x 22.50 = 6000 + 90000 + 450000 + 45000 µ$
    # Without the cache: 211000 x 6 + 45000 = 1311000 µ$; saved 1311000 - 591000 = 720000 µ$
    tokens = {"input_tokens": 211000, "cached_input_tokens": 150000, "output_tokens": 2000}
    await assert_reconciled(http, envelope, cost=0.591, saved=0.72, tokens=tokens)


@pytest.mark.parametrize("stream", [False, True])
async def test_ollama_costs_nothing_and_reports_no_cache(
    http: httpx.AsyncClient, fake: FakeProviderServer, stream: bool
) -> None:
    reply = (
        Reply.ok(input_tokens=26, output_tokens=298) if stream else Reply.raw(200, OLLAMA_ANSWER)
    )
    fake.script("ollama", reply)
    envelope = await complete(http, "ollama/llama3.2", stream=stream)
    tokens = {"input_tokens": 26, "output_tokens": 298, "cached_input_tokens": None}
    await assert_reconciled(http, envelope, cost=0.0, saved=None, tokens=tokens)


# --- translated routes: each provider through the other's door --------------------------------


async def test_an_anthropic_answer_through_the_openai_door_shows_reads_and_writes(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.raw(200, anthropic_message(ANTHROPIC_USAGE)))
    resp = await http.post(
        "/v1/chat/completions",
        json={
            "model": "anthropic/claude-sonnet-4-5",
            "messages": [{"role": "user", "content": "How often does it renew?"}],
        },
    )
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    # OpenAI's prompt_tokens include the cache reads and writes.
    assert answer["usage"]["prompt_tokens"] == 13050
    assert answer["usage"]["completion_tokens"] == 400
    assert answer["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 10000,
        "cache_write_tokens": 3000,
    }
    record = await record_of(http, answer["job_id"])
    assert_billed(record["cost_usd"], ANTHROPIC_COST)
    assert record["cache_saved_usd"] == ANTHROPIC_SAVED
    assert {kind: record[kind] for kind in ANTHROPIC_TOKENS} == ANTHROPIC_TOKENS


async def test_an_openai_answer_through_the_anthropic_door_counts_the_cache_beside_input(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.raw(200, OPENAI_ANSWER))
    resp = await http.post(
        "/v1/messages",
        json={
            "model": "openai/o4-mini",
            "max_tokens": 512,
            "messages": [{"role": "user", "content": "How often does it renew?"}],
        },
    )
    assert resp.status_code == 200, resp.text
    message = resp.json()
    # Anthropic's input_tokens exclude the cache reads: 2006 - 1920. OpenAI reported no writes.
    assert message["usage"] == {
        "input_tokens": 86,
        "output_tokens": 300,
        "cache_read_input_tokens": 1920,
        "cache_creation_input_tokens": None,
        "cache_creation": None,
    }
    record = await record_of(http, message["job_id"])
    assert_billed(record["cost_usd"], OPENAI_COST)
    assert record["cache_saved_usd"] == OPENAI_SAVED
    assert {kind: record[kind] for kind in OPENAI_TOKENS} == OPENAI_TOKENS


async def test_the_anthropic_door_splits_cache_writes_as_anthropic_does(
    http: httpx.AsyncClient, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.raw(200, anthropic_message(ANTHROPIC_USAGE)))
    resp = await http.post(
        "/v1/messages",
        json={
            "model": "anthropic/claude-sonnet-4-5",
            "max_tokens": 512,
            "messages": [{"role": "user", "content": "How often does it renew?"}],
        },
    )
    assert resp.status_code == 200, resp.text
    usage = resp.json()["usage"]
    assert {k: v for k, v in usage.items() if k != "service_tier"} == {
        k: v for k, v in ANTHROPIC_USAGE.items() if k != "service_tier"
    }


# --- the table alone: the long-context threshold -----------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        # 200000 x 3 + 1000 x 15 = 615000 µ$: at the threshold, still the base rates.
        (200_000, 0.615),
        # 200001 x 6 + 1000 x 22.50 = 1222506 µ$: one token over, the whole request higher.
        (200_001, 1.222506),
    ],
)
def test_the_long_context_tier_starts_above_its_threshold(prompt: int, expected: float) -> None:
    cost = PriceTable.load().cost(
        "anthropic", "claude-sonnet-4-5", Usage(input_tokens=prompt, output_tokens=1000)
    )
    assert cost is not None
    assert_billed(cost.usd, expected)
    assert cost.saved_usd is None  # no cache reported
