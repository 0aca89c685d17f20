"""Keyset pages, newest first on (at, id): what the admin event log and the job list share.

A page starts strictly after the last row of the one before, so rows written while someone
pages never shift or repeat what they see. The cursor handed out is opaque: URL-safe base64 of
the JSON `[at, id]` of that last row.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, or_

from app.errors import InvalidCursor

T = TypeVar("T")
MAX_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Position:
    """Where a page ended: the (at, id) of its last row."""

    at: dt.datetime
    id: str


def older_than(at: Any, row_id: Any, after: Position) -> ColumnElement[bool]:
    """Rows after `after` in newest-first order. The plain `at <= …` bound is the one an index
    on (…, at, id) seeks to; the OR alone would make some planners scan from the newest row."""
    return and_(at <= after.at, or_(at < after.at, and_(at == after.at, row_id < after.id)))


def newest_first(
    query: Select[Any],
    at: Any,
    row_id: Any,
    *,
    equal: Iterable[tuple[Any, Any]],
    since: dt.datetime | None,
    until: dt.datetime | None,
    after: Position | None,
) -> Select[Any]:
    """`query` newest first on (at, id): narrowed by each (column, value) whose value is given,
    to `since <= at < until`, and to the rows after `after`."""
    query = query.order_by(at.desc(), row_id.desc())
    for column, value in equal:
        if value is not None:
            query = query.where(column == value)
    if since is not None:
        query = query.where(at >= since)
    if until is not None:
        query = query.where(at < until)
    if after is not None:
        query = query.where(older_than(at, row_id, after))
    return query


def encode_cursor(at: dt.datetime, row_id: str) -> str:
    raw = json.dumps([at.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Position:
    """The position a cursor names; InvalidCursor for anything this service did not hand out."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, row_id = json.loads(raw)
        when = dt.datetime.fromisoformat(at)
        # An id as the service mints them: printable, short (a NUL would reach the database).
        if when.tzinfo is None or not isinstance(row_id, str) or not row_id.isprintable():
            raise ValueError(cursor)
        if len(row_id) > MAX_ID_CHARS:
            raise ValueError(cursor)
    except (ValueError, TypeError, binascii.Error):
        raise InvalidCursor() from None
    return Position(at=when, id=row_id)


def cut(
    found: Sequence[T], limit: int, position: Callable[[T], tuple[dt.datetime, str]]
) -> tuple[list[T], str | None]:
    """A page from `limit + 1` rows read: its rows, and the cursor after them if there are more."""
    rows = list(found[:limit])
    more = len(found) > limit
    return rows, encode_cursor(*position(rows[-1])) if more and rows else None
