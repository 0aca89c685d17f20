"""Principal: who is calling, what it may do, and the limits that come with its key and team.

A principal is built once per key lookup and cached with it (see the Authenticator), so the
allowlist checks here are pure and cost a compiled-regex match per request.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.auth.keys import Scope
from app.schemas import Limits

NO_LIMITS = Limits()


@functools.lru_cache(maxsize=4096)
def _compiled(globs: tuple[str, ...]) -> re.Pattern[str]:
    """One regex for a whole allowlist: `*` any run of characters, `?` one (case-sensitive)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs))


def allowed(globs: Sequence[str] | None, name: str) -> bool:
    """True when there is no allowlist or one of its globs matches `name`."""
    if globs is None:
        return True
    return bool(globs) and _compiled(tuple(globs)).match(name) is not None


@dataclass(frozen=True, slots=True)
class Principal:
    """The calling key's public id (`None`: auth is disabled), its scope, team and limits."""

    key_id: str | None
    scope: Scope
    team: str | None = None
    limits: Limits = NO_LIMITS
    team_limits: Limits = NO_LIMITS
    allowed_models: tuple[str, ...] | None = None
    allowed_patterns: tuple[str, ...] | None = None
    expires_at: dt.datetime | None = None

    @property
    def limited(self) -> bool:
        """True when a budget or rate limit applies (the hot path skips the counters otherwise)."""
        return not (self.limits.empty and self.team_limits.empty)

    def expired(self, now: dt.datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def may_use_model(self, model: str) -> bool:
        """`model` is `provider/name`."""
        return allowed(self.allowed_models, model)

    def may_use_pattern(self, name: str) -> bool:
        return allowed(self.allowed_patterns, name)


ANONYMOUS_ADMIN = Principal(key_id=None, scope=Scope.admin)
