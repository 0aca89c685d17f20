"""OpenAI, and any OpenAI-compatible server (vLLM, llama.cpp, LM Studio), through AsyncOpenAI.

The call goes through the client's generic `post` (its documented way to send a body as is): the
SDK still owns the connection pool, auth, timeouts and its typed errors, but neither re-walks our
request against its TypedDicts nor builds its full response models; we read the few fields we
use, once, in Rust (`bench/provider_calls.py` has the figures).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app.config import Settings
from app.errors import UpstreamError
from app.providers.base import (
    ALL_PARAMS,
    PLACEHOLDER_KEY,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    chat_messages,
    normalize_finish_reason,
    read_reply,
    translate_sdk_errors,
)
from app.schemas import Usage

if TYPE_CHECKING:  # the SDK is imported when the provider is configured, not with the app
    import openai
    from openai import RequestOptions

_PATH = "/chat/completions"
# What `chat.completions.create` asks for: the API key as a bearer token, nothing else.
_OPTIONS: RequestOptions = {"security": {"bearer_auth": True}}


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None


class _Message(BaseModel):
    content: str | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _ChatCompletion(BaseModel):
    """The fields of a chat completion the gateway reads; the rest is ignored, not modelled."""

    choices: list[_Choice]
    usage: _Usage | None = None


class OpenAIProvider:
    name = "openai"

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        import httpx2
        import openai

        self._sdk = openai  # its exception classes, for translate_sdk_errors
        self._raw = httpx2.Response
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
        with translate_sdk_errors(self.name, self._sdk):
            response = await self._client.post(
                _PATH, cast_to=self._raw, body=self.request_kwargs(call), options=_OPTIONS
            )
        result = read_reply(self.name, _ChatCompletion, response.content)
        if not result.choices:
            raise UpstreamError("openai returned no choices", provider=self.name)
        choice = result.choices[0]
        usage = result.usage or _Usage()
        return ProviderReply(
            text=choice.message.content or "",
            finish_reason=normalize_finish_reason(choice.finish_reason),
            usage=Usage(
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                total_tokens=usage.total_tokens,
            ),
            upstream_request_id=response.headers.get("x-request-id"),
        )

    async def aclose(self) -> None:
        await self._client.close()


def _build(settings: Settings) -> Provider | None:
    """SDK retries are off: `app.providers.retry` is the only retry layer."""
    oa = settings.openai
    if not (oa.api_key or oa.base_url):
        return None
    import openai  # only once the provider is configured: it costs a second to import

    key = oa.api_key.get_secret_value() if oa.api_key else PLACEHOLDER_KEY
    client = openai.AsyncOpenAI(
        api_key=key,
        base_url=oa.base_url,
        timeout=settings.upstream.timeout_seconds,
        max_retries=0,
    )
    return OpenAIProvider(client)


DESCRIPTOR = ProviderDescriptor(
    name="openai",
    supported_params=ALL_PARAMS,
    how_to_configure="set OPENAI_API_KEY (or OPENAI_BASE_URL for an OpenAI-compatible server)",
    build=_build,
)
