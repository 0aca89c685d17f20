"""Which paths need a key: every `/v1` route. The authentication middleware enforces it and the
OpenAPI document names its 401 and 403 from the same rule."""

from __future__ import annotations

PROTECTED_PREFIX = "/v1"
# The one open `/v1` route: the public keys that verify envelope signatures (issue 20).
OPEN_PATHS = frozenset({PROTECTED_PREFIX + "/provenance/keys"})


def is_protected(path: str) -> bool:
    if path in OPEN_PATHS:
        return False
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")
