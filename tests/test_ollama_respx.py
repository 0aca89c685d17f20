"""Ollama's SDK speaks plain httpx, so respx can inject transport faults the loopback server
cannot (refused connections, read timeouts) while the real SDK and retry policy run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import ollama
import pytest
import respx

from app.config import UpstreamSettings
from app.errors import (
    ProviderError,
    StreamInterrupted,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
)
from app.providers.base import ProviderCall, TextDelta
from app.providers.ollama import OllamaProvider
from app.providers.retry import RetryPolicy
from app.schemas import Message, ModelParams

HOST = "http://ollama.test:11434"
CALL = ProviderCall(
    model="llama3.2",
    system="Be brief.",
    messages=(Message(role="user", content="hi"),),
    params=ModelParams(),
)
OK = {
    "model": "llama3.2",
    "created_at": "2026-11-21T00:00:00Z",
    "message": {"role": "assistant", "content": "hello"},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 5,
    "eval_count": 2,
}


@pytest.fixture
def retry() -> RetryPolicy:
    return RetryPolicy(
        UpstreamSettings(max_retries=2, backoff_initial_seconds=0.001, backoff_max_seconds=0.002)
    )


async def run(retry: RetryPolicy) -> object:
    provider = OllamaProvider(ollama.AsyncClient(host=HOST))
    try:
        return await retry.run(lambda: provider.complete(CALL))
    finally:
        await provider.aclose()


async def test_refused_connections_are_retried_then_reported_as_upstream_error(
    retry: RetryPolicy,
) -> None:
    with respx.mock() as mock, pytest.raises(UpstreamError) as caught:
        route = mock.post(f"{HOST}/api/chat").mock(side_effect=httpx.ConnectError("refused"))
        await run(retry)
    assert route.call_count == 3
    assert "OLLAMA_HOST" in caught.value.message


async def test_a_read_timeout_is_upstream_timeout_and_not_retried(retry: RetryPolicy) -> None:
    with respx.mock() as mock, pytest.raises(UpstreamTimeout):
        route = mock.post(f"{HOST}/api/chat").mock(side_effect=httpx.ReadTimeout("slow"))
        await run(retry)
    assert route.call_count == 1


async def test_a_transient_503_is_retried_and_the_second_answer_is_used(
    retry: RetryPolicy,
) -> None:
    answers = iter(
        [httpx.Response(503, json={"error": "loading model"}), httpx.Response(200, json=OK)]
    )
    with respx.mock() as mock:
        route = mock.post(f"{HOST}/api/chat").mock(side_effect=lambda request: next(answers))
        reply = await run(retry)
    assert route.call_count == 2
    assert reply.text == "hello" and reply.usage.total_tokens == 7  # type: ignore[attr-defined]
    sent = route.calls.last.request
    assert b'"role":"system"' in sent.content.replace(b" ", b"")


# --- Retry-After, which the SDK's ResponseError drops -------------------------------------------


async def test_a_429_keeps_its_retry_after_through_the_adapters_client() -> None:
    provider = OllamaProvider.connect(HOST, timeout=5)
    try:
        with respx.mock() as mock, pytest.raises(UpstreamRateLimited) as caught:
            mock.post(f"{HOST}/api/chat").mock(
                return_value=httpx.Response(
                    429, headers={"Retry-After": "2"}, json={"error": "server busy"}
                )
            )
            await provider.complete(CALL)
    finally:
        await provider.aclose()
    assert caught.value.retry_after == 2.0
    assert caught.value.upstream_status == 429
    assert "server busy" in caught.value.message


async def test_a_plain_sdk_client_still_maps_the_status_and_keeps_retry_after() -> None:
    """An answer is read by the adapter itself (under the answer cap), so even a client built
    without the hook keeps the headers of an error."""
    provider = OllamaProvider(ollama.AsyncClient(host=HOST))
    try:
        with respx.mock() as mock, pytest.raises(UpstreamRateLimited) as caught:
            mock.post(f"{HOST}/api/chat").mock(
                return_value=httpx.Response(429, headers={"Retry-After": "2"}, json={"error": "x"})
            )
            await provider.complete(CALL)
    finally:
        await provider.aclose()
    assert caught.value.retry_after == 2


# --- transport faults in the middle of a stream -------------------------------------------------


def _ndjson(*lines: dict[str, object]) -> list[bytes]:
    return [json.dumps(line).encode() + b"\n" for line in lines]


class _Breaking(httpx.AsyncByteStream):
    """A response body that sends some lines, then fails the way a network does."""

    def __init__(self, lines: list[bytes], failure: Exception) -> None:
        self._lines = lines
        self._failure = failure

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for line in self._lines:
            yield line
        raise self._failure


FIRST = {**OK, "message": {"role": "assistant", "content": "hel"}, "done": False}


@pytest.mark.parametrize(
    ("failure", "error_type"),
    [
        (httpx.ReadError("connection reset by peer"), StreamInterrupted),
        (httpx.RemoteProtocolError("peer closed connection"), StreamInterrupted),
        (httpx.ReadTimeout("no data"), UpstreamTimeout),
    ],
)
async def test_a_transport_failure_mid_stream(
    failure: Exception, error_type: type[ProviderError]
) -> None:
    provider = OllamaProvider.connect(HOST, timeout=5)
    seen: list[object] = []
    try:
        with respx.mock() as mock, pytest.raises(error_type) as caught:
            body = _Breaking(_ndjson(FIRST), failure)
            mock.post(f"{HOST}/api/chat").mock(return_value=httpx.Response(200, stream=body))
            async for event in provider.stream(CALL):
                seen.append(event)
    finally:
        await provider.aclose()
    assert seen == [TextDelta("hel")]
    assert type(caught.value) is error_type


async def test_a_stream_whose_last_line_is_cut_short_is_interrupted() -> None:
    provider = OllamaProvider.connect(HOST, timeout=5)
    try:
        with respx.mock() as mock, pytest.raises(StreamInterrupted):
            body = _ndjson(FIRST)[0] + b'{"model": "llama3.2", "done": tr'
            mock.post(f"{HOST}/api/chat").mock(return_value=httpx.Response(200, content=body))
            async for _ in provider.stream(CALL):
                pass
    finally:
        await provider.aclose()


async def test_a_refused_connection_fails_the_first_step_of_a_stream() -> None:
    provider = OllamaProvider.connect(HOST, timeout=5)
    try:
        with respx.mock() as mock, pytest.raises(UpstreamError, match="OLLAMA_HOST"):
            mock.post(f"{HOST}/api/chat").mock(side_effect=httpx.ConnectError("refused"))
            await anext(provider.stream(CALL))
    finally:
        await provider.aclose()
