"""Ollama through `ollama.AsyncClient`; params travel in `options` under Ollama's names.

The SDK's `ResponseError` keeps the status but drops the headers, and with them a 429's
`Retry-After`; so the client built here carries an httpx response hook that raises our error,
headers read, before the SDK sees the answer. An adapter given a plain client still maps
`ResponseError` by status (without Retry-After).

Usage: `prompt_eval_count` in, `eval_count` out; Ollama reports no cached or reasoning tokens.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import ollama

from app.config import Settings
from app.errors import ProviderError, UpstreamError, UpstreamTimeout
from app.providers.base import (
    ALL_PARAMS,
    Provider,
    ProviderCall,
    ProviderDescriptor,
    ProviderReply,
    StreamEvent,
    TextDelta,
    chat_messages,
    connection_lost,
    error_for_status,
    normalize_finish_reason,
    safe_detail,
    stream_cut,
    stream_stalled,
    total_tokens,
)
from app.schemas import Usage

NAME = "ollama"
# Our parameter names → Ollama's `options` keys.
_OPTION_NAMES = {
    "temperature": "temperature",
    "max_tokens": "num_predict",
    "top_p": "top_p",
    "stop": "stop",
    "seed": "seed",
}


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

    def __init__(self, client: ollama.AsyncClient) -> None:
        self._client = client

    @classmethod
    def connect(cls, host: str | None, *, timeout: httpx.Timeout | float) -> OllamaProvider:
        """The adapter with a client whose error answers keep their headers (Retry-After)."""
        hooks = {"response": [raise_for_status]}
        return cls(ollama.AsyncClient(host=host, timeout=timeout, event_hooks=hooks))

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
            raise _unreachable() from None
        except ValueError:  # a body that is not JSON, or not a chat response
            raise ProviderError(
                "ollama answered unexpectedly: the body is not a chat response", provider=self.name
            ) from None
        return ProviderReply(
            text=result.message.content or "",
            finish_reason=normalize_finish_reason(result.done_reason),
            usage=_usage(result),
        )

    async def stream(self, call: ProviderCall) -> AsyncGenerator[StreamEvent, None]:
        """NDJSON chunks; the last one has `done: true`, the stop reason and the counts."""
        body = {**self.request_kwargs(call), "stream": True}
        # The SDK sends the request on the first iteration, so every error surfaces there.
        chunks: AsyncGenerator[ollama.ChatResponse, None] = await self._client.chat(**body)
        parts: list[str] = []
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
                # `done` is the last line: reading on to the body's end frees the connection.
        if last is None or not last.done:
            raise stream_cut(self.name, None)
        yield ProviderReply(
            text="".join(parts),
            finish_reason=normalize_finish_reason(last.done_reason),
            usage=_usage(last),
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


def _unreachable() -> UpstreamError:
    return UpstreamError("could not reach ollama; is it running at OLLAMA_HOST?", provider=NAME)


def _build(settings: Settings) -> Provider:
    """Ollama needs no key: it is always configured (default host: the local daemon)."""
    upstream = settings.upstream
    timeout = httpx.Timeout(upstream.timeout_seconds, connect=upstream.connect_timeout_seconds)
    return OllamaProvider.connect(settings.ollama.host, timeout=timeout)


DESCRIPTOR = ProviderDescriptor(
    name="ollama",
    supported_params=ALL_PARAMS,
    how_to_configure="set OLLAMA_HOST",
    build=_build,
)
