"""The yardstick: a bare FastAPI app whose routes pass a chat request to AsyncOpenAI.

`POST /v1/chat` takes the already-rendered prompt; `POST /v1/chat/tools` takes an OpenAI-shaped
conversation with tools (loosely typed: the SDK is handed the messages and tools as they came)
and answers with the text or the tool calls; `POST /v1/chat/stream` takes a plain OpenAI chat
request and relays the SDK's stream as server-sent events, one `data:` line per chunk. One client
is built at start-up (lifespan) and closed at shutdown; no retries. Served by the harness as
`uvicorn bench.baseline:app` (one worker, uvloop and httptools, no access log), the same server
set-up `genai serve` uses. The upstream is read from BENCH_UPSTREAM_URL.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from openai import AsyncOpenAI
from openai.types.chat import (
    ChatCompletionMessageParam,
    ChatCompletionToolChoiceOptionParam,
    ChatCompletionToolUnionParam,
)
from pydantic import BaseModel


class ChatIn(BaseModel):
    """The already-rendered prompt: what the service sends upstream after its own rendering."""

    model: str
    system: str
    user_prompt: str
    temperature: float | None = None
    max_tokens: int | None = None


class ChatOut(BaseModel):
    text: str | None
    model: str
    finish_reason: str
    input_tokens: int
    output_tokens: int


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    client = AsyncOpenAI(
        base_url=os.environ["BENCH_UPSTREAM_URL"].rstrip("/") + "/v1",
        api_key="sk-bench",
        max_retries=0,
    )
    app.state.client = client
    yield
    await client.close()


app = FastAPI(lifespan=lifespan)


@app.post("/v1/chat")
async def chat(body: ChatIn, request: Request) -> ChatOut:
    client: AsyncOpenAI = request.app.state.client
    completion = await client.chat.completions.create(
        model=body.model,
        messages=[
            {"role": "system", "content": body.system},
            {"role": "user", "content": body.user_prompt},
        ],
        temperature=body.temperature,
        max_tokens=body.max_tokens,
    )
    choice = completion.choices[0]
    usage = completion.usage
    return ChatOut(
        text=choice.message.content,
        model=completion.model,
        finish_reason=choice.finish_reason,
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
    )


class ToolChatIn(BaseModel):
    """An OpenAI chat request with tools, as a client would send it."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = None
    max_tokens: int | None = None


class ToolCallOut(BaseModel):
    id: str
    name: str
    arguments: str


class ToolChatOut(ChatOut):
    tool_calls: list[ToolCallOut]


@app.post("/v1/chat/tools")
async def chat_tools(body: ToolChatIn, request: Request) -> ToolChatOut:
    client: AsyncOpenAI = request.app.state.client
    completion = await client.chat.completions.create(
        model=body.model,
        messages=cast(list[ChatCompletionMessageParam], body.messages),
        tools=cast(list[ChatCompletionToolUnionParam], body.tools),
        tool_choice=cast(ChatCompletionToolChoiceOptionParam, body.tool_choice or "auto"),
        temperature=body.temperature,
        max_tokens=body.max_tokens,
    )
    choice = completion.choices[0]
    usage = completion.usage
    return ToolChatOut(
        text=choice.message.content,
        model=completion.model,
        finish_reason=choice.finish_reason,
        input_tokens=usage.prompt_tokens if usage else 0,
        output_tokens=usage.completion_tokens if usage else 0,
        tool_calls=[
            ToolCallOut(id=c.id, name=c.function.name, arguments=c.function.arguments)
            for c in choice.message.tool_calls or ()
            if c.type == "function"
        ],
    )


class StreamChatIn(BaseModel):
    """A plain OpenAI chat request that asks for a stream."""

    model: str
    messages: list[dict[str, Any]]
    temperature: float | None = None
    max_tokens: int | None = None


@app.post("/v1/chat/stream")
async def chat_stream(body: StreamChatIn, request: Request) -> StreamingResponse:
    client: AsyncOpenAI = request.app.state.client
    stream = await client.chat.completions.create(
        model=body.model,
        messages=cast(list[ChatCompletionMessageParam], body.messages),
        temperature=body.temperature,
        max_tokens=body.max_tokens,
        stream=True,
        stream_options={"include_usage": True},
    )

    async def events() -> AsyncIterator[bytes]:
        async with stream:
            async for chunk in stream:
                yield b"data: " + chunk.model_dump_json(exclude_unset=True).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")
