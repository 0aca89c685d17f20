"""Console sessions: a browser signs in once with an API key and then carries a cookie.

The cookie holds a random token; the database keeps only its SHA-256, the key the session acts
as and a CSRF token. Every request re-reads both the session and its key, so a revoked or
expired key, a signed-out session or one past its end signs nobody in.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from app.auth.authenticator import Authenticator
from app.auth.principal import Principal
from app.errors import Unauthenticated
from app.store.console_sessions import ConsoleSessionRepository, StoredSession

SESSION_COOKIE = "genai_console"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class Session:
    """Who is signed in (the key's principal) and the token every change must echo."""

    principal: Principal
    csrf: str
    expires_at: dt.datetime

    @property
    def is_admin(self) -> bool:
        return self.principal.scope.value == "admin"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ConsoleSessions:
    def __init__(
        self,
        repository: ConsoleSessionRepository,
        authenticator: Authenticator,
        *,
        lifetime: dt.timedelta,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self._repository = repository
        self._authenticator = authenticator
        self._lifetime = lifetime
        self._clock = clock

    async def sign_in(self, key: str) -> tuple[str, Session]:
        """A new session for the holder of `key` (raises Unauthenticated for a bad one); returns
        the cookie's token, shown to nobody but the browser."""
        principal = await self._authenticator.authenticate(f"Bearer {key.strip()}")
        now = self._clock()
        await self._repository.remove_expired(now)
        token = secrets.token_urlsafe(32)
        stored = StoredSession(
            key_id=principal.key_id,
            csrf=secrets.token_urlsafe(32),
            expires_at=now + self._lifetime,
        )
        await self._repository.add(_digest(token), stored, now)
        return token, Session(principal, stored.csrf, stored.expires_at)

    async def resolve(self, token: str | None) -> Session | None:
        """The live session behind a cookie, or None (no cookie, unknown, ended, key gone)."""
        if not token or len(token) > 200:
            return None
        stored = await self._repository.find(_digest(token))
        if stored is None or stored.expires_at <= self._clock():
            return None
        principal = await self._authenticator.principal_for(stored.key_id)
        if principal is None:
            return None
        return Session(principal, stored.csrf, stored.expires_at)

    async def sign_out(self, token: str | None) -> None:
        if token:
            await self._repository.remove(_digest(token))

    async def principal_of_call(self, token: str, csrf: str | None) -> Principal:
        """The caller of a `/v1` request a console page makes with its cookie: the session's
        key, provided the request echoes the session's CSRF token (raises 401 otherwise)."""
        session = await self.resolve(token)
        if session is None:
            raise Unauthenticated("The console session has ended; sign in again at /console.")
        if csrf is None or not secrets.compare_digest(csrf, session.csrf):
            raise Unauthenticated(
                f"A console call must carry its session's CSRF token in `{CSRF_HEADER}`."
            )
        return session.principal
