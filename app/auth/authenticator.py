"""Authenticator: turns an `Authorization` header into a principal with a scope, or refuses it.

A verified key is trusted for `cache_seconds` (one dict lookup per request instead of a database
round trip); revoking or changing it (or its team) through the API forgets it at once in this
process, other processes see the change within `cache_seconds`. Concurrent requests with a key
that is not cached share one lookup: when the cache entry of a busy key expires, hundreds of
requests at once must not each take a database connection (they emptied the pool and were
answered 503 `store_unavailable`). Last-use times are gathered in memory and written in the
background, so authentication never writes on the request path.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import hashlib
import time
from collections.abc import Callable

import structlog

from app.auth import keys
from app.auth.keys import Scope
from app.auth.principal import ANONYMOUS_ADMIN, NO_LIMITS, Principal
from app.errors import Forbidden, InvalidRequest, Unauthenticated
from app.observability.facts import request_facts
from app.schemas import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyUpdate,
    FieldProblem,
    Limits,
)
from app.store.keys import ApiKeyRepository, StoredKey

log = structlog.get_logger(__name__)

_MAX_CACHED = 10_000  # distinct keys held at once; beyond that the cache starts over
_DUMMY_SALT = "0" * 32


Clock = Callable[[], dt.datetime]


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def principal_of(stored: StoredKey) -> Principal:
    """The caller a stored key makes, with its own limits and its team's."""
    info, team = stored.info, stored.team
    return Principal(
        key_id=info.id,
        scope=Scope(info.scope),
        team=info.team,
        limits=Limits(budgets=info.budgets, rpm=info.rpm, tpm=info.tpm),
        team_limits=(
            NO_LIMITS if team is None else Limits(budgets=team.budgets, rpm=team.rpm, tpm=team.tpm)
        ),
        allowed_models=None if info.allowed_models is None else tuple(info.allowed_models),
        allowed_patterns=None if info.allowed_patterns is None else tuple(info.allowed_patterns),
        expires_at=info.expires_at,
    )


class Authenticator:
    def __init__(
        self,
        repository: ApiKeyRepository,
        server_secret: bytes,
        *,
        cache_seconds: float,
        disabled: bool,
        clock: Clock = _utc_now,
    ) -> None:
        self.repository = repository
        self.clock = clock  # expiry is judged by it (tests move time without sleeping)
        self.disabled = disabled
        self._secret = server_secret
        self._cache_seconds = cache_seconds
        self._verified: dict[str, tuple[Principal, float]] = {}
        self._verifying: dict[str, asyncio.Task[Principal]] = {}  # lookups in flight, shared
        self._last_used: dict[str, dt.datetime] = {}

    @staticmethod
    def presented(authorization: str | None, api_key: str | None) -> str | None:
        """The credentials a request presents: `Authorization`, or else `x-api-key` (what the
        Anthropic SDK sends) read as a bearer key."""
        if authorization or not api_key:
            return authorization
        return f"Bearer {api_key}"

    async def authenticate(self, authorization: str | None) -> Principal:
        """The caller behind an `Authorization: Bearer` header; raises 401 without a valid key."""
        if self.disabled:
            return ANONYMOUS_ADMIN
        principal = await self._authenticate(authorization)
        now = self.clock()
        if principal.expired(now):
            log.info("api_key_expired", key_id=principal.key_id)
            raise Unauthenticated(
                f"The API key expired at {principal.expires_at:%Y-%m-%dT%H:%M:%SZ}; ask an "
                "admin to extend it (PATCH /v1/keys/{id} with a later expires_at) or for a new key."
            )
        if principal.key_id is not None:
            self._last_used[principal.key_id] = now
        request_facts().key_id = principal.key_id
        return principal

    @staticmethod
    def require(principal: Principal, needed: Scope) -> None:
        """Raises 403 unless the principal's scope allows `needed`."""
        if not principal.scope.allows(needed):
            raise Forbidden(
                f"This key has scope {principal.scope.value!r}; this route needs "
                f"{needed.value!r}. Ask an admin for a key with that scope."
            )

    async def _authenticate(self, authorization: str | None) -> Principal:
        scheme, _, text = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not text.strip():
            raise Unauthenticated(
                "This route needs an API key: send `Authorization: Bearer <key>` or "
                "`x-api-key: <key>` (`genai keys create` makes one)."
            )
        text = text.strip()
        fingerprint = hashlib.sha256(text.encode()).hexdigest()
        cached = self._verified.get(fingerprint)
        if cached is not None and cached[1] > time.monotonic():
            return cached[0]
        verifying = self._verifying.get(fingerprint)
        if verifying is None:
            verifying = asyncio.ensure_future(self._verify(text))
            self._verifying[fingerprint] = verifying
            verifying.add_done_callback(functools.partial(self._verified_one, fingerprint))
        # Shielded: one caller going away does not cancel the lookup the others wait for.
        return await asyncio.shield(verifying)

    def _verified_one(self, fingerprint: str, verifying: asyncio.Task[Principal]) -> None:
        """A shared lookup ended: cache what it found (its error is read here, so one nobody
        awaits any more is not reported as never retrieved)."""
        self._verifying.pop(fingerprint, None)
        if verifying.cancelled() or verifying.exception() is not None:
            return
        if len(self._verified) >= _MAX_CACHED:
            self._verified.clear()
        self._verified[fingerprint] = (verifying.result(), time.monotonic() + self._cache_seconds)

    async def _verify(self, text: str) -> Principal:
        refused = Unauthenticated("The API key is not valid (unknown, malformed or revoked).")
        presented = keys.parse(text)
        if presented is None:
            raise refused
        stored = await self.repository.find(presented.id)
        # Compare even for an unknown id, so timing does not tell which ids exist.
        salt, digest = (stored.salt, stored.digest) if stored else (_DUMMY_SALT, "")
        valid = keys.matches(self._secret, presented, salt, digest)
        if stored is None or not valid or stored.info.revoked_at is not None:
            log.info("api_key_refused", key_id=presented.id)
            raise refused
        return principal_of(stored)

    async def principal_for(self, key_id: str | None) -> Principal | None:
        """The caller a console session acts as, re-read so that revoking or expiring its key
        ends the session; None then. (`None` is the session of a service with auth disabled.)"""
        if self.disabled:
            return ANONYMOUS_ADMIN
        if key_id is None:
            return None
        stored = await self.repository.find(key_id)
        if stored is None or stored.info.revoked_at is not None:
            return None
        principal = principal_of(stored)
        if principal.expired(self.clock()):
            return None
        self._last_used[key_id] = self.clock()
        request_facts().key_id = key_id
        return principal

    async def create(self, new: ApiKeyCreate) -> ApiKeyCreated:
        """Mint a key with the scope, name and limits asked for; its team must exist."""
        self._not_expired(new.expires_at)
        minted = keys.mint(self._secret)
        info = await self.repository.add(
            key_id=minted.id, salt=minted.salt, digest=minted.digest, new=new
        )
        log.info("api_key_created", key_id=info.id, scope=info.scope, team=info.team)
        return ApiKeyCreated(**info.model_dump(), key=minted.text)

    async def get_key(self, key_id: str) -> ApiKeyInfo:
        return await self.repository.get(key_id)

    async def list_keys(self) -> list[ApiKeyInfo]:
        return await self.repository.list()

    async def update(self, key_id: str, changes: ApiKeyUpdate) -> ApiKeyInfo:
        """Change what the caller sent; this process stops using the key's old limits at once,
        others within `cache_seconds`."""
        if "expires_at" in changes.model_fields_set:
            self._not_expired(changes.expires_at)
        info = await self.repository.update(key_id, changes)
        self._forget(lambda principal: principal.key_id == key_id)
        log.info("api_key_updated", key_id=key_id, fields=sorted(changes.model_fields_set))
        return info

    async def revoke(self, key_id: str) -> ApiKeyInfo:
        info = await self.repository.revoke(key_id)
        self._forget(lambda principal: principal.key_id == key_id)
        log.info("api_key_revoked", key_id=key_id)
        return info

    def forget_team(self, team: str) -> None:
        """A team's limits changed: its keys are looked up again (in this process) on their next
        request."""
        self._forget(lambda principal: principal.team == team)

    def _forget(self, which: Callable[[Principal], bool]) -> None:
        self._verified = {fp: entry for fp, entry in self._verified.items() if not which(entry[0])}

    def _not_expired(self, expires_at: dt.datetime | None) -> None:
        """A key given an expiry that already passed could never be used: a typo, refused."""
        if expires_at is not None and expires_at <= self.clock():
            raise InvalidRequest(
                [
                    FieldProblem(
                        loc=["body", "expires_at"],
                        msg=f"{expires_at:%Y-%m-%dT%H:%M:%SZ} has passed; give a later instant "
                        "(or revoke the key)",
                        type="value_error",
                    )
                ]
            )

    async def create_first_admin_key(self) -> ApiKeyCreated | None:
        """On a key store that never had a key, make one admin key (handed over once by
        app/auth/first_key.py)."""
        if self.disabled or not await self.repository.is_empty():
            return None
        return await self.create(ApiKeyCreate(scope=Scope.admin.value, name="first-admin"))

    async def save_last_use(self) -> None:
        """Write the gathered last-use times; on failure they are kept for the next try."""
        used, self._last_used = self._last_used, {}
        try:
            await self.repository.record_use(used)
        except BaseException:
            self._last_used = {**used, **self._last_used}
            raise
