"""The service: a completion started once, carried to its record (gateway → completion)."""

from app.service.gateway import CompletionSlot, GenAIService
from app.service.outputs import ClientStoppedReading, StreamDelta, StreamFailed, StreamOutput

__all__ = [
    "ClientStoppedReading",
    "CompletionSlot",
    "GenAIService",
    "StreamDelta",
    "StreamFailed",
    "StreamOutput",
]
