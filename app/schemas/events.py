"""The admin event log as the API and CLI show it: who did what, to what, when, from where."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import Field

from app.schemas.base import FrozenModel

ActorKind = Literal["key", "anonymous", "cli", "service"]


class AdminEvent(FrozenModel):
    """One admin action. `detail` says what changed; it never holds a secret (a new key, a
    webhook secret, a revealed prompt)."""

    id: str
    at: dt.datetime = Field(description="When the action was done (UTC).")
    actor: ActorKind = Field(
        description="`key`: an API key (its id in actor_key_id); `anonymous`: auth is disabled; "
        "`cli`: a `genai` command on the server; `service`: the service itself (e.g. retention)."
    )
    actor_key_id: str | None = None
    actor_team: str | None = None
    action: str = Field(description="Dotted: `key.created`, `label.moved`, `job.replayed`, ….")
    target: str | None = Field(
        default=None, description="What it acted on: a key id, `template:name/role@label`, …."
    )
    detail: dict[str, Any] = Field(default_factory=dict)
    remote_addr: str | None = Field(default=None, description="The client's address (HTTP only).")
    user_agent: str | None = None
    request_id: str | None = None


class AdminEventPage(FrozenModel):
    """Newest first; pass `next_cursor` back as `cursor` for the next page (null: no more)."""

    events: list[AdminEvent]
    next_cursor: str | None = None
