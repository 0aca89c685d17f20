"""The provider interface, and the status-code mapping every adapter uses to translate errors."""

from __future__ import annotations

import contextlib
import email.utils
import json
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from app.config import Settings
from app.errors import (
    AnswerTooLarge,
    ProviderError,
    StreamInterrupted,
    UpstreamAuthFailed,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamRejected,
    UpstreamTimeout,
)
from app.schemas import (
    FinishReason,
    Message,
    ModelParams,
    ReasoningBlock,
    ResponseFormat,
    ToolCall,
    ToolSet,
    Usage,
)


@dataclass(frozen=True, slots=True)
class NativeOutput:
    """An output format the provider is to enforce itself: through its own format field, or
    (Anthropic's older models) a tool the model is forced to call."""

    format: ResponseFormat
    via: Literal["format", "tool"] = "format"


@dataclass(frozen=True, slots=True)
class ProviderCall:
    """What to send: the model's own name (no `provider/` prefix), the prompt and the params."""

    model: str
    system: str
    messages: tuple[Message, ...]
    params: ModelParams
    tools: ToolSet | None = None
    # Set only when the provider is to enforce the format natively.
    output: NativeOutput | None = None
    # The system prompt is the same on every call of its source (a pattern version): a provider
    # with prompt-cache breakpoints (Anthropic) marks it as one. Others ignore it.
    cache_system: bool = False


@dataclass(frozen=True, slots=True)
class ProviderReply:
    text: str
    finish_reason: FinishReason
    usage: Usage
    upstream_request_id: str | None = None
    payload: Any | None = None  # structured output that arrived already parsed (a tool's input)
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: tuple[ReasoningBlock, ...] = ()


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of a streamed answer, as it arrived."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call: the first names the call (`id`, `name`), the rest add
    fragments of its JSON `arguments`. `index` tells the calls of one answer apart."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of streamed reasoning (Anthropic's thinking): `index` tells its blocks apart; a
    block's signature, or a redacted block's encrypted data, arrives whole in one piece."""

    index: int
    text: str = ""
    signature: str = ""
    redacted: str | None = None


StreamEvent = TextDelta | ToolCallDelta | ReasoningDelta | ProviderReply
"""What `Provider.stream` yields: deltas in order, then one ProviderReply with the whole answer
(its tool calls and reasoning complete)."""


def new_call_id() -> str:
    """An id for a tool call that came without one (Ollama never sends one; some
    OpenAI-compatible servers send an empty one): the caller needs one to answer it."""
    return f"call_{uuid.uuid4().hex[:24]}"


class ToolCallAssembly:
    """Tool calls put together from their streamed pieces, in the order of their index."""

    def __init__(self) -> None:
        self._calls: dict[int, tuple[str, str, list[str]]] = {}

    def add(self, delta: ToolCallDelta) -> None:
        known = self._calls.get(delta.index)
        if known is None:
            known = self._calls[delta.index] = (delta.id or "", delta.name or "", [])
        elif delta.id or delta.name:  # a server may spell the head across pieces
            known = self._calls[delta.index] = (
                known[0] or delta.id or "",
                known[1] or delta.name or "",
                known[2],
            )
        known[2].append(delta.arguments)

    def calls(self, provider: str) -> tuple[ToolCall, ...]:
        """The whole calls; a call without an id or a name is the provider's fault."""
        found = []
        for index in sorted(self._calls):
            call_id, name, pieces = self._calls[index]
            try:
                found.append(ToolCall(id=call_id, name=name, arguments="".join(pieces) or "{}"))
            except ValidationError:
                raise ProviderError(
                    f"{provider} answered unexpectedly: streamed tool call {index} has no "
                    "valid id or name",
                    provider=provider,
                ) from None
        return tuple(found)


ALL_PARAMS = frozenset(ModelParams.model_fields)
# The openai and anthropic SDKs hand over a response unread when a request carries this header,
# so a body can be read as it arrives and cut off at the answer cap (`read_capped`).
UNREAD_BODY = {"X-Stainless-Raw-Response": "stream"}
DEFAULT_MAX_ANSWER_BYTES = 8 * 1024 * 1024


async def read_capped(
    provider: str, response: Any, limit: int, *, request_id: str | None = None
) -> bytes:
    """A response body read as it arrives, and closed; past `limit` bytes the read stops with
    AnswerTooLarge instead of holding the rest in memory."""
    import httpx
    import httpx2  # the openai and anthropic SDKs' transport; Ollama's is httpx

    size, chunks = 0, []
    try:
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(provider, limit=limit, upstream_request_id=request_id)
            chunks.append(chunk)
    except (httpx.TimeoutException, httpx2.TimeoutException):
        raise UpstreamTimeout(
            f"{provider} went silent while sending its answer",
            provider=provider,
            upstream_request_id=request_id,
        ) from None
    except (httpx.TransportError, httpx2.TransportError):
        raise connection_lost(provider, started=False, request_id=request_id) from None
    finally:
        await response.aclose()
    return b"".join(chunks)


# A compatible server reached through a base URL often needs no key; the SDKs insist on one.
PLACEHOLDER_KEY = "not-needed"
ReplyT = TypeVar("ReplyT", bound=BaseModel)


class Provider(Protocol):
    name: str

    async def complete(self, call: ProviderCall) -> ProviderReply:
        """Make one upstream call; raise only `app.errors.ProviderError` subclasses."""
        ...

    def stream(self, call: ProviderCall) -> AsyncGenerator[StreamEvent, None]:
        """One streamed upstream call: `TextDelta`s in order, then exactly one `ProviderReply`
        (the whole text, the finish reason, the usage). A stream that ends without the
        provider's finish marker raises `StreamInterrupted`; only ProviderError subclasses are
        raised. Closing the iterator early (`aclose`) closes the upstream response."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class CountsTokens(Protocol):
    """A provider that counts a prompt's tokens without answering it (Anthropic)."""

    async def count_tokens(self, call: ProviderCall) -> int:
        """The input tokens `call` would use; raises only ProviderError subclasses."""
        ...


@dataclass(frozen=True, slots=True)
class ProviderDescriptor:
    """Everything the gateway knows about one provider, so adding one touches one module."""

    name: str
    # What the provider accepts, known even when it is not configured (for dry runs).
    supported_params: frozenset[str]
    # The end of "Provider 'x' is not configured: ..." (an operator's next step).
    how_to_configure: str
    # Builds the adapter and its long-lived client, or None when settings leave it unconfigured.
    build: Callable[[Settings], Provider | None]
    # Params the provider has no control for, dropped when set (the envelope's `params` shows
    # what was sent); any other unsupported param changes the answer and is refused.
    ignored_params: frozenset[str] = frozenset()
    # The API refuses a call without `max_tokens`: the model's output limit is sent then.
    requires_max_tokens: bool = False

    def refused_params(self, params: ModelParams) -> list[str]:
        """The params set in `params` that this provider can neither send nor ignore."""
        allowed = self.supported_params | self.ignored_params
        return [
            name
            for name in type(params).model_fields
            if getattr(params, name) is not None and name not in allowed
        ]


_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "refusal": "content_filter",
    "tool_calls": "tool_calls",
    "tool_use": "tool_calls",
    "function_call": "tool_calls",
}


def normalize_finish_reason(raw: str | None) -> FinishReason:
    """One vocabulary for every provider's stop reason."""
    return _FINISH_REASONS.get(raw or "stop", "other")


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait, from `retry-after-ms`, `retry-after` seconds, or an HTTP date."""
    if not headers:
        return None
    lowered = {key.lower(): value for key, value in headers.items()}
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(float(ms) / 1000, 0.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value else None
        return max(when.timestamp() - time.time(), 0.0) if when else None


def error_for_status(
    provider: str,
    status: int,
    *,
    headers: Mapping[str, str] | None = None,
    request_id: str | None = None,
    detail: str = "",
    code: str | None = None,
) -> ProviderError:
    """Map an upstream HTTP status to our hierarchy; never by reading message strings. `code` is
    the provider's structured error code, kept for the caller (context_length_exceeded…)."""
    suffix = f": {detail}" if detail else ""
    if code:  # the provider's code in the message too: clients match on it (LangChain does)
        suffix = f" [{code}]{suffix}"
    if status == 429:
        return UpstreamRateLimited(
            f"{provider} is rate limiting this gateway{suffix}",
            retry_after=parse_retry_after(headers),
            provider=provider,
            upstream_status=status,
            upstream_request_id=request_id,
        )
    error_class: type[ProviderError]
    if status in (401, 403):
        error_class, message = (
            UpstreamAuthFailed,
            "refused the gateway's credentials; check its API key",
        )
    elif status in (408, 504):
        error_class, message = UpstreamTimeout, f"timed out (HTTP {status})"
    elif status >= 500 or status == 409:  # 409: a conflict at the provider, worth retrying
        error_class, message = UpstreamError, f"failed with HTTP {status}{suffix}"
    else:
        error_class, message = UpstreamRejected, f"rejected the request (HTTP {status}){suffix}"
    return error_class(
        f"{provider} {message}",
        provider=provider,
        upstream_status=status,
        upstream_request_id=request_id,
        upstream_code=code,
    )


def safe_detail(message: object, limit: int = 300) -> str:
    """A short, single-line upstream message for the caller (never a stack trace)."""
    text = " ".join(str(message or "").split())
    return text[:limit]


@contextlib.contextmanager
def translate_sdk_errors(provider: str, sdk: ModuleType) -> Iterator[None]:
    """Translate the exceptions of the openai and anthropic SDKs, which share one shape."""
    try:
        yield
    except sdk.APITimeoutError:
        raise UpstreamTimeout(f"{provider} did not answer in time", provider=provider) from None
    except sdk.APIConnectionError:
        raise UpstreamError(f"could not reach {provider}", provider=provider) from None
    except sdk.APIStatusError as exc:
        code = getattr(exc, "code", None)  # openai's APIError has one; anthropic's has none
        raise error_for_status(
            provider,
            exc.status_code,
            headers=exc.response.headers,
            request_id=exc.request_id,
            detail=safe_detail(exc.message),
            code=code if isinstance(code, str) else None,
        ) from None
    except sdk.APIError as exc:  # e.g. a body the SDK could not parse
        raise ProviderError(
            f"{provider} answered unexpectedly: {safe_detail(exc.message)}", provider=provider
        ) from None


def read_reply(provider: str, shape: type[ReplyT], body: bytes) -> ReplyT:
    """Parse and check an upstream body in one pass; an unreadable one is the provider's fault.

    The fast parser refuses an escaped lone surrogate (`"\\ud800"`), which the standard library
    and the SDKs accept: such a body is read again by `json` (streams already are, by the SDKs),
    and the texts keep the surrogate, escaped where it is stored and sent."""
    try:
        return shape.model_validate_json(body)
    except ValidationError as exc:
        if exc.errors(include_url=False)[0]["type"] != "json_invalid":
            raise _unexpected(provider, exc) from None
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            raise _unexpected(provider, exc) from None
        return read_event(provider, shape, data)


def read_event(provider: str, shape: type[ReplyT], data: object) -> ReplyT:
    """Check one already-decoded stream event (the SDKs decode each SSE `data` line)."""
    try:
        return shape.model_validate(data)
    except ValidationError as exc:
        raise _unexpected(provider, exc) from None


def _unexpected(provider: str, exc: ValidationError) -> ProviderError:
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "body"
    return ProviderError(
        f"{provider} answered unexpectedly: {where}: {safe_detail(first['msg'])}",
        provider=provider,
    )


# --- streams ---------------------------------------------------------------------------------
# Whether a stream had started decides what a broken connection means: before the first event
# nothing reached the caller, so it is an ordinary (retriable) UpstreamError; after it the caller
# holds part of an answer, and only StreamInterrupted says that honestly.


def stream_cut(provider: str, request_id: str | None) -> StreamInterrupted:
    """The stream ended cleanly but without the provider's finish marker."""
    return StreamInterrupted(
        f"{provider}'s stream ended before its finish marker; the answer is incomplete, "
        "retry the request",
        provider=provider,
        upstream_request_id=request_id,
    )


def connection_lost(provider: str, *, started: bool, request_id: str | None) -> ProviderError:
    """The connection broke (reset, or closed mid-message) while the answer was streaming."""
    if started:
        return StreamInterrupted(
            f"{provider} dropped the connection mid-stream; the answer is incomplete, "
            "retry the request",
            provider=provider,
            upstream_request_id=request_id,
        )
    return UpstreamError(
        f"{provider} dropped the connection before streaming anything",
        provider=provider,
        upstream_request_id=request_id,
    )


def stream_stalled(provider: str, request_id: str | None) -> UpstreamTimeout:
    return UpstreamTimeout(
        f"{provider} went silent mid-stream for longer than the upstream timeout",
        provider=provider,
        upstream_request_id=request_id,
    )


def stream_failure(
    provider: str, sdk: ModuleType, exc: Exception, *, started: bool, request_id: str | None
) -> ProviderError | None:
    """What an exception raised while reading an openai or anthropic stream means, or None
    when it is not an upstream failure (a bug of ours, which must not be disguised)."""
    import httpx2  # the SDKs' transport, already imported with them

    # The anthropic SDK lets transport errors of a stream through unwrapped; openai wraps them.
    if isinstance(exc, sdk.APITimeoutError | httpx2.TimeoutException):
        return stream_stalled(provider, request_id)
    if isinstance(exc, sdk.APIConnectionError | httpx2.TransportError):
        return connection_lost(provider, started=started, request_id=request_id)
    if isinstance(exc, sdk.APIError):  # an error event inside the stream
        return UpstreamError(
            f"{provider} reported an error mid-stream: {safe_detail(exc.message)}",
            provider=provider,
            upstream_request_id=request_id,
        )
    if isinstance(exc, ValueError):  # an event whose data is not JSON
        return ProviderError(
            f"{provider} answered unexpectedly: a stream event is not JSON",
            provider=provider,
            upstream_request_id=request_id,
        )
    return None


def total_tokens(input_tokens: int | None, output_tokens: int | None) -> int | None:
    """The sum when both sides were reported; a partial count would pass for a whole one."""
    if input_tokens is None or output_tokens is None:
        return None
    return input_tokens + output_tokens
