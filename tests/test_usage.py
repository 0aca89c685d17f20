"""Token usage normalised across providers, answered whole and streamed: `input_tokens` is the
whole prompt (cached tokens included), `cached_input_tokens` the part served from the provider's
prompt cache, `reasoning_tokens` the part of `output_tokens` spent on hidden reasoning; None
wherever the provider reported nothing. The whole answers are real providers' documented
payloads, played back verbatim by the loopback fake through the real SDKs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.providers.base import ProviderCall, ProviderReply
from app.providers.registry import ProviderRegistry
from app.schemas import Message, ModelParams, Usage
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import settings_for

CALL = ProviderCall(
    model="m-1",
    system="",
    messages=(Message(role="user", content="summarise the attached contract"),),
    params=ModelParams(max_tokens=512),
)

# An o-series answer: most of the prompt came from the cache, most of the output was reasoning.
OPENAI_REASONING_ANSWER: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "o4-mini-2025-04-16",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "The contract renews yearly.",
                "refusal": None,
                "annotations": [],
            },
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

# An OpenAI-compatible server (vLLM, llama.cpp) reports the three counts and no details.
COMPATIBLE_ANSWER: dict[str, Any] = {
    "id": "cmpl-4c1e",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Yearly.", "tool_calls": []},
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
    ],
    "usage": {"prompt_tokens": 42, "total_tokens": 45, "completion_tokens": 3},
}


def anthropic_answer(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "The contract renews yearly."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
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


@pytest.fixture
async def registry(fake: FakeProviderServer) -> AsyncIterator[ProviderRegistry]:
    providers = ProviderRegistry.from_settings(settings_for(fake))
    yield providers
    await providers.aclose()


async def streamed(registry: ProviderRegistry, provider: str) -> ProviderReply:
    replies = [e async for e in registry.get(provider).stream(CALL) if isinstance(e, ProviderReply)]
    assert len(replies) == 1
    return replies[0]


# --- OpenAI: the counts already include cached and reasoning tokens --------------------------


async def test_openai_cached_and_reasoning_tokens_are_read_from_the_details(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.raw(200, OPENAI_REASONING_ANSWER))
    reply = await registry.get("openai").complete(CALL)
    assert reply.usage == Usage(
        input_tokens=2006,
        output_tokens=300,
        total_tokens=2306,
        cached_input_tokens=1920,
        reasoning_tokens=192,
    )


async def test_openai_streamed_usage_is_normalised_the_same_way(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script(
        "openai",
        Reply.ok(
            input_tokens=2006, output_tokens=300, cached_input_tokens=1920, reasoning_tokens=192
        ),
    )
    reply = await streamed(registry, "openai")
    assert reply.usage == Usage(
        input_tokens=2006,
        output_tokens=300,
        total_tokens=2306,
        cached_input_tokens=1920,
        reasoning_tokens=192,
    )


async def test_a_compatible_server_without_details_leaves_them_unknown(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.raw(200, COMPATIBLE_ANSWER))
    reply = await registry.get("openai").complete(CALL)
    assert reply.usage == Usage(input_tokens=42, output_tokens=3, total_tokens=45)
    assert reply.usage.cached_input_tokens is None and reply.usage.reasoning_tokens is None


async def test_an_answer_without_usage_reports_none(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.raw(200, {**COMPATIBLE_ANSWER, "usage": None}))
    reply = await registry.get("openai").complete(CALL)
    assert reply.usage == Usage()


# --- Anthropic: input_tokens excludes the cache; the gateway's includes it ------------------


@pytest.mark.parametrize(
    ("wire", "normalised"),
    [
        pytest.param(
            {
                "input_tokens": 21,
                "cache_creation_input_tokens": 188086,
                "cache_read_input_tokens": 0,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 188086,
                    "ephemeral_1h_input_tokens": 0,
                },
                "output_tokens": 393,
                "service_tier": "standard",
            },
            Usage(
                input_tokens=188107,
                output_tokens=393,
                total_tokens=188500,
                cached_input_tokens=0,
                cache_write_tokens=188086,
                cache_write_1h_tokens=0,
            ),
            id="first call writes the cache",
        ),
        pytest.param(
            {
                "input_tokens": 21,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 188086,
                "output_tokens": 393,
            },
            Usage(
                input_tokens=188107,
                output_tokens=393,
                total_tokens=188500,
                cached_input_tokens=188086,
                cache_write_tokens=0,
            ),
            id="second call reads it",
        ),
        pytest.param(
            {"input_tokens": 12, "output_tokens": 6},
            Usage(input_tokens=12, output_tokens=6, total_tokens=18),
            id="no caching reported",
        ),
    ],
)
async def test_anthropic_input_counts_the_whole_prompt_and_cached_the_cache_reads(
    registry: ProviderRegistry,
    fake: FakeProviderServer,
    wire: dict[str, Any],
    normalised: Usage,
) -> None:
    fake.script("anthropic", Reply.raw(200, anthropic_answer(wire)))
    reply = await registry.get("anthropic").complete(CALL)
    assert reply.usage == normalised
    assert reply.usage.reasoning_tokens is None  # Anthropic does not report it apart


async def test_anthropic_streamed_usage_joins_message_start_and_message_delta(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    # message_start carries the input side (and output_tokens 1), message_delta the output.
    fake.script(
        "anthropic",
        Reply.ok(
            input_tokens=21, cached_input_tokens=1800, cache_write_tokens=200, output_tokens=393
        ),
    )
    reply = await streamed(registry, "anthropic")
    assert reply.usage == Usage(
        input_tokens=2021,
        output_tokens=393,
        total_tokens=2414,
        cached_input_tokens=1800,
        cache_write_tokens=200,
    )


# --- Ollama: prompt_eval_count and eval_count, nothing about caches or reasoning --------------


async def test_ollama_counts_come_from_the_eval_counts(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("ollama", Reply.raw(200, OLLAMA_ANSWER))
    reply = await registry.get("ollama").complete(CALL)
    assert reply.usage == Usage(input_tokens=26, output_tokens=298, total_tokens=324)


async def test_ollama_streamed_counts_come_from_the_done_chunk(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("ollama", Reply.ok(input_tokens=26, output_tokens=298))
    reply = await streamed(registry, "ollama")
    assert reply.usage == Usage(input_tokens=26, output_tokens=298, total_tokens=324)


async def test_ollama_without_a_prompt_count_has_no_total(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    # Ollama leaves prompt_eval_count out when the whole prompt was already in its KV cache.
    answer = {k: v for k, v in OLLAMA_ANSWER.items() if k != "prompt_eval_count"}
    fake.script("ollama", Reply.raw(200, answer))
    reply = await registry.get("ollama").complete(CALL)
    assert reply.usage == Usage(output_tokens=298)
