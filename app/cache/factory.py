"""build_cache: the response cache the settings ask for."""

from __future__ import annotations

from app.cache.base import ResponseCache
from app.cache.memory import MemoryCache
from app.config import Settings
from app.observability.metrics import Metrics


def build_cache(settings: Settings, *, metrics: Metrics, data_key: bytes) -> ResponseCache:
    """Redis when GENAI_REDIS_URL is set (shared by replicas, sealed with a key derived from
    `data_key`, which replicas must share through GENAI_DATA_KEY), else in-process memory.

    Raises ConfigurationError for a URL that is not a Redis URL. Connects lazily: a Redis that is
    down at start only means misses until it is back.
    """
    cache = settings.cache
    if settings.redis_url is None:
        return MemoryCache(
            max_entries=cache.max_entries, ttl_seconds=cache.ttl_seconds, metrics=metrics
        )
    # Imported here: a process without Redis configured never loads the client.
    from app.cache.redis_cache import RedisCache, RedisOptions

    options = RedisOptions(
        ttl_seconds=cache.ttl_seconds, timeout_seconds=cache.redis_timeout_seconds
    )
    return RedisCache.from_url(
        settings.redis_url.get_secret_value(), data_key=data_key, options=options, metrics=metrics
    )
