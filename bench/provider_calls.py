"""Client-side cost of one provider call: the SDK's typed `create()` versus what the adapters do.

Each variant sends the same body and returns the same `ProviderReply`:

- `create()`: `chat.completions.create` / `messages.create`, reading the SDK's response model
  (the request is re-walked against the SDK's TypedDicts, the answer built into its models).
- `with_raw_response`: the same request, the body read by `read_reply` (one Rust pass).
- `post` (what the adapters use): the client's generic `post`, the body read by `read_reply`.

`--transport mock` answers in-process (httpx2.MockTransport), so only client CPU is timed;
`--transport loopback` answers from the fake provider server in its own process.

    .venv/bin/python -m bench.provider_calls --transport mock --n 3000
    .venv/bin/python -m bench.provider_calls --transport loopback --n 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import anthropic
import httpx2
import openai

from app.providers import anthropic as anthropic_adapter
from app.providers import openai as openai_adapter
from app.providers.anthropic import AnthropicProvider
from app.providers.base import (
    ProviderCall,
    ProviderReply,
    normalize_finish_reason,
    read_reply,
    translate_sdk_errors,
)
from app.providers.openai import OpenAIProvider
from app.schemas import Message, ModelParams, Usage

from ._common import REPO_ROOT

TEXT = "The refund goes to the original card unless the customer names another account. " * 5
OPENAI_BODY = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "logprobs": None,
                "message": {"role": "assistant", "content": TEXT, "refusal": None},
            }
        ],
        "usage": {"prompt_tokens": 411, "completion_tokens": 97, "total_tokens": 508},
    }
).encode()
ANTHROPIC_BODY = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": TEXT}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 411, "output_tokens": 97},
    }
).encode()
# About the size of the gateway's real prompts (bench/_common.py): 1,500 + 500 characters.
CALL = ProviderCall(
    model="gpt-4o-mini",
    system="You answer from the context below. " * 43,
    messages=(Message(role="user", content="Can the refund go to my bank account? " * 13),),
    params=ModelParams(max_tokens=256),
)
ANTHROPIC_CALL = ProviderCall(
    model="claude-x", system=CALL.system, messages=CALL.messages, params=CALL.params
)


def _answer(request: httpx2.Request) -> httpx2.Response:
    body = OPENAI_BODY if request.url.path.endswith("/chat/completions") else ANTHROPIC_BODY
    headers = {"content-type": "application/json", "x-request-id": "r1", "request-id": "r1"}
    return httpx2.Response(200, content=body, headers=headers)


async def openai_create(provider: OpenAIProvider, call: ProviderCall) -> ProviderReply:
    """The adapter as it was: the SDK's typed method and response model."""
    with translate_sdk_errors("openai", openai):
        result = await provider._client.chat.completions.create(**provider.request_kwargs(call))
    choice, usage = result.choices[0], result.usage
    return ProviderReply(
        text=choice.message.content or "",
        finish_reason=normalize_finish_reason(choice.finish_reason),
        usage=Usage(
            input_tokens=usage.prompt_tokens if usage else None,
            output_tokens=usage.completion_tokens if usage else None,
            total_tokens=usage.total_tokens if usage else None,
        ),
        upstream_request_id=getattr(result, "_request_id", None),
    )


async def openai_raw(provider: OpenAIProvider, call: ProviderCall) -> ProviderReply:
    with translate_sdk_errors("openai", openai):
        raw = await provider._client.chat.completions.with_raw_response.create(
            **provider.request_kwargs(call)
        )
    result = read_reply("openai", openai_adapter._ChatCompletion, raw.http_response.content)
    choice, usage = result.choices[0], result.usage or openai_adapter._Usage()
    return ProviderReply(
        text=choice.message.content or "",
        finish_reason=normalize_finish_reason(choice.finish_reason),
        usage=Usage(
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
            total_tokens=usage.total_tokens,
        ),
        upstream_request_id=raw.http_response.headers.get("x-request-id"),
    )


async def anthropic_create(provider: AnthropicProvider, call: ProviderCall) -> ProviderReply:
    with translate_sdk_errors("anthropic", anthropic):
        message = await provider._client.messages.create(**provider.request_kwargs(call))
    text = "".join(block.text for block in message.content if block.type == "text")
    usage = message.usage
    return ProviderReply(
        text=text,
        finish_reason=normalize_finish_reason(message.stop_reason),
        usage=Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.input_tokens + usage.output_tokens,
        ),
        upstream_request_id=getattr(message, "_request_id", None),
    )


async def anthropic_raw(provider: AnthropicProvider, call: ProviderCall) -> ProviderReply:
    with translate_sdk_errors("anthropic", anthropic):
        raw = await provider._client.messages.with_raw_response.create(
            **provider.request_kwargs(call)
        )
    message = read_reply("anthropic", anthropic_adapter._Message, raw.http_response.content)
    usage = message.usage
    return ProviderReply(
        text="".join(block.text for block in message.content if block.type == "text"),
        finish_reason=normalize_finish_reason(message.stop_reason),
        usage=Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.input_tokens + usage.output_tokens,
        ),
        upstream_request_id=raw.http_response.headers.get("request-id"),
    )


@contextmanager
def _loopback_server() -> Iterator[str]:
    """The fake provider server in a process of its own, so it does not share our GIL."""
    code = (
        "import sys, time\n"
        "from tests.fakes.provider_server import running_fake_provider\n"
        "with running_fake_provider() as fake:\n"
        "    print(fake.base_url, flush=True)\n"
        "    sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=15)


async def _per_call_us(call: Callable[[], Awaitable[ProviderReply]], n: int) -> list[float]:
    for _ in range(min(n, 200)):
        await call()
    rounds = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            await call()
        rounds.append((time.perf_counter() - started) / n * 1e6)
    return rounds


async def run(transport: str, n: int) -> None:
    if transport == "mock":
        oa_base, an_base = "http://upstream.test/v1", "http://upstream.test"
        oa_http = openai.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(_answer))
        an_http = anthropic.DefaultAsyncHttpxClient(transport=httpx2.MockTransport(_answer))
        server = None
    else:
        server = _loopback_server()
        base = server.__enter__()
        oa_base, an_base = f"{base}/v1", base
        oa_http, an_http = openai.DefaultAsyncHttpxClient(), anthropic.DefaultAsyncHttpxClient()
    try:
        op = OpenAIProvider(
            openai.AsyncOpenAI(api_key="k", base_url=oa_base, max_retries=0, http_client=oa_http)
        )
        ap = AnthropicProvider(
            anthropic.AsyncAnthropic(
                api_key="k", base_url=an_base, max_retries=0, timeout=60, http_client=an_http
            ),
            default_max_tokens=1024,
        )
        variants: list[tuple[str, Callable[[], Awaitable[ProviderReply]]]] = [
            ("openai    create()", lambda: openai_create(op, CALL)),
            ("openai    with_raw_response", lambda: openai_raw(op, CALL)),
            ("openai    post (adapter)", lambda: op.complete(CALL)),
            ("anthropic create()", lambda: anthropic_create(ap, ANTHROPIC_CALL)),
            ("anthropic with_raw_response", lambda: anthropic_raw(ap, ANTHROPIC_CALL)),
            ("anthropic post (adapter)", lambda: ap.complete(ANTHROPIC_CALL)),
        ]
        replies = {name: await call() for name, call in variants}
        for provider in ("openai", "anthropic"):
            same = {
                (r.text, r.finish_reason, r.usage)
                for name, r in replies.items()
                if name.startswith(provider)
            }
            assert len(same) == 1, f"{provider}: the variants disagree: {same}"
        print(f"transport={transport} n={n} (5 rounds; µs per call)")
        print(f"{'variant':32} {'best':>8} {'median':>8}")
        for name, call in variants:
            rounds = await _per_call_us(call, n)
            print(f"{name:32} {min(rounds):8.1f} {statistics.median(rounds):8.1f}")
        await op.aclose()
        await ap.aclose()
    finally:
        if server is not None:
            server.__exit__(None, None, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["mock", "loopback"], default="mock")
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(run(args.transport, args.n))


if __name__ == "__main__":
    main()
