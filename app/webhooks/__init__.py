"""Webhooks: release events (a label moved, a version stored) posted to configured receivers.

Whoever performs a release action is handed an `EventSink` and calls `emit` once the action is
committed; the sink never raises and never waits for a receiver, so a failing receiver cannot
block or undo the action.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class EventSink(Protocol):
    async def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        """Queue `event_type` (e.g. `label.moved`, `template.version_created`) with its data."""
        ...


class NoEvents:
    """The sink when no receiver is configured: events go nowhere."""

    async def emit(self, event_type: str, data: Mapping[str, Any]) -> None:
        return None
