"""Prove the fake provider server is faithful enough for the real SDKs to parse."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.fakes.provider_server import FakeProviderServer, Reply, running_fake_provider

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
    assert [c.message.content for c in chunks] == ["echo: s"]
    assert chunks[-1].done is True


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
