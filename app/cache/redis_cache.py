"""RedisCache: answers shared by every replica, sealed at rest, never in a completion's way.

Every command runs under a short timeout (GENAI_CACHE__REDIS_TIMEOUT_SECONDS). A failure counts
as a miss and pauses Redis use for a few seconds, so while Redis is down or stalled requests go
straight upstream instead of each paying the timeout first; the first failure logs one warning
and the recovery one line, rather than a warning per request.

Redis's own expiry is not trusted to end an entry: anyone who can write to Redis can remove it
(PERSIST). Each read checks the entry's sealed storage time against the configured TTL too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from app.cache.answer import (
    CachedAnswer,
    UnreadableEntry,
    decode_answer,
    encode_answer,
    outlived,
)
from app.cache.base import CacheBackend
from app.cache.seal import AnswerSealer
from app.errors import ConfigurationError
from app.observability.metrics import Metrics

log = structlog.get_logger(__name__)

# What an unreachable, refusing or slow Redis raises (asyncio.timeout raises TimeoutError).
_UNAVAILABLE = (RedisError, OSError, TimeoutError)
PAUSE_AFTER_FAILURE_SECONDS = 5.0
_SCHEMES = frozenset({"redis", "rediss", "unix"})


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True, slots=True)
class RedisOptions:
    """How long an entry lives, how long a command may take, how long a failure pauses Redis."""

    ttl_seconds: float
    timeout_seconds: float
    pause_after_failure_seconds: float = PAUSE_AFTER_FAILURE_SECONDS


def redis_client(url: str, *, timeout_seconds: float, decode_responses: bool) -> Redis:
    """A client for GENAI_REDIS_URL (the cache's and the quota counters'): it connects lazily (a
    Redis down at start delays nothing) and never retries by itself, so its user's own timeout
    is the only policy. ConfigurationError for a URL this service cannot use."""
    # Checked here rather than read from redis-py's message; the URL is never echoed, since it
    # may hold a password.
    if urlsplit(url).scheme not in _SCHEMES:
        raise ConfigurationError(
            "GENAI_REDIS_URL", "must start with redis://, rediss:// or unix://"
        )
    try:
        return Redis.from_url(
            url,
            socket_connect_timeout=timeout_seconds,
            socket_timeout=timeout_seconds,
            retry=Retry(NoBackoff(), 0),
            decode_responses=decode_responses,
        )
    except ValueError:  # a bad port or database number
        raise ConfigurationError("GENAI_REDIS_URL", "is not a valid Redis URL") from None


class RedisCache:
    def __init__(
        self,
        client: Redis,
        *,
        sealer: AnswerSealer,
        options: RedisOptions,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], dt.datetime] = _utc_now,
    ) -> None:
        self._client = client
        self._sealer = sealer
        self._ttl_seconds = options.ttl_seconds
        self._ttl_ms = max(1, round(options.ttl_seconds * 1000))
        self._timeout = options.timeout_seconds
        self._metrics = metrics
        self._pause = options.pause_after_failure_seconds
        self._clock = clock  # monotonic, for the pause
        self._now = now  # wall clock, as the stored time of an entry is (replicas compare it)
        self._paused_until: float | None = None  # set while Redis is considered down

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        data_key: bytes,
        options: RedisOptions,
        metrics: Metrics,
        now: Callable[[], dt.datetime] = _utc_now,
    ) -> RedisCache:
        """A client that connects lazily (a Redis down at start delays nothing) and never
        retries by itself: the cache's own timeout and pause are the only policy. `now` is the
        wall clock entries' ages are measured by."""
        client = redis_client(url, timeout_seconds=options.timeout_seconds, decode_responses=False)
        if client.connection_pool.connection_kwargs.get("decode_responses"):  # the URL's query wins
            raise ConfigurationError(
                "GENAI_REDIS_URL", "remove decode_responses: sealed answers are binary"
            )
        return cls(
            client,
            sealer=AnswerSealer(data_key),
            options=options,
            metrics=metrics,
            now=now,
        )

    @property
    def name(self) -> CacheBackend:
        return "redis"

    async def get(self, key: str) -> CachedAnswer | None:
        if self._paused():
            self._metrics.cache_requests.labels("error").inc()
            return None
        try:
            async with asyncio.timeout(self._timeout):
                sealed: bytes | str | None = await self._client.get(key)
        except _UNAVAILABLE as exc:
            self._failed("get", exc)
            self._metrics.cache_requests.labels("error").inc()
            return None
        self._succeeded()
        if sealed is None:
            self._metrics.cache_requests.labels("miss").inc()
            return None
        try:
            if isinstance(sealed, str):  # from_url refuses decode_responses; typing allows it
                raise UnreadableEntry("the Redis client decodes responses; sealed values are bytes")
            answer = decode_answer(self._sealer.open(key, sealed))
        except UnreadableEntry as exc:
            log.warning("cache_entry_unreadable", cache="redis", reason=str(exc))
            self._metrics.cache_requests.labels("error").inc()
            return None
        if self._outlived(answer):
            self._metrics.cache_requests.labels("miss").inc()
            return None
        self._metrics.cache_requests.labels("hit").inc()
        return answer

    def _outlived(self, answer: CachedAnswer) -> bool:
        """Stored before the TTL began; the warning says someone kept it alive. It is left for
        the next store of the same request to overwrite."""
        now = self._now()
        if not outlived(answer, self._ttl_seconds, now):
            return False
        log.warning(
            "cache_entry_outlived_ttl",
            cache="redis",
            age_seconds=round((now - answer.stored_at).total_seconds()),
            ttl_seconds=self._ttl_seconds,
        )
        return True

    async def put(self, key: str, answer: CachedAnswer) -> None:
        if self._paused():
            self._metrics.cache_write_failures.inc()
            return
        try:
            value = self._sealer.seal(key, encode_answer(answer))
        except TypeError as exc:
            self._metrics.cache_write_failures.inc()
            log.warning("cache_store_skipped", cache="redis", reason=str(exc))
            return
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.set(key, value, px=self._ttl_ms)
        except _UNAVAILABLE as exc:
            self._failed("put", exc)
            self._metrics.cache_write_failures.inc()
            return
        self._succeeded()

    async def ping(self) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                await self._client.ping()
        except _UNAVAILABLE:
            return False
        return True

    async def aclose(self) -> None:
        await self._client.aclose()

    def _paused(self) -> bool:
        return self._paused_until is not None and self._clock() < self._paused_until

    def _failed(self, operation: str, exc: BaseException) -> None:
        if self._paused_until is None:
            log.warning(
                "cache_unavailable",
                cache="redis",
                operation=operation,
                error=f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__,
                retry_in_seconds=self._pause,
                hint="completions go upstream until Redis answers again",
            )
        self._paused_until = self._clock() + self._pause

    def _succeeded(self) -> None:
        if self._paused_until is not None:
            self._paused_until = None
            log.info("cache_recovered", cache="redis")
