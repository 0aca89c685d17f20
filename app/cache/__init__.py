"""The response cache: a repeated request answered without a provider call.

Opt-in per pattern (front-matter `cache: true`) or per request (`"cache": true`; `false`
bypasses). In-memory LRU with a TTL by default; Redis, sealed at rest, with GENAI_REDIS_URL.
The cache never fails a completion: down, slow or corrupt means a miss.

Entries belong to the API key that stored them (GENAI_CACHE__SCOPE=key, the default): an entry
shared by every key would tell any caller, by a fast answer or `cache: hit`, that another sent
the same prompt. `shared` is an explicit opt-in for a deployment whose keys are one tenant.
"""

from app.cache.answer import CachedAnswer
from app.cache.base import CacheBackend, ResponseCache
from app.cache.factory import build_cache
from app.cache.key import CACHE_KEY_PREFIX, cache_key
from app.cache.memory import MemoryCache

__all__ = [
    "CACHE_KEY_PREFIX",
    "CacheBackend",
    "CachedAnswer",
    "MemoryCache",
    "ResponseCache",
    "build_cache",
    "cache_key",
]
