"""Anthropic through AsyncAnthropic: top-level `system`, and `max_tokens` always set.

As for OpenAI, the body goes through the client's generic `post` and the answer is read into a
small model of the fields we use (see `app/providers/openai.py` for why).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app.config import Settings
from app.providers.base import (
    PLACEHOLDER_KEY,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    normalize_finish_reason,
    read_reply,
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


class _Message(BaseModel):
    """The fields of a Messages API answer the gateway reads; the rest is ignored."""

    content: list[_Block]
    stop_reason: str | None = None
    usage: _Usage


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
        usage = message.usage
        return ProviderReply(
            text=text,
            finish_reason=normalize_finish_reason(message.stop_reason),
            usage=Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.input_tokens + usage.output_tokens,
            ),
            upstream_request_id=response.headers.get("request-id"),
            payload=payload,
        )

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
        timeout=settings.upstream.timeout_seconds,
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
