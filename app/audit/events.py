"""The admin event log: every admin action (a key minted, a label moved, a replay revealed, …)
recorded once, with who did it, to what, when and from where; and read back newest first.

Callers record right after the action commits, in the same request or command, before it
answers: never fire and forget. If the record cannot be written the action still stands (it is
committed, and a 503 would invite a retry that repeats it), so the whole event is logged at
error level as `admin_event_unrecorded`, to be found and restored from the logs.

`detail` says what changed and never holds a secret: a new key, a webhook secret or a revealed
prompt stay out by construction at the call sites, and fields named like secrets are dropped
here as a second guard.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import structlog
from pydantic_core import to_jsonable_python

from app.errors import GenAIError
from app.schemas import (
    ActorKind,
    AdminEvent,
    AdminEventPage,
    ApiKeyCreate,
    Snippet,
    TemplateVersion,
)
from app.store import keyset
from app.store.events import AdminEventRepository, EventFilter

log = structlog.get_logger(__name__)

USER_AGENT_CHARS = 200
_SECRET_FIELDS = frozenset({"key", "secret", "api_key", "token", "password", "prompt", "messages"})


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts and from where: an API key over HTTP, the `genai` CLI, or the service itself."""

    kind: ActorKind
    key_id: str | None = None
    team: str | None = None
    remote_addr: str | None = None
    user_agent: str | None = None
    request_id: str | None = None


CLI = Actor(kind="cli")
SERVICE = Actor(kind="service")


def _safe(detail: Mapping[str, Any] | None) -> dict[str, Any]:
    """JSON values (dates as ISO strings), with any secret-named field left out."""
    kept = {k: v for k, v in (detail or {}).items() if k.lower() not in _SECRET_FIELDS}
    return cast(dict[str, Any], to_jsonable_python(kept))


def encode_cursor(event: AdminEvent) -> str:
    """Opaque to callers: where the page ended (app/store/keyset.py)."""
    return keyset.encode_cursor(event.at, event.id)


decode_cursor = keyset.decode_cursor


class AdminEvents:
    """The one place admin actions are recorded and read."""

    def __init__(self, repository: AdminEventRepository) -> None:
        self._repository = repository

    async def record(
        self,
        actor: Actor,
        action: str,
        *,
        target: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> AdminEvent:
        """Append one event (e.g. `record(SERVICE, "retention.pruned", detail={...})`)."""
        event = AdminEvent(
            id=uuid.uuid4().hex,
            at=dt.datetime.now(dt.UTC),
            actor=actor.kind,
            actor_key_id=actor.key_id,
            actor_team=actor.team,
            action=action,
            target=target,
            detail=_safe(detail),
            remote_addr=actor.remote_addr,
            user_agent=(actor.user_agent or None) and actor.user_agent[:USER_AGENT_CHARS],
            request_id=actor.request_id,
        )
        try:
            await self._repository.add(event)
        except GenAIError as exc:  # the action is committed: say so loudly, never undo it
            log.error(
                "admin_event_unrecorded",
                admin_event=event.model_dump(mode="json"),
                error=type(exc).__name__,
            )
        return event

    async def page(
        self, where: EventFilter, *, limit: int, cursor: str | None = None
    ) -> AdminEventPage:
        after = decode_cursor(cursor) if cursor is not None else None
        found = await self._repository.page(where, limit=limit + 1, after=after)
        events, next_cursor = keyset.cut(found, limit, lambda event: (event.at, event.id))
        return AdminEventPage(events=events, next_cursor=next_cursor)


@dataclass(frozen=True, slots=True)
class ActorLog:
    """The log bound to one actor: what a route or command records its action through."""

    events: AdminEvents
    actor: Actor

    async def record(
        self, action: str, *, target: str | None = None, detail: Mapping[str, Any] | None = None
    ) -> AdminEvent:
        return await self.events.record(self.actor, action, target=target, detail=detail)


def snippet_detail(snippet: Snippet) -> dict[str, Any]:
    """Which version now serves, by checksum (the text is in the store, not in the log)."""
    return {"version": snippet.version, "checksum": snippet.checksum}


def template_detail(stored: TemplateVersion) -> dict[str, Any]:
    """The version stored, and whether `production` now points at it (`activate`, or the first)."""
    return {"version": stored.version, "checksum": stored.checksum, "active": stored.active}


def key_created_detail(new: ApiKeyCreate) -> dict[str, Any]:
    """What a new key allows (never the key itself: the only copy is in the response)."""
    return {"name": new.name, "scope": new.scope, **new.changes()}


# What an event acted on, spelled one way for the API and the CLI (the log filters on it).
def key_target(key_id: str) -> str:
    return f"key:{key_id}"


def team_target(name: str) -> str:
    return f"team:{name}"


def template_target(name: str, role: str, label: str | None = None) -> str:
    return f"template:{name}/{role}" + (f"@{label}" if label is not None else "")


def snippet_target(identifier: str) -> str:
    return f"snippet:{identifier}"


def job_target(job_id: str) -> str:
    return f"job:{job_id}"


def delivery_target(delivery_id: int) -> str:
    return f"webhook_delivery:{delivery_id}"
