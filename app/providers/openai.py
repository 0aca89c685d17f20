"""OpenAI, and any OpenAI-compatible server (vLLM, llama.cpp, LM Studio), through AsyncOpenAI.

The call goes through the client's generic `post` (its documented way to send a body as is): the
SDK still owns the connection pool, auth, timeouts and its typed errors, but neither re-walks our
request against its TypedDicts nor builds its full response models; we read the few fields we
use, once, in Rust (`bench/provider_calls.py` has the figures). Streams go through the same
`post` with the SDK's `AsyncStream[object]`: it decodes the SSE and hands over each chunk as a
plain dict, which we check against the small chunk model below.

Usage: `prompt_tokens` already includes the cached ones (`prompt_tokens_details.cached_tokens`)
and those written to the cache (`prompt_tokens_details.cache_write_tokens`, where reported), and
`completion_tokens` the reasoning ones (`completion_tokens_details.reasoning_tokens`), which is
exactly the gateway's `Usage` convention, so they are copied as they are. Streamed, the same
usage arrives in a last chunk without choices, asked for with `stream_options.include_usage`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr, ValidationError

from app.config import Settings
from app.dialects import openai as dialect
from app.errors import ProviderError, UpstreamError
from app.providers.base import (
    ALL_PARAMS,
    DEFAULT_MAX_ANSWER_BYTES,
    PLACEHOLDER_KEY,
    UNREAD_BODY,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    StreamEvent,
    TextDelta,
    ToolCallAssembly,
    ToolCallDelta,
    new_call_id,
    normalize_finish_reason,
    read_capped,
    read_event,
    read_reply,
    stream_cut,
    stream_failure,
    translate_sdk_errors,
)
from app.schemas import ToolCall, Usage

if TYPE_CHECKING:  # the SDK is imported when the provider is configured, not with the app
    import openai
    from openai import RequestOptions

_PATH = "/chat/completions"
# What `chat.completions.create` asks for: the API key as a bearer token, nothing else.
_OPTIONS: RequestOptions = {"security": {"bearer_auth": True}}
# The same, with the body handed over unread (so it is read under the answer cap).
_UNREAD: RequestOptions = {**_OPTIONS, "headers": UNREAD_BODY}


class _PromptDetails(BaseModel):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class _CompletionDetails(BaseModel):
    reasoning_tokens: int | None = None


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None

    def normalized(self) -> Usage:
        prompt, completion = self.prompt_tokens_details, self.completion_tokens_details
        return Usage(
            input_tokens=self.prompt_tokens,
            output_tokens=self.completion_tokens,
            total_tokens=self.total_tokens,
            cached_input_tokens=prompt.cached_tokens if prompt else None,
            cache_write_tokens=prompt.cache_write_tokens if prompt else None,
            reasoning_tokens=completion.reasoning_tokens if completion else None,
        )


class _Function(BaseModel):
    name: str
    arguments: str = ""


class _ToolCall(BaseModel):
    id: str | None = None  # some compatible servers send none, or an empty one
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None

    def calls(self, provider: str) -> tuple[ToolCall, ...]:
        try:
            return tuple(
                ToolCall(
                    id=c.id or new_call_id(),
                    name=c.function.name,
                    arguments=c.function.arguments or "{}",
                )
                for c in self.tool_calls or ()
            )
        except ValidationError:
            raise ProviderError(
                f"{provider} answered unexpectedly: a tool call has no valid id or name",
                provider=provider,
            ) from None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _ChatCompletion(BaseModel):
    """The fields of a chat completion the gateway reads; the rest is ignored, not modelled."""

    choices: list[_Choice]
    usage: _Usage | None = None


class _FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(BaseModel):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None

    def as_delta(self, *, first: bool) -> ToolCallDelta:
        """A call's first piece always goes out with an id (made when the server sent none)."""
        function = self.function
        return ToolCallDelta(
            index=self.index,
            id=(self.id or new_call_id()) if first else self.id,
            name=function.name if function else None,
            arguments=(function.arguments if function else None) or "",
        )


class _Delta(BaseModel):
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _ChunkChoice(BaseModel):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Chunk(BaseModel):
    """One `chat.completion.chunk`; with `include_usage`, a last one has no choices, only usage."""

    choices: list[_ChunkChoice] = []
    usage: _Usage | None = None


class OpenAIProvider:
    name = "openai"

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        *,
        name: str = "openai",
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        import httpx2
        import openai

        self.name = name  # `openai`, or a configured OpenAI-compatible endpoint's own name
        self._sdk = openai  # its exception classes, for translate_sdk_errors
        self._raw = httpx2.Response
        # `object` as the chunk type makes the SDK hand over each decoded chunk untouched.
        self._chunks = openai.AsyncStream[object]
        self._client = client
        self._max_answer_bytes = max_answer_bytes

    @staticmethod
    def request_kwargs(call: ProviderCall) -> dict[str, Any]:
        """The exact chat.completions body: the system prompt is the first message."""
        messages = dialect.messages_to_wire(call.system, call.messages)
        params = call.params.model_dump(exclude_none=True)
        if "max_tokens" in params:  # the current name; `max_tokens` is refused by newer models
            params["max_completion_tokens"] = params.pop("max_tokens")
        body: dict[str, Any] = {"model": call.model, "messages": messages, **params}
        if call.tools is not None:
            body |= dialect.toolset_to_wire(call.tools)
        if call.output is not None:
            body["response_format"] = dialect.response_format_to_wire(call.output.format)
        return body

    async def complete(self, call: ProviderCall) -> ProviderReply:
        with translate_sdk_errors(self.name, self._sdk):
            response = await self._client.post(
                _PATH, cast_to=self._raw, body=self.request_kwargs(call), options=_UNREAD
            )
            request_id = response.headers.get("x-request-id")
            body = await read_capped(
                self.name, response, self._max_answer_bytes, request_id=request_id
            )
        result = read_reply(self.name, _ChatCompletion, body)
        if not result.choices:
            raise UpstreamError(f"{self.name} returned no choices", provider=self.name)
        choice = result.choices[0]
        message = choice.message
        return ProviderReply(
            # A refusal is what the model said instead of an answer: the caller reads it.
            text=message.content or message.refusal or "",
            finish_reason=normalize_finish_reason(choice.finish_reason),
            usage=result.usage.normalized() if result.usage else Usage(),
            upstream_request_id=request_id,
            tool_calls=message.calls(self.name),
        )

    async def _open_stream(self, call: ProviderCall) -> openai.AsyncStream[object]:
        # `include_usage` adds a last chunk with the usage; servers that ignore it send none.
        body = {
            **self.request_kwargs(call),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        with translate_sdk_errors(self.name, self._sdk):
            return await self._client.post(
                _PATH,
                cast_to=object,
                body=body,
                options=_OPTIONS,
                stream=True,
                stream_cls=self._chunks,
            )

    async def stream(self, call: ProviderCall) -> AsyncGenerator[StreamEvent, None]:
        chunks = await self._open_stream(call)
        request_id = chunks.response.headers.get("x-request-id")
        parts: list[str] = []
        calls = ToolCallAssembly()
        named: set[int] = set()  # calls whose first piece went out (with an id, made if none)
        finish: str | None = None
        usage: _Usage | None = None
        started = False
        async with chunks:  # however this generator ends, the upstream response is closed
            while True:
                try:
                    data = await anext(chunks)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = stream_failure(
                        self.name, self._sdk, exc, started=started, request_id=request_id
                    )
                    if failure is None:
                        raise
                    raise failure from None
                started = True
                chunk = read_event(self.name, _Chunk, data)
                if chunk.usage is not None:
                    usage = chunk.usage
                for choice in chunk.choices:
                    if choice.index != 0:  # one answer is asked for; ignore any other
                        continue
                    if choice.finish_reason is not None:
                        finish = choice.finish_reason
                    if choice.delta is None:
                        continue
                    text = choice.delta.content or choice.delta.refusal
                    if text:
                        parts.append(text)
                        yield TextDelta(text)
                    for piece in choice.delta.tool_calls or ():
                        delta = piece.as_delta(first=piece.index not in named)
                        named.add(piece.index)
                        calls.add(delta)
                        yield delta
        # The SDK ends a cut stream silently: only the finish reason tells a whole answer.
        if finish is None:
            raise stream_cut(self.name, request_id)
        yield ProviderReply(
            text="".join(parts),
            finish_reason=normalize_finish_reason(finish),
            usage=usage.normalized() if usage else Usage(),
            upstream_request_id=request_id,
            tool_calls=calls.calls(self.name),
        )

    async def aclose(self) -> None:
        await self._client.close()


def _build(settings: Settings) -> Provider | None:
    """SDK retries are off: `app.providers.retry` is the only retry layer."""
    oa = settings.openai
    if not (oa.api_key or oa.base_url):
        return None
    return compatible_provider("openai", oa.api_key, oa.base_url, settings)


def compatible_provider(
    name: str, api_key: SecretStr | None, base_url: str | None, settings: Settings
) -> OpenAIProvider:
    """An OpenAI-compatible server under its own provider name (`openai` itself is one)."""
    import openai  # only once a provider is configured: it costs a second to import

    client = openai.AsyncOpenAI(
        api_key=api_key.get_secret_value() if api_key else PLACEHOLDER_KEY,
        base_url=base_url,
        # Per read (a stream's silence included), and a shorter bound on connecting.
        timeout=openai.Timeout(
            settings.upstream.timeout_seconds, connect=settings.upstream.connect_timeout_seconds
        ),
        max_retries=0,
    )
    return OpenAIProvider(client, name=name, max_answer_bytes=settings.upstream.max_answer_bytes)


DESCRIPTOR = ProviderDescriptor(
    name="openai",
    # Anthropic's thinking mode has no Chat Completions field: reasoning_effort is OpenAI's.
    supported_params=ALL_PARAMS - {"thinking", "thinking_budget"},
    ignored_params=frozenset({"thinking", "thinking_budget"}),
    how_to_configure="set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server)",
    build=_build,
)
