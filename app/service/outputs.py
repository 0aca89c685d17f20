"""What a streamed completion yields, and a cached answer replayed as a stream."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from app.errors import GenAIError
from app.providers.base import ReasoningDelta, TextDelta, ToolCallDelta
from app.schemas import CompletionEnvelope


@dataclass(frozen=True, slots=True)
class StreamDelta:
    text: str


@dataclass(frozen=True, slots=True)
class StreamFailed:
    """The stream's last event when it fails: the error, naming the job."""

    error: GenAIError


class ClientStoppedReading(Exception):
    """Thrown into a stream whose client stopped reading: the job ends as cancelled, with
    this reason, and its slot is freed (GENAI_REQUEST__STREAM_SEND_TIMEOUT_SECONDS)."""

    reason = "client_stopped_reading"


StreamOutput = StreamDelta | ToolCallDelta | ReasoningDelta | CompletionEnvelope | StreamFailed
"""What `GenAIService.stream` yields: deltas (text, tool calls, reasoning), then the envelope or
the failure."""


def passed_on(event: TextDelta | ToolCallDelta | ReasoningDelta) -> StreamOutput:
    """A provider's delta as the service yields it (text keeps the service's own type)."""
    return StreamDelta(event.text) if isinstance(event, TextDelta) else event


async def replayed(envelope: CompletionEnvelope) -> AsyncGenerator[StreamOutput, None]:
    """A cached answer as a stream: its reasoning, its whole text as one delta and each tool
    call whole, then the envelope."""
    response = envelope.response
    for index, block in enumerate(response.reasoning):
        yield ReasoningDelta(
            index, text=block.thinking or "", signature=block.signature or "", redacted=block.data
        )
    if response.text:
        yield StreamDelta(response.text)
    for index, call in enumerate(response.tool_calls):
        yield ToolCallDelta(index, call.arguments, call.id, call.name)
    yield envelope
