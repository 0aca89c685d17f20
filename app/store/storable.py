"""Values every backend stores: characters one of them refuses are escaped, and the row says so.

PostgreSQL refuses NUL in text and JSONB; no UTF-8 driver can encode a lone surrogate (SQLite
raises, asyncpg raises). Either, in one provider answer, would make a write fail for good, so
each such character becomes the literal text ``\\uXXXX`` (``a\\x00b`` is stored as ``a\\u0000b``),
in plain strings, in nested JSON and in dict keys alike, and in a typed value (a pydantic model
in a JSON column), which is scanned in place and dumped to JSON only when it needs escaping. The
escape is ambiguous only with text that already contained ``\\u0000`` literally, which is why
the row lists the escaped fields.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

_REFUSED = re.compile("[\x00\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _needs_escape(value: Any) -> bool:
    """Whether any string in the value (keys included) holds a refused character; no copies."""
    if isinstance(value, str):
        return _REFUSED.search(value) is not None
    if isinstance(value, dict):
        return any(_needs_escape(key) or _needs_escape(inner) for key, inner in value.items())
    if isinstance(value, list | tuple):
        return any(_needs_escape(inner) for inner in value)
    if value is None or isinstance(value, int | float | bytes | dt.datetime):
        return False  # before the model check, which costs more (pydantic's is an ABC check)
    if isinstance(value, BaseModel):
        return _needs_escape(value.__dict__)  # its fields, without dumping it
    return False


def _escaped(value: Any) -> Any:
    """The value with refused characters escaped, rebuilt only where needed."""
    if isinstance(value, str):
        return _REFUSED.sub(_escape, value)
    if isinstance(value, dict):
        return {_escaped(key): _escaped(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_escaped(inner) for inner in value]
    if isinstance(value, BaseModel):
        return _escaped(value.model_dump())  # a typed value comes back as its JSON
    return value


def _storable_value(value: Any) -> tuple[Any, bool]:
    """The value with refused characters escaped, and whether there were any.

    Nearly every value is clean, so it is scanned first and returned as is (no copy).
    """
    if not _needs_escape(value):
        return value, False
    return _escaped(value), True


def storable(row: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The row as every backend accepts it, and the names of the fields that were escaped."""
    result: dict[str, Any] = {}
    escaped: list[str] = []
    for name, value in row.items():
        result[name], changed = _storable_value(value)
        if changed:
            escaped.append(name)
    return result, escaped
