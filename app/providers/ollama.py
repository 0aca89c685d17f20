"""Ollama through `ollama.AsyncClient`; params travel in `options` under Ollama's names."""

from __future__ import annotations

from typing import Any

import httpx
import ollama

from app.config import Settings
from app.errors import UpstreamError, UpstreamTimeout
from app.providers.base import (
    ALL_PARAMS,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    chat_messages,
    error_for_status,
    normalize_finish_reason,
    safe_detail,
)
from app.schemas import Usage

# Our parameter names → Ollama's `options` keys.
_OPTION_NAMES = {
    "temperature": "temperature",
    "max_tokens": "num_predict",
    "top_p": "top_p",
    "stop": "stop",
    "seed": "seed",
}


class OllamaProvider:
    name = "ollama"

    def __init__(self, client: ollama.AsyncClient) -> None:
        self._client = client

    @staticmethod
    def request_kwargs(call: ProviderCall) -> dict[str, Any]:
        """The /api/chat body: params go in `options` under Ollama's own names."""
        messages = chat_messages(call)
        params = call.params.model_dump(exclude_none=True)
        options = {_OPTION_NAMES[key]: value for key, value in params.items()}
        body = {"model": call.model, "messages": messages, "options": options, "stream": False}
        if call.output_schema is not None:
            body["format"] = dict(call.output_schema)  # Ollama constrains decoding to the schema
        return body

    async def complete(self, call: ProviderCall) -> ProviderReply:
        try:
            result = await self._client.chat(**self.request_kwargs(call))
        except ollama.ResponseError as exc:
            raise error_for_status(
                self.name, exc.status_code, detail=safe_detail(exc.error)
            ) from None
        except httpx.TimeoutException:
            raise UpstreamTimeout("ollama did not answer in time", provider=self.name) from None
        except (ConnectionError, httpx.TransportError):
            raise UpstreamError(
                "could not reach ollama; is it running at OLLAMA_HOST?", provider=self.name
            ) from None
        inputs, outputs = result.prompt_eval_count, result.eval_count
        return ProviderReply(
            text=result.message.content or "",
            finish_reason=normalize_finish_reason(result.done_reason),
            usage=Usage(
                input_tokens=inputs,
                output_tokens=outputs,
                total_tokens=(inputs or 0) + (outputs or 0) if inputs is not None else None,
            ),
        )

    async def aclose(self) -> None:
        await self._client.close()  # type: ignore[no-untyped-call]


def _build(settings: Settings) -> Provider:
    """Ollama needs no key: it is always configured (default host: the local daemon)."""
    timeout = httpx.Timeout(settings.upstream.timeout_seconds)
    return OllamaProvider(ollama.AsyncClient(host=settings.ollama.host, timeout=timeout))


DESCRIPTOR = ProviderDescriptor(
    name="ollama",
    supported_params=ALL_PARAMS,
    how_to_configure="set OLLAMA_HOST",
    build=_build,
)
