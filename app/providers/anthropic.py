"""Anthropic through AsyncAnthropic: top-level `system`, and `max_tokens` always set."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anthropic

from app.providers.base import (
    ProviderCall,
    ProviderReply,
    normalize_finish_reason,
    translate_sdk_errors,
)
from app.schemas import Usage

OUTPUT_TOOL = "emit_output"
_WRAPPED = "value"


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
    # The Messages API of SDK 2.x takes no sampling parameters (temperature, top_p) and no seed.
    supported_params = frozenset({"max_tokens", "stop"})

    def __init__(self, client: anthropic.AsyncAnthropic, *, default_max_tokens: int) -> None:
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
        with translate_sdk_errors(self.name, anthropic):
            message = await self._client.messages.create(**self.request_kwargs(call))
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
            upstream_request_id=getattr(message, "_request_id", None),
            payload=payload,
        )

    async def aclose(self) -> None:
        await self._client.close()
