"""Readiness: can this process serve completions now? One component answers /readyz.

It asks each part for its own state (patterns, providers, the audit store and its backlog) and
never reaches through another component, so /readyz depends on it alone. Each part is seen
through the small protocol below, so this module knows none of them: the runtime hands them in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from app.errors import InvalidPattern, StoreUnavailable


class PatternsState(Protocol):
    """The pattern catalog, as readiness sees it."""

    def missing_roots(self) -> list[str]: ...

    def names(self) -> list[str]: ...

    def problems(self) -> dict[str, InvalidPattern]: ...


class ProvidersState(Protocol):
    """The provider registry, as readiness sees it: each known provider, configured or not."""

    def status(self) -> dict[str, bool]: ...


class AuditBacklog(Protocol):
    """The audit writer's queue, as readiness sees it."""

    @property
    def backlog(self) -> int: ...

    @property
    def stuck(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class StoreState:
    """The audit store, as readiness sees it: its probes, bounded by one timeout, and the
    writer's queue."""

    schema_is_current: Callable[[], Awaitable[bool]]
    probe: Callable[[], Awaitable[None]]  # raises StoreUnavailable when records cannot be written
    backlog: AuditBacklog
    probe_timeout_seconds: float


class _Report(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PatternsReadiness(_Report):
    count: int
    missing_roots: list[str]
    invalid: dict[str, list[str]]


class AuthReadiness(_Report):
    enabled: bool
    warning: str | None = Field(default=None, exclude_if=lambda warning: warning is None)


class DatabaseReadiness(_Report):
    reachable: bool
    schema_current: bool | None
    audit_backlog: int
    audit_backlog_stuck: bool = Field(
        description="Queued audit records have not drained for GENAI_AUDIT__STUCK_AFTER_SECONDS."
    )


class ReadinessReport(_Report):
    """The /readyz body: 200 when `status` is ready, else 503."""

    status: Literal["ready", "not_ready"]
    patterns: PatternsReadiness
    providers: dict[str, bool]
    auth: AuthReadiness
    database: DatabaseReadiness

    @property
    def ready(self) -> bool:
        return self.status == "ready"


class Readiness:
    def __init__(
        self,
        *,
        patterns: PatternsState,
        providers: ProvidersState,
        store: StoreState,
        auth_disabled: bool,
    ) -> None:
        self._patterns = patterns
        self._providers = providers
        self._store_state = store
        self._auth_disabled = auth_disabled

    async def _store(self) -> tuple[bool, bool | None]:
        """(reachable, schema current); bounded: a locked table or a silent server fails the
        probe, never hangs it."""
        try:
            store = self._store_state
            async with asyncio.timeout(store.probe_timeout_seconds):
                schema_current = await store.schema_is_current()
                await store.probe()
        except (StoreUnavailable, TimeoutError):
            return False, None
        return True, schema_current

    def _auth(self) -> AuthReadiness:
        if not self._auth_disabled:
            return AuthReadiness(enabled=True)
        return AuthReadiness(
            enabled=False,
            warning="GENAI_AUTH_DISABLED is set: every /v1 route answers anyone as admin.",
        )

    async def check(self) -> ReadinessReport:
        missing_roots = self._patterns.missing_roots()
        names = self._patterns.names()
        providers = self._providers.status()
        reachable, schema_current = await self._store()
        stuck = self._store_state.backlog.stuck
        ready = (
            not stuck
            and not missing_roots
            and bool(names)
            and any(providers.values())
            and reachable
            and bool(schema_current)
        )
        return ReadinessReport(
            status="ready" if ready else "not_ready",
            patterns=PatternsReadiness(
                count=len(names),
                missing_roots=missing_roots,
                invalid={name: p.problems for name, p in self._patterns.problems().items()},
            ),
            providers=providers,
            auth=self._auth(),
            database=DatabaseReadiness(
                reachable=reachable,
                schema_current=schema_current,
                audit_backlog=self._store_state.backlog.backlog,
                audit_backlog_stuck=stuck,
            ),
        )
