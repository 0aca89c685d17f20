"""Anthropic through AsyncAnthropic: top-level `system`, and `max_tokens` always set.

As for OpenAI, the body goes through the client's generic `post` and the answer is read into a
small model of the fields we use (see `app/providers/openai.py` for why); streams too, as the
SDK's `AsyncStream[object]` of decoded events.

Usage: Anthropic's `input_tokens` counts only the prompt tokens after the last cache breakpoint;
`cache_read_input_tokens` (served from the cache) and `cache_creation_input_tokens` (written to
it) are reported beside it. The gateway's `input_tokens` is the whole prompt, as for every other
provider: the sum of the three, with `cached_input_tokens` the cache reads among them; cache
writes are counted as ordinary input. `total_tokens` is that input plus the output.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app.config import Settings
from app.errors import ProviderError
from app.providers.base import (
    PLACEHOLDER_KEY,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    StreamEvent,
    TextDelta,
    error_for_status,
    normalize_finish_reason,
    read_event,
    read_reply,
    safe_detail,
    stream_cut,
    stream_failure,
    translate_sdk_errors,
)
from app.schemas import Usage

if TYPE_CHECKING:  # the SDK is imported when the provider is configured, not with the app
    import anthropic

OUTPUT_TOOL = "emit_output"
_WRAPPED = "value"
_PATH = "/v1/messages"


class _Block(BaseModel):
    type: str
    text: str = ""
    name: str | None = None
    input: Any = None


class _Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def normalized(self) -> Usage:
        """The whole prompt as input (see the module docstring), the cache reads among it."""
        prompt = (
            self.input_tokens
            + (self.cache_read_input_tokens or 0)
            + (self.cache_creation_input_tokens or 0)
        )
        return Usage(
            input_tokens=prompt,
            output_tokens=self.output_tokens,
            total_tokens=prompt + self.output_tokens,
            cached_input_tokens=self.cache_read_input_tokens,
        )


class _Message(BaseModel):
    """The fields of a Messages API answer the gateway reads; the rest is ignored."""

    content: list[_Block]
    stop_reason: str | None = None
    usage: _Usage


class _DeltaUsage(BaseModel):
    """`message_delta`'s usage: cumulative counts, the output always, the rest when known."""

    output_tokens: int | None = None
    input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None


class _StartMessage(BaseModel):
    usage: _Usage


class _EventDelta(BaseModel):
    type: str | None = None  # text_delta, input_json_delta; absent on message_delta
    text: str | None = None
    partial_json: str | None = None
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


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic, *, default_max_tokens: int) -> None:
        import anthropic
        import httpx2

        self._sdk = anthropic  # its exception classes, for translate_sdk_errors
        self._raw = httpx2.Response
        # `object` as the event type makes the SDK hand over each decoded event untouched.
        self._events = anthropic.AsyncStream[object]
        self._client = client
        self._default_max_tokens = default_max_tokens

    def request_kwargs(self, call: ProviderCall) -> dict[str, Any]:
        """The Messages API body: the system prompt is top-level, `max_tokens` is mandatory."""
        body: dict[str, Any] = {
            "model": call.model,
            "max_tokens": call.params.max_tokens or self._default_max_tokens,
            "messages": [{"role": m.role, "content": m.content} for m in call.messages],
        }
        if call.system:
            body["system"] = call.system
        if call.params.stop:
            body["stop_sequences"] = call.params.stop
        if call.output_schema is not None:
            # Structured output through a forced tool whose input schema is the output schema.
            body["tools"] = [
                {
                    "name": OUTPUT_TOOL,
                    "description": "Return the result.",
                    "input_schema": _object_schema(call.output_schema),
                }
            ]
            body["tool_choice"] = {"type": "tool", "name": OUTPUT_TOOL}
        return body

    async def complete(self, call: ProviderCall) -> ProviderReply:
        with translate_sdk_errors(self.name, self._sdk):
            response = await self._client.post(
                _PATH, cast_to=self._raw, body=self.request_kwargs(call)
            )
        message = read_reply(self.name, _Message, response.content)
        text = "".join(block.text for block in message.content if block.type == "text")
        payload = next(
            (
                block.input
                for block in message.content
                if block.type == "tool_use" and block.name == OUTPUT_TOOL
            ),
            None,
        )
        if payload is not None and call.output_schema is not None:
            payload = _unwrap(call.output_schema, payload)
            text = json.dumps(payload, ensure_ascii=False)
        return ProviderReply(
            text=text,
            finish_reason=normalize_finish_reason(message.stop_reason),
            usage=message.usage.normalized(),
            upstream_request_id=response.headers.get("request-id"),
            payload=payload,
        )

    async def stream(self, call: ProviderCall) -> AsyncGenerator[StreamEvent, None]:
        """message_start (input usage), content_block_delta (text), message_delta (stop reason,
        output usage), message_stop. A forced tool's input arrives as JSON fragments: it is
        parsed whole at the end and sent as one delta, the same text `complete` gives."""
        with translate_sdk_errors(self.name, self._sdk):
            events = await self._client.post(
                _PATH,
                cast_to=object,
                body={**self.request_kwargs(call), "stream": True},
                stream=True,
                stream_cls=self._events,
            )
        request_id = events.response.headers.get("request-id")
        parts: list[str] = []
        tool_json: list[str] = []
        tool_index: int | None = None
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
                if kind == "content_block_delta" and delta is not None:
                    if delta.text:
                        parts.append(delta.text)
                        yield TextDelta(delta.text)
                    elif delta.partial_json and event.index == tool_index:
                        tool_json.append(delta.partial_json)
                elif kind == "message_start" and event.message is not None:
                    usage = event.message.usage
                elif kind == "content_block_start" and event.content_block is not None:
                    block = event.content_block
                    if block.type == "tool_use" and block.name == OUTPUT_TOOL:
                        tool_index = event.index
                elif kind == "message_delta":
                    if delta is not None and delta.stop_reason is not None:
                        stop_reason = delta.stop_reason
                    if usage is not None and event.usage is not None:
                        counts = event.usage.model_dump(exclude_none=True)
                        usage = usage.model_copy(update=counts)
                elif kind == "message_stop":
                    stopped = True
        if not stopped or stop_reason is None or usage is None:
            raise stream_cut(self.name, request_id)
        text, payload = "".join(parts), None
        if tool_index is not None and call.output_schema is not None:
            payload = _unwrap(call.output_schema, self._tool_input(tool_json, request_id))
            text = json.dumps(payload, ensure_ascii=False)
            yield TextDelta(text)
        yield ProviderReply(
            text=text,
            finish_reason=normalize_finish_reason(stop_reason),
            usage=usage.normalized(),
            upstream_request_id=request_id,
            payload=payload,
        )

    def _tool_input(self, fragments: list[str], request_id: str | None) -> Any:
        try:
            return json.loads("".join(fragments) or "{}")
        except ValueError:
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
    return AnthropicProvider(client, default_max_tokens=settings.default_max_tokens)


DESCRIPTOR = ProviderDescriptor(
    name="anthropic",
    # The Messages API of SDK 2.x takes no sampling parameters (temperature, top_p) and no seed.
    supported_params=frozenset({"max_tokens", "stop"}),
    how_to_configure="set ANTHROPIC_API_KEY (or ANTHROPIC_BASE_URL)",
    build=_build,
)
