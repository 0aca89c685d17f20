"""Values every backend stores: characters one of them refuses are escaped, and the row says so.

PostgreSQL refuses NUL in text and JSONB; no UTF-8 driver can encode a lone surrogate (SQLite
raises, asyncpg raises). Either, in one provider answer, would make a write fail for good, so
each such character becomes the literal text ``\\uXXXX`` (``a\\x00b`` is stored as ``a\\u0000b``),
in plain strings, in nested JSON and in dict keys alike. The escape is ambiguous only with text
that already contained ``\\u0000`` literally, which is why the row lists the escaped fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REFUSED = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _storable_value(value: Any) -> tuple[Any, bool]:
    """The value with refused characters escaped, and whether there were any."""
    if isinstance(value, str):
        escaped, count = _REFUSED.subn(_escape, value)
        return escaped, count > 0
    if isinstance(value, dict):
        changed = False
        result = {}
        for key, inner in value.items():
            new_key, key_changed = _storable_value(key)
            new_inner, inner_changed = _storable_value(inner)
            result[new_key] = new_inner
            changed = changed or key_changed or inner_changed
        return result, changed
    if isinstance(value, list | tuple):
        items = [_storable_value(inner) for inner in value]
        return [item for item, _ in items], any(changed for _, changed in items)
    return value, False


def storable(row: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The row as every backend accepts it, and the names of the fields that were escaped."""
    result: dict[str, Any] = {}
    escaped: list[str] = []
    for name, value in row.items():
        result[name], changed = _storable_value(value)
        if changed:
            escaped.append(name)
    return result, escaped
