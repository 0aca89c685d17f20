"""The audit chain's hashes and checkpoint claims (issue 20). Pure: no I/O.

content_sha256 = "sha256:" + hex SHA-256 of canonical JSON of the record as stored: every
    column but `chain_seq`, datetimes as ISO-8601 UTC with microseconds, bytes as base64,
    JSON columns as their values (keys sorted, so JSONB's reordering changes nothing)
entry_sha256 = "sha256:" + hex SHA-256 of canonical JSON of
    {"seq", "kind", "ref", "record_at", "content_sha256", "prev_sha256"}
checkpoint claims = canonical JSON of {"seq", "head_sha256", "signed_at", "reason",
    "detail", "kid", "alg"}, signed with Ed25519 like an envelope's claims
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from typing import Any

from app.tracking.fingerprints import canonical_json, sha256_hex
from app.tracking.signing import utf8

GENESIS = "sha256:" + "0" * 64
CHAIN_COLUMN = "chain_seq"  # the record's link to its entry: never part of its content


def utc_iso(moment: dt.datetime) -> str:
    """One spelling of a moment on every backend: UTC, microseconds, `+00:00`."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)
    return aware.astimezone(dt.UTC).isoformat(timespec="microseconds")


def _stored(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return utc_iso(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return value


def content_sha256(row: Mapping[str, Any]) -> str:
    """The hash of a record as read back: the same on SQLite and PostgreSQL for the same row."""
    content = {name: _stored(value) for name, value in row.items() if name != CHAIN_COLUMN}
    return sha256_hex(utf8(canonical_json(content)))


def entry_sha256(
    *, seq: int, kind: str, ref: str, record_at: dt.datetime, content: str, prev: str
) -> str:
    body = {
        "seq": seq,
        "kind": kind,
        "ref": ref,
        "record_at": utc_iso(record_at),
        "content_sha256": content,
        "prev_sha256": prev,
    }
    return sha256_hex(utf8(canonical_json(body)))


def checkpoint_claims(
    *,
    seq: int,
    head_sha256: str,
    signed_at: dt.datetime,
    reason: str,
    detail: Mapping[str, Any],
    kid: str,
    alg: str,
) -> bytes:
    """The exact bytes a checkpoint's signature covers."""
    claims = {
        "seq": seq,
        "head_sha256": head_sha256,
        "signed_at": utc_iso(signed_at),
        "reason": reason,
        "detail": dict(detail),
        "kid": kid,
        "alg": alg,
    }
    return utf8(canonical_json(claims))
