"""OpenAI, and any OpenAI-compatible server (vLLM, llama.cpp, LM Studio), through AsyncOpenAI."""

from __future__ import annotations

from typing import Any

import openai

from app.errors import UpstreamError
from app.providers.base import (
    ALL_PARAMS,
    ProviderCall,
    ProviderReply,
    chat_messages,
    normalize_finish_reason,
    translate_sdk_errors,
)
from app.schemas import Usage


class OpenAIProvider:
    name = "openai"
    supported_params = ALL_PARAMS

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client

    @staticmethod
    def request_kwargs(call: ProviderCall) -> dict[str, Any]:
        """The exact chat.completions body: the system prompt is the first message."""
        messages = chat_messages(call)
        params = call.params.model_dump(exclude_none=True)
        if "max_tokens" in params:  # the current name; `max_tokens` is refused by newer models
            params["max_completion_tokens"] = params.pop("max_tokens")
        body: dict[str, Any] = {"model": call.model, "messages": messages, **params}
        if call.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": dict(call.output_schema)},
            }
        return body

    async def complete(self, call: ProviderCall) -> ProviderReply:
        with translate_sdk_errors(self.name, openai):
            result = await self._client.chat.completions.create(**self.request_kwargs(call))
        if not result.choices:
            raise UpstreamError("openai returned no choices", provider=self.name)
        choice = result.choices[0]
        usage = result.usage
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

    async def aclose(self) -> None:
        await self._client.close()
