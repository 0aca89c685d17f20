"""MemoryCache: a least-recently-used map with a time to live, private to this process."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import structlog

from app.cache.answer import CachedAnswer, UnreadableEntry, decode_answer, encode_answer
from app.cache.base import CacheBackend
from app.observability.metrics import Metrics

log = structlog.get_logger(__name__)


class MemoryCache:
    """LRU + TTL over an OrderedDict. No method awaits between reading and writing the map, so
    one event loop needs no lock.

    Entries are kept as their encoded bytes, not as objects: a hit then hands out a fresh
    CachedAnswer (its `parsed` JSON shared with no earlier caller), and both backends go
    through the same encoding, so one cannot store what the other could not.
    """

    def __init__(
        self,
        *,
        max_entries: int,
        ttl_seconds: float,
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # key → expiry, value
        self._max_entries = max_entries
        self._ttl = ttl_seconds
        self._metrics = metrics
        self._clock = clock

    @property
    def name(self) -> CacheBackend:
        return "memory"

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> CachedAnswer | None:
        entry = self._entries.get(key)
        # The stored age checked against the TTL: the expiry was set from it when stored, on a
        # monotonic clock, and nothing outside this process can move it (unlike a Redis TTL).
        if entry is None or entry[0] <= self._clock():
            if entry is not None:
                self._drop(key)
            self._metrics.cache_requests.labels("miss").inc()
            return None
        self._entries.move_to_end(key)
        try:
            answer = decode_answer(entry[1])
        except UnreadableEntry:  # only after an upgrade changed the shape in place
            self._drop(key)
            self._metrics.cache_requests.labels("error").inc()
            return None
        self._metrics.cache_requests.labels("hit").inc()
        return answer

    async def put(self, key: str, answer: CachedAnswer) -> None:
        try:
            value = encode_answer(answer)
        except TypeError as exc:
            self._metrics.cache_write_failures.inc()
            log.warning("cache_store_skipped", cache="memory", reason=str(exc))
            return
        self._entries[key] = (self._clock() + self._ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)
        self._metrics.cache_entries.set(len(self._entries))

    def _drop(self, key: str) -> None:
        self._entries.pop(key, None)
        self._metrics.cache_entries.set(len(self._entries))

    async def ping(self) -> bool:
        return True

    async def aclose(self) -> None:
        self._entries.clear()
        self._metrics.cache_entries.set(0)
