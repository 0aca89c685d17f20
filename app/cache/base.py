"""The ResponseCache protocol every backend implements, and the one failure policy they share."""

from __future__ import annotations

from typing import Literal, Protocol

from app.cache.answer import CachedAnswer

CacheBackend = Literal["memory", "redis"]


class ResponseCache(Protocol):
    """Answers by cache key. Never raises on the request path: a backend that is down, slow or
    holding a corrupt entry answers a miss (counted as `error`), and a failed store is skipped,
    so the cache can only ever save a provider call, never fail a completion.

    `get` counts every lookup in `genai_cache_requests_total{result=hit|miss|error}` itself.
    """

    @property
    def name(self) -> CacheBackend: ...

    async def get(self, key: str) -> CachedAnswer | None: ...

    async def put(self, key: str, answer: CachedAnswer) -> None: ...

    async def ping(self) -> bool:
        """Whether the backend answers now (for /readyz; never raises)."""
        ...

    async def aclose(self) -> None: ...
