"""Prove the fake provider server is faithful enough for the real SDKs to parse."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.fakes.provider_server import (
    FakeProviderServer,
    Reply,
    StreamCounts,
    running_fake_provider,
)

SYSTEM = "You are terse."


@pytest.fixture(scope="module")
def fake_server() -> Iterator[FakeProviderServer]:
    with running_fake_provider() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeProviderServer) -> Iterator[FakeProviderServer]:
    fake_server.reset()
    yield fake_server
    fake_server.reset()


def _openai(fake: FakeProviderServer, timeout: float = 5.0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="k", base_url=f"{fake.base_url}/v1", max_retries=0, timeout=timeout
    )


def _anthropic(fake: FakeProviderServer, timeout: float = 5.0) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        api_key="k", base_url=fake.base_url, max_retries=0, timeout=timeout
    )


def _ollama(fake: FakeProviderServer, timeout: float = 5.0) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=fake.base_url, timeout=timeout)


# Each helper closes its client: an unclosed httpx/httpx2 client is garbage-collected
# after pytest-asyncio closed the loop and logs "Event loop is closed".


async def _call_openai(
    fake: FakeProviderServer, client_timeout: float = 5.0
) -> openai.types.chat.ChatCompletion:
    async with _openai(fake, client_timeout) as client:
        return await client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
        )


async def _call_anthropic(
    fake: FakeProviderServer, client_timeout: float = 5.0
) -> anthropic.types.Message:
    async with _anthropic(fake, client_timeout) as client:
        return await client.messages.create(
            model="claude-test",
            max_tokens=64,
            system=SYSTEM,
            messages=[{"role": "user", "content": "hi"}],
        )


async def _call_ollama(
    fake: FakeProviderServer, client_timeout: float = 5.0
) -> ollama.ChatResponse:
    client = _ollama(fake, client_timeout)  # its __aenter__ is untyped: keep the typed name
    async with client:
        return await client.chat(
            model="llama-test",
            stream=False,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}],
        )


# --- success --------------------------------------------------------------------------


async def test_openai_success_parses(fake: FakeProviderServer) -> None:
    resp = await _call_openai(fake)
    assert resp.choices[0].message.content == "echo: hi"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.model == "gpt-test"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (11, 7)
    assert resp.usage.total_tokens == 18
    body = fake.calls("openai")[0].body
    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert fake.calls("openai")[0].headers["authorization"] == "Bearer k"


async def test_openai_request_id_header(fake: FakeProviderServer) -> None:
    async with _openai(fake) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-test", messages=[{"role": "user", "content": "x"}]
        )
    assert raw.headers["x-request-id"].startswith("req_fake_")


async def test_anthropic_success_parses(fake: FakeProviderServer) -> None:
    fake.script("anthropic", Reply.ok("scripted", finish="max_tokens", output_tokens=3))
    msg = await _call_anthropic(fake)
    assert msg.content[0].type == "text"
    assert msg.content[0].text == "scripted"
    assert msg.stop_reason == "max_tokens"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (11, 3)
    msg = await _call_anthropic(fake)  # queue exhausted -> default success
    assert msg.content[0].type == "text"
    assert msg.content[0].text == "echo: hi"
    assert msg.stop_reason == "end_turn"
    req = fake.calls("anthropic")[0]
    assert req.body["system"] == SYSTEM
    assert all(m["role"] != "system" for m in req.body["messages"])
    # anthropic 2.x sends api_key as a bearer token, not the x-api-key header
    assert req.headers["authorization"] == "Bearer k"
    assert "anthropic-version" in req.headers


async def test_ollama_success_parses(fake: FakeProviderServer) -> None:
    resp = await _call_ollama(fake)
    assert resp.message.content == "echo: hi"
    assert resp.done is True
    assert resp.done_reason == "stop"
    assert (resp.prompt_eval_count, resp.eval_count) == (11, 7)
    body = fake.calls("ollama")[0].body
    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"] == SYSTEM
    assert body["stream"] is False


async def test_ollama_streaming_is_honoured(fake: FakeProviderServer) -> None:
    async with _ollama(fake) as client:
        stream = await client.chat(
            model="llama-test", messages=[{"role": "user", "content": "s"}], stream=True
        )
        chunks = [c async for c in stream]
    assert [c.message.content for c in chunks] == ["echo: ", "s", ""]
    assert [c.done for c in chunks] == [False, False, True]
    assert (chunks[-1].done_reason, chunks[-1].prompt_eval_count, chunks[-1].eval_count) == (
        "stop",
        11,
        7,
    )


async def test_ollama_tags(fake: FakeProviderServer) -> None:
    async with _ollama(fake) as client:
        listed = await client.list()
    assert list(listed.models) == []
    assert fake.requests == []


# --- errors ---------------------------------------------------------------------------


async def test_openai_rate_limit(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.error(429, headers={"retry-after": "3"}, message="slow down"))
    with pytest.raises(openai.RateLimitError) as info:
        await _call_openai(fake)
    assert info.value.status_code == 429
    assert info.value.response.headers["retry-after"] == "3"
    assert isinstance(info.value.body, dict)
    assert info.value.body["message"] == "slow down"  # the SDK unwraps {"error": ...}


async def test_anthropic_rate_limit(fake: FakeProviderServer) -> None:
    fake.script("anthropic", Reply.error(429, headers={"retry-after": "3"}))
    with pytest.raises(anthropic.RateLimitError) as info:
        await _call_anthropic(fake)
    assert info.value.response.headers["retry-after"] == "3"
    assert info.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]


async def test_ollama_rate_limit(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.error(429, message="busy"))
    with pytest.raises(ollama.ResponseError) as info:
        await _call_ollama(fake)
    assert info.value.status_code == 429
    assert info.value.error == "busy"


async def test_server_errors(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.error(500))
    fake.script("anthropic", Reply.error(500), Reply.error(529))
    fake.script("ollama", Reply.error(500))
    with pytest.raises(openai.InternalServerError):
        await _call_openai(fake)
    with pytest.raises(anthropic.InternalServerError) as info:
        await _call_anthropic(fake)
    assert info.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as info:
        await _call_anthropic(fake)
    assert info.value.status_code == 529
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    with pytest.raises(ollama.ResponseError) as oinfo:
        await _call_ollama(fake)
    assert oinfo.value.status_code == 500


async def test_raw_reply(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.raw(418, {"error": "teapot"}))
    with pytest.raises(ollama.ResponseError) as info:
        await _call_ollama(fake)
    assert (info.value.status_code, info.value.error) == (418, "teapot")


# --- timeouts -------------------------------------------------------------------------


async def test_openai_timeout(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.delay(1.0))
    with pytest.raises(openai.APITimeoutError):
        await _call_openai(fake, client_timeout=0.2)


async def test_anthropic_timeout(fake: FakeProviderServer) -> None:
    fake.script("anthropic", Reply.delay(1.0))
    with pytest.raises(anthropic.APITimeoutError):
        await _call_anthropic(fake, client_timeout=0.2)


async def test_ollama_timeout_is_raw_httpx(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.delay(1.0))
    with pytest.raises(httpx.ReadTimeout):  # ollama does not wrap timeouts
        await _call_ollama(fake, client_timeout=0.2)


async def test_delay_then_reply(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.delay(0.05, then=Reply.ok("late", finish="length")))
    resp = await _call_openai(fake)
    assert resp.choices[0].message.content == "late"
    assert resp.choices[0].finish_reason == "length"


# --- bookkeeping ----------------------------------------------------------------------


async def test_reset_and_unknown_provider(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.error(500))
    await _call_ollama(fake)
    assert [r.provider for r in fake.requests] == ["ollama"]
    assert fake.requests[0].path == "/api/chat"
    fake.reset()
    assert fake.requests == []
    await _call_openai(fake)  # the scripted 500 was cleared
    with pytest.raises(ValueError):
        fake.script("gemini", Reply.ok())


async def test_ollama_connection_error(fake: FakeProviderServer) -> None:
    with running_fake_provider() as other:
        dead_url = other.base_url
    dead = FakeProviderServer()
    dead.base_url = dead_url
    with pytest.raises(ConnectionError):  # builtin ConnectionError, not an httpx error
        await _call_ollama(dead, client_timeout=2)


async def test_stop_does_not_wait_for_pending_delays() -> None:
    started = time.monotonic()
    with running_fake_provider() as other:
        other.script("openai", Reply.delay(30))
        with pytest.raises(openai.APITimeoutError):
            await _call_openai(other, client_timeout=0.2)
    assert time.monotonic() - started < 5


# --- streaming ------------------------------------------------------------------------
# The SDKs' own typed stream parsers must accept what the fake sends, or the adapters' tests
# would prove nothing.


async def _openai_chunks(
    fake: FakeProviderServer, *, include_usage: bool = True, client_timeout: float = 5.0
) -> list[openai.types.chat.ChatCompletionChunk]:
    async with _openai(fake, client_timeout) as client:
        stream = await client.chat.completions.create(
            model="gpt-test",
            messages=[{"role": "user", "content": "hi there"}],
            stream=True,
            stream_options={"include_usage": include_usage},
        )
        return [chunk async for chunk in stream]


async def test_openai_stream_is_chunks_then_usage_then_done(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.ok(cached_input_tokens=4, reasoning_tokens=2))
    chunks = await _openai_chunks(fake)
    texts = [c.choices[0].delta.content for c in chunks if c.choices]
    assert texts == ["", "echo: ", "hi ", "there", None]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    *text_chunks, usage_chunk = chunks
    assert all(c.usage is None for c in text_chunks)
    assert usage_chunk.choices == []
    assert usage_chunk.usage is not None
    assert (usage_chunk.usage.prompt_tokens, usage_chunk.usage.completion_tokens) == (11, 7)
    assert usage_chunk.usage.prompt_tokens_details is not None
    assert usage_chunk.usage.prompt_tokens_details.cached_tokens == 4
    assert usage_chunk.usage.completion_tokens_details is not None
    assert usage_chunk.usage.completion_tokens_details.reasoning_tokens == 2


async def test_openai_stream_without_include_usage_sends_no_usage(
    fake: FakeProviderServer,
) -> None:
    chunks = await _openai_chunks(fake, include_usage=False)
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


async def test_openai_sdk_ends_a_cut_stream_silently(fake: FakeProviderServer) -> None:
    """Why the adapter checks for a finish reason: the SDK itself raises nothing."""
    fake.script("openai", Reply.cut(after=1))
    chunks = await _openai_chunks(fake)
    assert [c.choices[0].delta.content for c in chunks] == ["", "echo: "]
    assert all(c.choices[0].finish_reason is None for c in chunks)


async def test_openai_stream_reset_is_a_connection_error(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.reset(after=1))
    with pytest.raises(openai.APIConnectionError):
        await _openai_chunks(fake)
    fake.script("openai", Reply.reset())  # before a byte: the same error, from create()
    with pytest.raises(openai.APIConnectionError):
        await _call_openai(fake)


async def test_openai_slow_chunks_trip_the_read_timeout(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.slow(2.0))
    with pytest.raises(openai.APITimeoutError):
        await _openai_chunks(fake, client_timeout=0.2)


async def test_openai_error_inside_a_stream(fake: FakeProviderServer) -> None:
    fake.script("openai", Reply.stream_error(after=1, message="boom"))
    with pytest.raises(openai.APIError, match="boom"):
        await _openai_chunks(fake)


async def test_anthropic_stream_accumulates_into_the_sdk_final_message(
    fake: FakeProviderServer,
) -> None:
    fake.script(
        "anthropic", Reply.ok(chunks=("Hello", " world"), cached_input_tokens=5, output_tokens=3)
    )
    async with (
        _anthropic(fake) as client,
        client.messages.stream(
            model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert texts == ["Hello", " world"]
    assert final.content[0].type == "text" and final.content[0].text == "Hello world"
    assert final.stop_reason == "end_turn"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 3)
    assert final.usage.cache_read_input_tokens == 5


async def test_anthropic_stream_event_order(fake: FakeProviderServer) -> None:
    async with _anthropic(fake) as client:
        stream = await client.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        )
        kinds = [event.type async for event in stream]
    assert kinds == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]  # the SDK drops `ping`


async def test_anthropic_error_event_mid_stream(fake: FakeProviderServer) -> None:
    fake.script("anthropic", Reply.stream_error(after=1, status=529, message="Overloaded"))
    async with _anthropic(fake) as client:
        stream = await client.messages.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
        )
        with pytest.raises(anthropic.APIStatusError) as info:
            async for _ in stream:
                pass
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


async def test_ollama_stream_cut_and_error_lines(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.cut(after=1), Reply.stream_error(after=1, message="oom"))
    async with _ollama(fake) as client:
        stream = await client.chat(
            model="llama-test", messages=[{"role": "user", "content": "s"}], stream=True
        )
        chunks = [c async for c in stream]
        assert [c.done for c in chunks] == [False]  # no done=true: the SDK does not notice
        stream = await client.chat(
            model="llama-test", messages=[{"role": "user", "content": "s"}], stream=True
        )
        with pytest.raises(ollama.ResponseError, match="oom"):
            async for _ in stream:
                pass


async def test_ollama_reset_is_a_raw_httpx_error(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.reset(after=1))
    async with _ollama(fake) as client:
        stream = await client.chat(
            model="llama-test", messages=[{"role": "user", "content": "s"}], stream=True
        )
        with pytest.raises(httpx.TransportError):
            async for _ in stream:
                pass


async def test_unstreamed_cut_is_a_truncated_body(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.cut(after=0))
    async with httpx.AsyncClient(base_url=fake.base_url) as client:
        response = await client.post("/api/chat", json={"model": "m", "messages": []})
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content)
    with pytest.raises(ValueError):
        response.json()


async def test_stream_counts_see_a_client_walk_away(fake: FakeProviderServer) -> None:
    fake.script("ollama", Reply.slow(0.05, chunks=tuple("abcdefghij")))
    async with httpx.AsyncClient(base_url=fake.base_url) as client:
        body = {"model": "m", "messages": [], "stream": True}
        async with client.stream("POST", "/api/chat", json=body) as response:
            async for _ in response.aiter_lines():
                break
            assert fake.streams.open == 1
    assert await fake.settled_streams() == StreamCounts(opened=1, abandoned=1)
    assert fake.connections == 1
    fake.reset()
    assert (fake.streams, fake.connections) == (StreamCounts(), 0)


async def test_unstreamed_usage_details_appear_only_when_scripted(
    fake: FakeProviderServer,
) -> None:
    fake.script("openai", Reply.ok(cached_input_tokens=3), Reply.ok(send_usage=False))
    fake.script("anthropic", Reply.ok(cached_input_tokens=3, cache_write_tokens=2))
    detailed = await _call_openai(fake)
    assert detailed.usage is not None and detailed.usage.prompt_tokens_details is not None
    assert detailed.usage.prompt_tokens_details.cached_tokens == 3
    assert detailed.usage.completion_tokens_details is None
    assert (await _call_openai(fake)).usage is None
    plain = (await _call_openai(fake)).usage
    assert plain is not None and plain.prompt_tokens_details is None
    usage = (await _call_anthropic(fake)).usage
    assert (usage.input_tokens, usage.cache_read_input_tokens) == (11, 3)
    assert usage.cache_creation_input_tokens == 2
