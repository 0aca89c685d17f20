"""What every upstream call leaves behind: its span (OpenTelemetry GenAI conventions) and its
`CallAttempt` in the job's record; and the shapes a stream is handed over in."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from app.errors import ProviderError
from app.observability.tracing import AttributeValue, Span
from app.pipeline.prepare import Prepared
from app.providers import ProviderReply
from app.providers.base import StreamEvent
from app.schemas import CallAttempt


def elapsed_ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 2)


def chat_span(prepared: Prepared) -> tuple[str, dict[str, AttributeValue | None]]:
    """A provider call's span name and attributes (OpenTelemetry GenAI conventions).
    `gen_ai.system` is the deprecated name of `gen_ai.provider.name`, kept for older backends."""
    choice, params = prepared.choice, prepared.params
    return f"chat {choice.name}", {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": choice.provider,
        "gen_ai.system": choice.provider,
        "gen_ai.request.model": choice.name,
        "gen_ai.request.max_tokens": params.max_tokens,
        "gen_ai.request.temperature": params.temperature,
    }


def trace_reply(traced: Span, prepared: Prepared, reply: ProviderReply) -> None:
    # The adapters report no model name of their own: the one called answered.
    traced.set("gen_ai.response.model", prepared.choice.name)
    traced.set("gen_ai.usage.input_tokens", reply.usage.input_tokens)
    traced.set("gen_ai.usage.output_tokens", reply.usage.output_tokens)
    traced.set("gen_ai.response.finish_reasons", [reply.finish_reason])


def call_attempt(
    prepared: Prepared, started: float, error: ProviderError | None, *, cancelled: bool = False
) -> CallAttempt:
    """One upstream call as the job's record keeps it."""
    outcome = "cancelled" if cancelled else ("failed" if error else "completed")
    return CallAttempt(
        provider=prepared.choice.provider,
        model=prepared.choice.name,
        outcome=outcome,
        error_type=error.error_type if error else None,
        upstream_status=error.upstream_status if error else None,
        duration_ms=elapsed_ms(started),
    )


@dataclass(slots=True)
class StreamTimeouts:
    first_token_seconds: float
    idle_seconds: float


@dataclass(slots=True)
class OpenStream:
    """A stream whose first event has arrived from `prepared`'s model: no fallback after this."""

    prepared: Prepared
    first: StreamEvent
    events: AsyncIterator[StreamEvent]
    close: Callable[[], Awaitable[None]]
