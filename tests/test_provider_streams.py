"""Provider.stream through the real SDKs against the loopback fake: text deltas then one reply
with usage, and every way a stream goes wrong (cut, reset, in-stream error, HTTP error before the
first chunk, silence) surfaces as the ProviderError the caller is promised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from app.config import UpstreamSettings
from app.errors import (
    ProviderError,
    StreamInterrupted,
    UpstreamAuthFailed,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.providers.base import NativeOutput, ProviderCall, ProviderReply, StreamEvent, TextDelta
from app.providers.registry import ProviderRegistry
from app.schemas import Message, ModelParams, ResponseFormat, Usage
from tests.fakes.provider_server import PROVIDERS, FakeProviderServer, Reply, StreamCounts
from tests.support import settings_for

CALL = ProviderCall(
    model="m-1",
    system="Be brief.",
    messages=(Message(role="user", content="tell me more"),),
    params=ModelParams(max_tokens=64),
)


@pytest.fixture
async def registry(fake: FakeProviderServer) -> AsyncIterator[ProviderRegistry]:
    """Every adapter aimed at the fake, no retries, and a short per-read timeout."""
    upstream = UpstreamSettings(timeout_seconds=0.5, max_retries=0)
    providers = ProviderRegistry.from_settings(settings_for(fake, upstream=upstream))
    yield providers
    await providers.aclose()


def open_stream(
    registry: ProviderRegistry, provider: str, call: ProviderCall = CALL
) -> AsyncGenerator[StreamEvent, None]:
    events = registry.get(provider).stream(call)
    assert isinstance(events, AsyncGenerator)  # so that the test can close it early
    return events


async def collect(
    registry: ProviderRegistry, provider: str, call: ProviderCall = CALL
) -> tuple[list[str], list[ProviderReply]]:
    """Every delta's text and every reply, in order, of one whole stream."""
    deltas: list[str] = []
    replies: list[ProviderReply] = []
    async for event in open_stream(registry, provider, call):
        assert not replies, "nothing may follow the reply"
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        elif isinstance(event, ProviderReply):
            replies.append(event)
    return deltas, replies


async def fails_with(
    registry: ProviderRegistry, provider: str, error: type[ProviderError]
) -> tuple[ProviderError, list[str]]:
    """The error a stream ends with, and the deltas that came before it."""
    deltas: list[str] = []
    with pytest.raises(error) as caught:
        async for event in open_stream(registry, provider):
            assert isinstance(event, TextDelta), "a failed stream must not yield a reply"
            deltas.append(event.text)
    assert caught.value.provider == provider
    return caught.value, deltas


# --- a whole stream --------------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_is_text_deltas_then_one_reply_with_the_whole_text_and_usage(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.ok(chunks=("Once ", "upon ", "a time."), finish=None))
    deltas, replies = await collect(registry, provider)
    assert deltas == ["Once ", "upon ", "a time."]
    (reply,) = replies
    assert reply.text == "Once upon a time."
    assert reply.finish_reason == "stop"
    assert reply.usage == Usage(input_tokens=11, output_tokens=7, total_tokens=18)
    if provider != "ollama":  # Ollama sends no request id
        assert reply.upstream_request_id is not None
        assert reply.upstream_request_id.startswith("req_fake_")
    (sent,) = fake.calls(provider)
    assert sent.body["stream"] is True


async def test_openai_asks_for_usage_in_the_stream(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    await collect(registry, "openai")
    (sent,) = fake.calls("openai")
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["max_completion_tokens"] == 64


async def test_a_compatible_server_without_stream_usage_leaves_usage_unknown(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    fake.script("openai", Reply.ok("fine", send_usage=False))
    _, (reply,) = await collect(registry, "openai")
    assert (reply.text, reply.finish_reason) == ("fine", "stop")
    assert reply.usage == Usage()


@pytest.mark.parametrize(
    ("provider", "raw_finish"),
    [("openai", "length"), ("anthropic", "max_tokens"), ("ollama", "length")],
)
async def test_the_stop_reason_is_normalised(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str, raw_finish: str
) -> None:
    fake.script(provider, Reply.ok("cut by the limit", finish=raw_finish))
    _, (reply,) = await collect(registry, provider)
    assert reply.finish_reason == "length"


async def test_anthropic_streamed_structured_output_arrives_parsed_as_one_delta(
    registry: ProviderRegistry, fake: FakeProviderServer
) -> None:
    schema = {"type": "array", "items": {"type": "string"}}
    output = NativeOutput(ResponseFormat(type="json_schema", json_schema=schema), via="tool")
    call = ProviderCall(CALL.model, CALL.system, CALL.messages, CALL.params, output=output)
    fake.script("anthropic", Reply.ok(chunks=('{"value": ', '["a", ', '"b"]}')))
    deltas, (reply,) = await collect(registry, "anthropic", call)
    assert reply.payload == ["a", "b"]
    assert deltas == [reply.text] == ['["a", "b"]']
    assert reply.finish_reason == "stop"  # the output tool is the answer, not a call to run
    assert fake.calls("anthropic")[0].body["tool_choice"]["type"] == "tool"


# --- a stream that breaks ------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_cut_before_its_finish_marker_is_interrupted_not_short(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.cut(after=2, chunks=("one ", "two ", "three")))
    error, deltas = await fails_with(registry, provider, StreamInterrupted)
    assert deltas == ["one ", "two "]
    assert "incomplete" in error.message
    assert fake.streams == StreamCounts(opened=1, finished=1)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_connection_reset_mid_stream_is_interrupted(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.reset(after=1, chunks=("one ", "two ", "three")))
    _, deltas = await fails_with(registry, provider, StreamInterrupted)
    assert deltas in (["one "], [])  # a reset may discard what the client had not read yet


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_reset_before_any_byte_is_a_retriable_upstream_error(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.reset())
    _, deltas = await fails_with(registry, provider, UpstreamError)
    assert deltas == []
    assert fake.streams.opened == 0


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(529, UpstreamError), (500, UpstreamError), (429, UpstreamRateLimited)],
)
async def test_an_anthropic_error_event_mid_stream_maps_like_its_http_status(
    registry: ProviderRegistry,
    fake: FakeProviderServer,
    status: int,
    error_type: type[ProviderError],
) -> None:
    fake.script("anthropic", Reply.stream_error(after=1, status=status, message="Overloaded"))
    error, deltas = await fails_with(registry, "anthropic", error_type)
    assert type(error) is error_type
    assert deltas == ["echo: "]
    assert error.upstream_status == status
    assert error.upstream_request_id is not None
    assert "mid-stream" in error.message and "Overloaded" in error.message


@pytest.mark.parametrize("provider", ["openai", "ollama"])
async def test_an_error_inside_the_stream_is_an_upstream_error(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.stream_error(after=1, message="model crashed"))
    error, deltas = await fails_with(registry, provider, UpstreamError)
    assert type(error) is UpstreamError
    assert deltas == ["echo: "]
    assert "model crashed" in error.message


# --- failures before the first chunk ---------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_429_before_the_stream_keeps_its_retry_after(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.error(429, headers={"retry-after": "7"}, message="busy"))
    error, _ = await fails_with(registry, provider, UpstreamRateLimited)
    assert isinstance(error, UpstreamRateLimited)
    assert error.retry_after == 7.0
    assert error.upstream_status == 429


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("status", "error_type"), [(500, UpstreamError), (401, UpstreamAuthFailed)]
)
async def test_an_http_error_before_the_stream_is_raised_from_the_first_step(
    registry: ProviderRegistry,
    fake: FakeProviderServer,
    provider: str,
    status: int,
    error_type: type[ProviderError],
) -> None:
    fake.script(provider, Reply.error(status, message="scripted"))
    events = open_stream(registry, provider)
    assert fake.calls(provider) == []  # nothing is sent before the first step
    with pytest.raises(error_type) as caught:
        await anext(events)
    assert caught.value.upstream_status == status


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_no_answer_within_the_timeout_is_an_upstream_timeout(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.delay(3.0))
    await fails_with(registry, provider, UpstreamTimeout)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_stream_silent_past_the_timeout_is_an_upstream_timeout(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.ok(chunks=("fast ", "slow")), Reply.slow(3.0, "never"))
    deltas, _ = await collect(registry, provider)
    assert deltas == ["fast ", "slow"]
    error, _ = await fails_with(registry, provider, UpstreamTimeout)
    assert "silent" in error.message or "in time" in error.message


async def test_an_unreachable_provider_fails_on_the_first_step() -> None:
    providers = ProviderRegistry.from_settings(settings_for(None))  # ollama at a dead port
    try:
        with pytest.raises(UpstreamError, match="OLLAMA_HOST"):
            await anext(open_stream(providers, "ollama"))
    finally:
        await providers.aclose()


# --- the caller goes away ----------------------------------------------------------------------


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_closing_a_stream_early_closes_the_upstream_connection(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.slow(0.05, chunks=tuple(f"word{i} " for i in range(200))))
    events = open_stream(registry, provider)
    assert await anext(events) == TextDelta("word0 ")
    assert fake.streams.open == 1
    await events.aclose()
    assert await fake.settled_streams() == StreamCounts(opened=1, abandoned=1)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_cancelling_the_reader_closes_the_upstream_connection(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    fake.script(provider, Reply.slow(5.0, chunks=("late",)))
    events = open_stream(registry, provider)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):  # the caller's own idle timer, as the service has
            await anext(events)
    assert await fake.settled_streams() == StreamCounts(opened=1, abandoned=1)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_whole_stream_gives_its_connection_back_for_the_next_call(
    registry: ProviderRegistry, fake: FakeProviderServer, provider: str
) -> None:
    for _ in range(3):
        _, (reply,) = await collect(registry, provider)
        assert reply.text == "echo: tell me more"
    assert fake.streams == StreamCounts(opened=3, finished=3)
    assert fake.connections == 1
