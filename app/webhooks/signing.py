"""The signature a receiver checks: `x-genai-signature: t=<unix>,v1=<hex>`.

`v1` is HMAC-SHA256 with the shared secret over `f"{t}.{body}"` (the exact bytes posted), so a
receiver proves both who sent the event and when; rejecting an old `t` stops a replay of a
captured request. docs/webhooks.md shows a receiver's check.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "x-genai-signature"
EVENT_HEADER = "x-genai-event"
EVENT_ID_HEADER = "x-genai-event-id"
DEFAULT_TOLERANCE_SECONDS = 300


def signature(secret: bytes, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of `f"{timestamp}.{body}"`."""
    return hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: bytes, body: bytes, *, timestamp: int | None = None) -> str:
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature(secret, body, t)}"


def headers(
    secret: bytes, body: bytes, *, event_type: str, event_id: str, timestamp: int | None = None
) -> dict[str, str]:
    """Everything a delivery carries besides its body."""
    return {
        "content-type": "application/json",
        SIGNATURE_HEADER: signature_header(secret, body, timestamp=timestamp),
        EVENT_HEADER: event_type,
        EVENT_ID_HEADER: event_id,
    }


def verify(
    secret: bytes,
    body: bytes,
    header: str,
    *,
    now: float | None = None,
    tolerance_seconds: int = DEFAULT_TOLERANCE_SECONDS,
) -> bool:
    """What a receiver does: a well-formed header, a recent `t`, a matching `v1`."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_seconds:
        return False
    return hmac.compare_digest(parts.get("v1", ""), signature(secret, body, timestamp))
