"""The service: a completion started once, carried to its record (gateway → completion)."""

from app.service.completion import Outcomes
from app.service.gateway import CompletionSlot, CompletionTimeouts, GenAIService
from app.service.outputs import ClientStoppedReading, StreamDelta, StreamFailed, StreamOutput

__all__ = [
    "ClientStoppedReading",
    "CompletionSlot",
    "CompletionTimeouts",
    "GenAIService",
    "Outcomes",
    "StreamDelta",
    "StreamFailed",
    "StreamOutput",
]
