"""Anthropic through AsyncAnthropic: top-level `system`, and `max_tokens` always set.

As for OpenAI, the body goes through the client's generic `post` and the answer is read into a
small model of the fields we use (see `app/providers/openai.py` for why); streams too, as the
SDK's `AsyncStream[object]` of decoded events.

Usage: Anthropic's `input_tokens` counts only the prompt tokens after the last cache breakpoint;
`cache_read_input_tokens` (served from the cache) and `cache_creation_input_tokens` (written to
it) are reported beside it, and `cache_creation` splits the writes by lifetime (5 minutes, 1
hour), which Anthropic bills at different rates. The gateway's `input_tokens` is the whole prompt,
as for every other provider: the sum of the three, with `cached_input_tokens` the cache reads and
`cache_write_tokens` the writes among them (`cache_write_1h_tokens` the 1-hour ones among those).
`total_tokens` is that input plus the output. Streamed, `message_start` carries the input side
(the split included) and each `message_delta` the cumulative counts so far.

A pattern's system prompt is the same for every request of a pattern version, so it is marked as
a cache breakpoint (`ProviderCall.cache_system`) unless the request already uses all four.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from app.config import Settings
from app.dialects import anthropic as dialect
from app.errors import ProviderError
from app.providers.base import (
    DEFAULT_MAX_ANSWER_BYTES,
    PLACEHOLDER_KEY,
    UNREAD_BODY,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallAssembly,
    ToolCallDelta,
    error_for_status,
    normalize_finish_reason,
    read_capped,
    read_event,
    read_reply,
    safe_detail,
    stream_cut,
    stream_failure,
    translate_sdk_errors,
)
from app.schemas import FinishReason, ModelParams, ReasoningBlock, ToolCall, Usage
from app.schemas.conversation import arguments_text

if TYPE_CHECKING:  # the SDK is imported when the provider is configured, not with the app
    import anthropic

OUTPUT_TOOL = "emit_output"
_WRAPPED = "value"
_PATH = "/v1/messages"
# The adapter's own bound when a caller built a call without max_tokens; the preparer always
# sets one (the model's output limit from the capabilities file).
_FALLBACK_MAX_TOKENS = 4096
_THINKING_BUDGET = 1024  # Anthropic's smallest budget, when thinking is enabled without one
# OpenAI's reasoning_effort → Anthropic's output_config.effort (its lowest is `low`); `none`
# turns thinking off instead.
_EFFORT = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}


class _Block(BaseModel):
    type: str
    text: str = ""
    id: str | None = None
    name: str | None = None
    input: Any = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


class _CacheCreation(BaseModel):
    """The cache writes by lifetime; together they make `cache_creation_input_tokens`."""

    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class _Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_creation: _CacheCreation | None = None

    def normalized(self) -> Usage:
        """The whole prompt as input (see the module docstring), cache reads and writes among it."""
        prompt = (
            self.input_tokens
            + (self.cache_read_input_tokens or 0)
            + (self.cache_creation_input_tokens or 0)
        )
        split = self.cache_creation
        return Usage(
            input_tokens=prompt,
            output_tokens=self.output_tokens,
            total_tokens=prompt + self.output_tokens,
            cached_input_tokens=self.cache_read_input_tokens,
            cache_write_tokens=self.cache_creation_input_tokens,
            cache_write_1h_tokens=split.ephemeral_1h_input_tokens if split else None,
        )


class _Message(BaseModel):
    """The fields of a Messages API answer the gateway reads; the rest is ignored."""

    content: list[_Block]
    stop_reason: str | None = None
    usage: _Usage


class _TokenCount(BaseModel):
    input_tokens: int


class _DeltaUsage(BaseModel):
    """`message_delta`'s usage: cumulative counts, the output always, the rest when known (it
    has no lifetime split: that stays as `message_start` gave it)."""

    output_tokens: int | None = None
    input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _StartMessage(BaseModel):
    usage: _Usage


class _EventDelta(BaseModel):
    type: str | None = None  # text_delta, input_json_delta, thinking_delta, signature_delta
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    signature: str | None = None
    stop_reason: str | None = None


class _Event(BaseModel):
    """One streamed event; which fields are set depends on `type`."""

    type: str
    index: int | None = None
    message: _StartMessage | None = None  # message_start
    content_block: _Block | None = None  # content_block_start
    delta: _EventDelta | None = None  # content_block_delta, message_delta
    usage: _DeltaUsage | None = None  # message_delta


# `error.type` of an error event sent inside a 200 stream → the status the same error has as an
# HTTP answer (docs.anthropic.com/en/api/errors), so it maps like any other upstream failure.
_ERROR_EVENT_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


def _error_event(provider: str, body: object, request_id: str | None) -> ProviderError:
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    kind = str(error.get("type") or "error")
    return error_for_status(
        provider,
        _ERROR_EVENT_STATUS.get(kind, 500),
        request_id=request_id,
        detail=safe_detail(f"{kind} event mid-stream: {error.get('message') or 'no message'}"),
    )


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Tool inputs must be objects: a schema for anything else is wrapped in one."""
    if schema.get("type") == "object":
        return dict(schema)
    return {"type": "object", "properties": {_WRAPPED: dict(schema)}, "required": [_WRAPPED]}


def _unwrap(schema: Mapping[str, Any], payload: Any) -> Any:
    if schema.get("type") == "object" or not isinstance(payload, dict):
        return payload
    return payload.get(_WRAPPED)


def _forced_tool(call: ProviderCall) -> Mapping[str, Any] | None:
    """The schema of the output tool the model is forced to call, when that is how the format
    is enforced (older models, per the capabilities file); None otherwise."""
    if call.output is None or call.output.via != "tool":
        return None
    return call.output.format.schema_to_check


def _finish(stop_reason: str | None, answered_by_output_tool: bool) -> FinishReason:
    """The model's stop reason; a call of the gateway's own output tool is the answer, not a
    tool call the caller must run, so it is a normal stop."""
    if answered_by_output_tool and stop_reason == "tool_use":
        return "stop"
    return normalize_finish_reason(stop_reason)


def _thinking(params: ModelParams) -> dict[str, Any] | None:
    """Anthropic's `thinking` config: off for reasoning_effort `none`, else as asked."""
    if params.reasoning_effort == "none" or params.thinking == "disabled":
        return {"type": "disabled"}
    if params.thinking == "enabled":
        return {"type": "enabled", "budget_tokens": params.thinking_budget or _THINKING_BUDGET}
    if params.thinking == "adaptive":
        return {"type": "adaptive"}
    return None


def _reasoning(block: _Block) -> ReasoningBlock:
    if block.type == "redacted_thinking":
        return ReasoningBlock(type="redacted_thinking", data=block.data)
    return ReasoningBlock(type="thinking", thinking=block.thinking, signature=block.signature)


class _StreamedBlocks:
    """The content blocks of a stream as their events arrive: text and tool deltas go on to
    the caller; the forced output tool's input and the reasoning are kept whole for the end."""

    def __init__(self, output_tool: bool) -> None:
        self.output_tool = output_tool
        self.parts: list[str] = []
        self.calls = ToolCallAssembly()
        self.kinds: dict[int, str] = {}  # block index → "text" | "call" | "output" | "thinking"
        self.call_number: dict[int, int] = {}  # block index → the call's position among calls
        self.output_json: list[str] = []
        self.reasoning: dict[int, dict[str, str]] = {}  # block index → what arrived of it

    def start(self, index: int, block: _Block) -> StreamEvent | None:
        if block.type == "tool_use" and self.output_tool and block.name == OUTPUT_TOOL:
            self.kinds[index] = "output"
        elif block.type == "tool_use":
            self.kinds[index] = "call"
            self.call_number[index] = number = len(self.call_number)
            delta = ToolCallDelta(index=number, id=block.id, name=block.name)
            self.calls.add(delta)
            return delta
        elif block.type in ("thinking", "redacted_thinking"):
            self.kinds[index] = "thinking"
            self.reasoning[index] = {"type": block.type, "data": block.data or ""}
            if block.type == "redacted_thinking":
                return ReasoningDelta(self._number(index), redacted=block.data or "")
        return None

    def _number(self, index: int) -> int:
        """A reasoning block's position among the reasoning blocks."""
        return sorted(self.reasoning).index(index)

    def delta(self, index: int | None, delta: _EventDelta) -> StreamEvent | None:
        kind = self.kinds.get(index) if index is not None else None
        if delta.text:
            self.parts.append(delta.text)
            return TextDelta(delta.text)
        if delta.partial_json is not None and kind == "output":
            self.output_json.append(delta.partial_json)
        elif delta.partial_json and kind == "call" and index is not None:
            piece = ToolCallDelta(index=self.call_number[index], arguments=delta.partial_json)
            self.calls.add(piece)
            return piece
        elif kind == "thinking" and index is not None:
            held = self.reasoning[index]
            if delta.thinking:
                held["thinking"] = held.get("thinking", "") + delta.thinking
                return ReasoningDelta(self._number(index), text=delta.thinking)
            if delta.signature:
                held["signature"] = held.get("signature", "") + delta.signature
                return ReasoningDelta(self._number(index), signature=delta.signature)
        return None

    def reasoning_blocks(self) -> tuple[ReasoningBlock, ...]:
        found = []
        for index in sorted(self.reasoning):
            held = self.reasoning[index]
            if held["type"] == "redacted_thinking":
                found.append(ReasoningBlock(type="redacted_thinking", data=held["data"]))
            else:
                found.append(
                    ReasoningBlock(
                        type="thinking",
                        thinking=held.get("thinking", ""),
                        signature=held.get("signature"),
                    )
                )
        return tuple(found)


class AnthropicProvider:
    name = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        default_max_tokens: int | None = None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        import anthropic
        import httpx2

        self._sdk = anthropic  # its exception classes, for translate_sdk_errors
        self._raw = httpx2.Response
        # `object` as the event type makes the SDK hand over each decoded event untouched.
        self._events = anthropic.AsyncStream[object]
        self._client = client
        self._default_max_tokens = default_max_tokens or _FALLBACK_MAX_TOKENS
        self._max_answer_bytes = max_answer_bytes

    def request_kwargs(self, call: ProviderCall) -> dict[str, Any]:
        """The Messages API body: the system prompt is top-level, `max_tokens` is mandatory."""
        system, messages = dialect.messages_to_wire(call.system, call.messages)
        if not messages and system is not None:
            # The Messages API needs a turn: a system-only conversation is sent as the user's.
            messages, system = [{"role": "user", "content": system}], None
        body: dict[str, Any] = {
            "model": call.model,
            "max_tokens": call.params.max_tokens or self._default_max_tokens,
            "messages": messages,
        }
        if system is not None:
            body["system"] = system
        if call.params.stop:
            body["stop_sequences"] = call.params.stop
        output_config: dict[str, Any] = {}
        effort, thinking = call.params.reasoning_effort, _thinking(call.params)
        if effort is not None and effort != "none":
            output_config["effort"] = _EFFORT[effort]
        if thinking is not None:
            body["thinking"] = thinking
        if call.tools is not None:
            body |= dialect.toolset_to_wire(call.tools)
        forced = _forced_tool(call)
        if forced is not None:
            # Structured output through a forced tool whose input schema is the output schema.
            body["tools"] = [
                {
                    "name": OUTPUT_TOOL,
                    "description": "Return the result.",
                    "input_schema": _object_schema(forced),
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": OUTPUT_TOOL}
        elif call.output is not None:
            output_config["format"] = dialect.output_format_to_wire(call.output.format)
        if output_config:
            body["output_config"] = output_config
        if (
            call.cache_system
            and call.system
            and "system" in body
            and dialect.breakpoints(body) < dialect.MAX_BREAKPOINTS
        ):
            body["system"] = dialect.system_marked(body["system"])
        return body

    async def complete(self, call: ProviderCall) -> ProviderReply:
        with translate_sdk_errors(self.name, self._sdk):
            response = await self._client.post(
                _PATH,
                cast_to=self._raw,
                body=self.request_kwargs(call),
                options={"headers": UNREAD_BODY},
            )
            request_id = response.headers.get("request-id")
            body = await read_capped(
                self.name, response, self._max_answer_bytes, request_id=request_id
            )
        message = read_reply(self.name, _Message, body)
        forced = _forced_tool(call)
        text = "".join(block.text for block in message.content if block.type == "text")
        payload = None
        calls = []
        for block in message.content:
            if block.type != "tool_use":
                continue
            if forced is not None and block.name == OUTPUT_TOOL:
                payload = _unwrap(forced, block.input)
                text = json.dumps(payload, ensure_ascii=False)
            else:
                calls.append(self._call(block, request_id))
        return ProviderReply(
            text=text,
            finish_reason=_finish(message.stop_reason, payload is not None),
            usage=message.usage.normalized(),
            upstream_request_id=request_id,
            payload=payload,
            tool_calls=tuple(calls),
            reasoning=tuple(
                _reasoning(block)
                for block in message.content
                if block.type in ("thinking", "redacted_thinking")
            ),
        )

    async def count_tokens(self, call: ProviderCall) -> int:
        """POST /v1/messages/count_tokens: the body of the call, without what only an answer
        needs (max_tokens, stop sequences)."""
        body = self.request_kwargs(call)
        for name in ("max_tokens", "stop_sequences"):
            body.pop(name, None)
        with translate_sdk_errors(self.name, self._sdk):
            response = await self._client.post(
                _PATH + "/count_tokens", cast_to=self._raw, body=body
            )
        return read_reply(self.name, _TokenCount, response.content).input_tokens

    def _call(self, block: _Block, request_id: str | None) -> ToolCall:
        try:
            arguments = arguments_text(block.input if block.input is not None else {})
            return ToolCall(id=block.id or "", name=block.name or "", arguments=arguments)
        except ValidationError:
            raise ProviderError(
                "anthropic answered unexpectedly: a tool_use block has no valid id or name",
                provider=self.name,
                upstream_request_id=request_id,
            ) from None

    async def _open_stream(self, call: ProviderCall) -> anthropic.AsyncStream[object]:
        with translate_sdk_errors(self.name, self._sdk):
            return await self._client.post(
                _PATH,
                cast_to=object,
                body={**self.request_kwargs(call), "stream": True},
                stream=True,
                stream_cls=self._events,
            )

    async def stream(self, call: ProviderCall) -> AsyncGenerator[StreamEvent, None]:
        """message_start (input usage), content_block_start / _delta (text, tool input JSON,
        thinking), message_delta (stop reason, output usage), message_stop. A forced output
        tool's input is parsed whole at the end and sent as one delta, as `complete` gives it."""
        events = await self._open_stream(call)
        request_id = events.response.headers.get("request-id")
        forced = _forced_tool(call)
        blocks = _StreamedBlocks(output_tool=forced is not None)
        usage: _Usage | None = None
        stop_reason: str | None = None
        stopped = False
        async with events:  # however this generator ends, the upstream response is closed
            while True:
                try:
                    data = await anext(events)
                except StopAsyncIteration:
                    break
                except self._sdk.APIStatusError as exc:  # an `error` event inside the stream
                    raise _error_event(self.name, exc.body, request_id) from None
                except Exception as exc:
                    failure = stream_failure(
                        self.name, self._sdk, exc, started=usage is not None, request_id=request_id
                    )
                    if failure is None:
                        raise
                    raise failure from None
                event = read_event(self.name, _Event, data)
                kind, delta = event.type, event.delta
                found: StreamEvent | None = None
                if kind == "content_block_delta" and delta is not None:
                    found = blocks.delta(event.index, delta)
                elif kind == "content_block_start" and event.content_block is not None:
                    found = blocks.start(event.index or 0, event.content_block)
                elif kind == "message_start" and event.message is not None:
                    usage = event.message.usage
                elif kind == "message_delta":
                    if delta is not None and delta.stop_reason is not None:
                        stop_reason = delta.stop_reason
                    if usage is not None and event.usage is not None:
                        usage = usage.model_copy(update=event.usage.model_dump(exclude_none=True))
                elif kind == "message_stop":
                    stopped = True
                if found is not None:
                    yield found
        if not stopped or stop_reason is None or usage is None:
            raise stream_cut(self.name, request_id)
        text, payload = "".join(blocks.parts), None
        if forced is not None and "output" in blocks.kinds.values():
            payload = _unwrap(forced, self._tool_input(blocks.output_json, request_id))
            text = json.dumps(payload, ensure_ascii=False)
            yield TextDelta(text)
        yield ProviderReply(
            text=text,
            finish_reason=_finish(stop_reason, payload is not None),
            usage=usage.normalized(),
            upstream_request_id=request_id,
            payload=payload,
            tool_calls=blocks.calls.calls(self.name),
            reasoning=blocks.reasoning_blocks(),
        )

    def _tool_input(self, fragments: list[str], request_id: str | None) -> Any:
        try:
            return json.loads("".join(fragments) or "{}")
        except (ValueError, RecursionError):
            raise ProviderError(
                "anthropic answered unexpectedly: the streamed tool input is not JSON",
                provider=self.name,
                upstream_request_id=request_id,
            ) from None

    async def aclose(self) -> None:
        await self._client.close()


def _build(settings: Settings) -> Provider | None:
    """SDK retries are off: `app.providers.retry` is the only retry layer."""
    an = settings.anthropic
    if not (an.api_key or an.base_url):
        return None
    import anthropic  # only once the provider is configured: it costs a second to import

    key = an.api_key.get_secret_value() if an.api_key else PLACEHOLDER_KEY
    client = anthropic.AsyncAnthropic(
        api_key=key,
        base_url=an.base_url,
        # Per read (a stream's silence included), and a shorter bound on connecting.
        timeout=anthropic.Timeout(
            settings.upstream.timeout_seconds, connect=settings.upstream.connect_timeout_seconds
        ),
        max_retries=0,
    )
    return AnthropicProvider(
        client,
        default_max_tokens=settings.default_max_tokens,
        max_answer_bytes=settings.upstream.max_answer_bytes,
    )


DESCRIPTOR = ProviderDescriptor(
    name="anthropic",
    supported_params=frozenset(
        {"max_tokens", "stop", "reasoning_effort", "thinking", "thinking_budget"}
    ),
    how_to_configure="set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL)",
    build=_build,
    # The Messages API has no sampling controls (temperature, top_p, penalties), no seed and no
    # verbosity: set, they are dropped, and the envelope's `params` shows they were not sent.
    ignored_params=frozenset(
        {"temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "verbosity"}
    ),
    requires_max_tokens=True,
)
