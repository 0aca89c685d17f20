"""Ollama through `ollama.AsyncClient`; params travel in `options` under Ollama's names.

The body is the JSON the gateway built, not `chat`'s request models: those keep only a few
JSON-schema keywords of a tool's parameters, and they read an image string that names an existing
path as a file to upload. A stream goes through the client's `_request` (what `chat` calls); a
whole answer through its httpx client, read as it arrives under the answer cap (`_request` would
read it whole first). The SDK still owns the connection, the NDJSON stream and its models.

The SDK's `ResponseError` keeps the status but drops the headers, and with them a 429's
`Retry-After`; so the client built here carries an httpx response hook that raises our error,
headers read, before the SDK sees the answer (a stream given a plain client still maps
`ResponseError` by status, without Retry-After).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, cast

import httpx
import ollama
from pydantic import ValidationError

from app.config import Settings
from app.dialects import ollama as dialect
from app.errors import ProviderError, UpstreamError, UpstreamTimeout
from app.providers.base import (
    DEFAULT_MAX_ANSWER_BYTES,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    connection_lost,
    error_for_status,
    new_call_id,
    normalize_finish_reason,
    read_capped,
    read_reply,
    safe_detail,
    stream_cut,
    stream_stalled,
    total_tokens,
)
from app.schemas import FinishReason, ToolCall, Usage
from app.schemas.conversation import arguments_text

NAME = "ollama"
_PATH = "/api/chat"
# Our parameter names → Ollama's `options` keys (reasoning_effort is the top-level `think`).
_OPTION_NAMES = {
    "temperature": "temperature",
    "max_tokens": "num_predict",
    "top_p": "top_p",
    "stop": "stop",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}
_THINK: dict[str, bool | str] = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
}


def _calls(message: ollama.Message) -> tuple[ToolCall, ...]:
    try:
        return tuple(
            ToolCall(
                id=new_call_id(),
                name=call.function.name,
                arguments=arguments_text(dict(call.function.arguments or {})),
            )
            for call in message.tool_calls or ()
        )
    except ValidationError:
        raise ProviderError(
            "ollama answered unexpectedly: a tool call has no valid name", provider=NAME
        ) from None


async def raise_for_status(response: httpx.Response) -> None:
    """An httpx response hook: an Ollama error status becomes ours with its headers read."""
    if response.status_code < 400:
        return
    await response.aread()
    try:
        found = response.json()
        message = found.get("error", response.text) if isinstance(found, dict) else response.text
    except ValueError:
        message = response.text
    raise error_for_status(
        NAME, response.status_code, headers=response.headers, detail=safe_detail(message)
    )


def _usage(result: ollama.ChatResponse) -> Usage:
    inputs, outputs = result.prompt_eval_count, result.eval_count
    return Usage(
        input_tokens=inputs, output_tokens=outputs, total_tokens=total_tokens(inputs, outputs)
    )


class OllamaProvider:
    name = NAME

    def __init__(
        self, client: ollama.AsyncClient, *, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    ) -> None:
        self._client = client
        self._max_answer_bytes = max_answer_bytes

    @classmethod
    def connect(
        cls,
        host: str | None,
        *,
        timeout: httpx.Timeout | float,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> OllamaProvider:
        """The adapter with a client whose error answers keep their headers (Retry-After)."""
        hooks = {"response": [raise_for_status]}
        client = ollama.AsyncClient(host=host, timeout=timeout, event_hooks=hooks)
        return cls(client, max_answer_bytes=max_answer_bytes)

    @staticmethod
    def request_kwargs(call: ProviderCall) -> dict[str, Any]:
        """The /api/chat body: params go in `options` under Ollama's own names."""
        messages = dialect.messages_to_wire(call.system, call.messages)
        params = call.params.model_dump(exclude_none=True)
        effort, thinking = params.pop("reasoning_effort", None), params.pop("thinking", None)
        params.pop("thinking_budget", None)  # Ollama's `think` has no budget
        options = {_OPTION_NAMES[key]: value for key, value in params.items()}
        body: dict[str, Any] = {"model": call.model, "messages": messages, "options": options}
        body["stream"] = False
        if effort is not None:
            body["think"] = _THINK[effort]
        elif thinking is not None:
            body["think"] = thinking != "disabled"
        if call.tools is not None:
            body |= dialect.toolset_to_wire(call.tools)
        if call.output is not None:  # Ollama constrains decoding to the schema
            body["format"] = dialect.format_to_wire(call.output.format)
        return body

    async def complete(self, call: ProviderCall) -> ProviderReply:
        """The body is read as it arrives, under the answer cap, through the SDK's own httpx
        client (its `_request` would read it whole first)."""
        http: httpx.AsyncClient = self._client._client
        try:
            async with http.stream("POST", _PATH, json=self.request_kwargs(call)) as response:
                await raise_for_status(response)  # a plain client's error (the hook raised first)
                body = await read_capped(self.name, response, self._max_answer_bytes)
        except httpx.TimeoutException:
            raise UpstreamTimeout("ollama did not answer in time", provider=self.name) from None
        except (ConnectionError, httpx.TransportError):
            raise _unreachable() from None
        result = read_reply(self.name, ollama.ChatResponse, body)
        calls = _calls(result.message)
        return ProviderReply(
            text=result.message.content or "",
            finish_reason=_finish(result.done_reason, calls),
            usage=_usage(result),
            tool_calls=calls,
        )

    async def stream(self, call: ProviderCall) -> AsyncGenerator[StreamEvent, None]:
        """NDJSON chunks; the last one has `done: true`, the stop reason and the counts."""
        body = {**self.request_kwargs(call), "stream": True}
        # The SDK sends the request on the first iteration, so every error surfaces there.
        chunks = cast(
            AsyncGenerator[ollama.ChatResponse, None],
            await self._client._request(ollama.ChatResponse, "POST", _PATH, json=body, stream=True),
        )
        parts: list[str] = []
        calls: list[ToolCall] = []
        last: ollama.ChatResponse | None = None
        # aclosing: the SDK's generator holds the response open until it is closed.
        async with contextlib.aclosing(chunks):
            while True:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = self._failure(exc, started=last is not None)
                    if failure is None:
                        raise
                    raise failure from None
                last = chunk
                if chunk.message.content:
                    parts.append(chunk.message.content)
                    yield TextDelta(chunk.message.content)
                for found in _calls(chunk.message):  # each arrives whole, in one chunk
                    yield ToolCallDelta(len(calls), found.arguments, found.id, found.name)
                    calls.append(found)
                # `done` is the last line: reading on to the body's end frees the connection.
        if last is None or not last.done:
            raise stream_cut(self.name, None)
        yield ProviderReply(
            text="".join(parts),
            finish_reason=_finish(last.done_reason, calls),
            usage=_usage(last),
            tool_calls=tuple(calls),
        )

    def _failure(self, exc: Exception, *, started: bool) -> ProviderError | None:
        """What an exception raised while reading a stream means, or None for a bug of ours.
        Connection errors are httpx's own here: the SDK wraps them only outside streams."""
        if isinstance(exc, ProviderError):  # raised by `raise_for_status`
            return exc
        if isinstance(exc, ollama.ResponseError):
            if exc.status_code >= 400:  # a plain client's error status
                return error_for_status(self.name, exc.status_code, detail=safe_detail(exc.error))
            return UpstreamError(  # an `{"error": …}` line inside the stream
                f"ollama reported an error mid-stream: {safe_detail(exc.error)}",
                provider=self.name,
            )
        if isinstance(exc, httpx.TimeoutException):
            if started:
                return stream_stalled(self.name, None)
            return UpstreamTimeout("ollama did not answer in time", provider=self.name)
        if isinstance(exc, httpx.ConnectError | ConnectionError):
            return _unreachable()
        if isinstance(exc, httpx.TransportError):
            return connection_lost(self.name, started=started, request_id=None)
        if isinstance(exc, json.JSONDecodeError) and started:  # the last line, cut short
            return stream_cut(self.name, None)
        if isinstance(exc, ValueError):  # not JSON, or not a chat chunk
            return ProviderError(
                "ollama answered unexpectedly: a stream line is not a chat chunk",
                provider=self.name,
            )
        return None

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]


def _finish(done_reason: str | None, calls: Sequence[ToolCall]) -> FinishReason:
    """Ollama ends a turn of tool calls with `stop`: OpenAI's clients expect `tool_calls`."""
    return "tool_calls" if calls else normalize_finish_reason(done_reason)


def _unreachable() -> UpstreamError:
    return UpstreamError("could not reach ollama; is it running at OLLAMA_HOST?", provider=NAME)


def _build(settings: Settings) -> Provider:
    """Ollama needs no key: it is always configured (default host: the local daemon)."""
    upstream = settings.upstream
    timeout = httpx.Timeout(upstream.timeout_seconds, connect=upstream.connect_timeout_seconds)
    return OllamaProvider.connect(
        settings.ollama.host, timeout=timeout, max_answer_bytes=upstream.max_answer_bytes
    )


DESCRIPTOR = ProviderDescriptor(
    name="ollama",
    supported_params=frozenset({*_OPTION_NAMES, "reasoning_effort", "thinking"}),
    how_to_configure="set OLLAMA_HOST",
    build=_build,
    # No such control; logit_bias is refused.
    ignored_params=frozenset({"verbosity", "thinking_budget"}),
)
