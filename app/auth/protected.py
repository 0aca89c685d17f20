"""Which paths need a key: every `/v1` route. The authentication middleware enforces it and the
OpenAPI document names its 401 and 403 from the same rule."""

from __future__ import annotations

PROTECTED_PREFIX = "/v1"


def is_protected(path: str) -> bool:
    return path == PROTECTED_PREFIX or path.startswith(PROTECTED_PREFIX + "/")
