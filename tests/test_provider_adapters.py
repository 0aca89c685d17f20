"""The adapters against the real SDKs and a loopback server: one descriptor per provider, the
exact body and credentials on the wire, and every upstream answer read into one ProviderReply."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.errors import (
    InvalidModel,
    ProviderError,
    ProviderUnavailable,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
)
from app.providers.anthropic import AnthropicProvider
from app.providers.base import ALL_PARAMS, NativeOutput, ProviderCall
from app.providers.openai import OpenAIProvider
from app.providers.registry import DESCRIPTORS, PROVIDER_NAMES, ProviderRegistry
from app.routing.policy import split_model
from app.schemas import Message, ModelParams, ResponseFormat
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import ANTHROPIC_KEY, OPENAI_KEY, settings_for

CALL = ProviderCall(
    model="m-1",
    system="Be brief.",
    messages=(Message(role="user", content="hello"),),
    params=ModelParams(max_tokens=64, temperature=0.5, stop=["END"], seed=7, top_p=0.9),
)
SCHEMA = {"type": "array", "items": {"type": "string"}}


@pytest.fixture
async def registry(fake: FakeProviderServer) -> AsyncIterator[ProviderRegistry]:
    providers = ProviderRegistry.from_settings(settings_for(fake))
    yield providers
    await providers.aclose()


# --- one descriptor per provider -------------------------------------------------------------


def test_every_provider_is_described_once_and_routing_knows_exactly_those() -> None:
    assert PROVIDER_NAMES == ("openai", "anthropic", "ollama")
    assert all(DESCRIPTORS[name].name == name for name in PROVIDER_NAMES)
    for name in PROVIDER_NAMES:
        assert split_model(f"{name}/some-model") == (name, "some-model")
    with pytest.raises(InvalidModel) as caught:
        split_model("mistral/large")
    assert "openai, anthropic, ollama" in caught.value.message


def test_supported_params_come_from_the_descriptor_even_when_unconfigured() -> None:
    assert ProviderRegistry.supported_params("anthropic") == {
        "max_tokens",
        "stop",
        "reasoning_effort",
        "thinking",
        "thinking_budget",
    }
    assert ProviderRegistry.supported_params("openai") == ALL_PARAMS - {
        "thinking",
        "thinking_budget",
    }


async def test_unconfigured_providers_say_how_to_configure_them() -> None:
    providers = ProviderRegistry.from_settings(settings_for(None))
    try:
        assert providers.status() == {"openai": False, "anthropic": False, "ollama": True}
        for name in ("openai", "anthropic"):
            with pytest.raises(ProviderUnavailable) as caught:
                providers.get(name)
            assert DESCRIPTORS[name].how_to_configure in caught.value.message
    finally:
        await providers.aclose()


async def test_configured_providers_are_built_once_and_reused(
    registry: ProviderRegistry,
) -> None:
    assert registry.status() == dict.fromkeys(PROVIDER_NAMES, True)
    assert registry.get("openai") is registry.get("openai")


# --- what goes on the wire -------------------------------------------------------------------


async def test_openai_sends_exactly_its_request_body_with_the_bearer_key(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    call = ProviderCall(
        model=CALL.model,
        system=CALL.system,
        messages=CALL.messages,
        params=CALL.params,
        output=NativeOutput(ResponseFormat(type="json_schema", json_schema=SCHEMA)),
    )
    reply = await registry.get("openai").complete(call)
    (sent,) = fake.calls("openai")
    assert sent.body == OpenAIProvider.request_kwargs(call)
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert reply.text == "echo: hello"
    assert reply.finish_reason == "stop"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (
        11,
        7,
        18,
    )
    assert reply.upstream_request_id is not None
    assert reply.upstream_request_id.startswith("req_fake_")


async def test_anthropic_sends_exactly_its_request_body_with_its_key(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    provider = registry.get("anthropic")
    assert isinstance(provider, AnthropicProvider)
    fake.script("anthropic", Reply.ok("short", finish="max_tokens", output_tokens=3))
    reply = await provider.complete(CALL)
    (sent,) = fake.calls("anthropic")
    assert sent.body == provider.request_kwargs(CALL)
    assert ANTHROPIC_KEY in sent.headers.get("authorization", "") + sent.headers.get(
        "x-api-key", ""
    )
    assert "anthropic-version" in sent.headers
    assert (reply.text, reply.finish_reason) == ("short", "length")
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (
        11,
        3,
        14,
    )
    assert reply.upstream_request_id is not None


async def test_anthropic_structured_output_arrives_parsed_from_the_forced_tool(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("anthropic", Reply.ok('{"value": ["a", "b"]}'))
    call = ProviderCall(
        model=CALL.model,
        system=CALL.system,
        messages=CALL.messages,
        params=CALL.params,
        output=NativeOutput(ResponseFormat(type="json_schema", json_schema=SCHEMA), via="tool"),
    )
    reply = await registry.get("anthropic").complete(call)
    assert reply.payload == ["a", "b"]
    assert reply.text == '["a", "b"]'
    assert reply.finish_reason == "stop"  # the output tool is the answer, not a call to run
    assert reply.tool_calls == ()


# --- what comes back -------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_an_answer_of_the_wrong_shape_is_a_provider_error_naming_the_field(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.raw(200, {"id": "x", "usage": "lots"}))
    with pytest.raises(ProviderError) as caught:
        await registry.get(provider).complete(CALL)
    assert type(caught.value) is ProviderError
    assert caught.value.message.startswith(f"{provider} answered unexpectedly: ")


async def test_openai_with_no_choices_is_an_upstream_error(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.raw(200, {"choices": [], "usage": None}))
    with pytest.raises(UpstreamError, match="no choices"):
        await registry.get("openai").complete(CALL)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_sdk_errors_are_still_translated_by_status(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(
        provider,
        Reply.error(429, headers={"retry-after": "7"}),
        Reply.error(400, message="bad stop sequence"),
    )
    with pytest.raises(UpstreamRateLimited) as limited:
        await registry.get(provider).complete(CALL)
    assert limited.value.retry_after == 7.0
    with pytest.raises(UpstreamRejected, match="bad stop sequence") as rejected:
        await registry.get(provider).complete(CALL)
    assert rejected.value.upstream_request_id is not None


async def test_ollama_errors_keep_their_headers_and_message(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script(
        "ollama",
        Reply.error(429, headers={"retry-after": "7"}, message="too many requests"),
        Reply.error(404, message='model "m-1" not found, try pulling it first'),
    )
    with pytest.raises(UpstreamRateLimited) as limited:
        await registry.get("ollama").complete(CALL)
    assert limited.value.retry_after == 7.0
    assert "too many requests" in limited.value.message
    with pytest.raises(UpstreamRejected, match="try pulling it first") as rejected:
        await registry.get("ollama").complete(CALL)
    assert rejected.value.upstream_status == 404


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
async def test_a_reset_before_the_answer_is_a_retriable_upstream_error(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.reset())
    with pytest.raises(UpstreamError):
        await registry.get(provider).complete(CALL)


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
async def test_a_truncated_answer_is_a_provider_error(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.cut(after=0))
    with pytest.raises(ProviderError) as caught:
        await registry.get(provider).complete(CALL)
    assert caught.value.provider == provider
