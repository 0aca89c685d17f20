"""Ollama's SDK speaks plain httpx, so respx can inject transport faults the loopback server
cannot (refused connections, read timeouts) while the real SDK and retry policy run."""

from __future__ import annotations

import httpx
import ollama
import pytest
import respx

from app.config import UpstreamSettings
from app.errors import UpstreamError, UpstreamTimeout
from app.providers.base import ProviderCall
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
