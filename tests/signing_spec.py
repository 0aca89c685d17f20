"""An independent verifier of signed envelopes, written from docs/provenance-and-audit.md
("Verifying an envelope") with only the standard library and `cryptography`'s primitives: it
never imports the service's signing code, so a test that passes here proves the written spec
is enough to verify."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def canonical(value: Any) -> bytes:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return re.sub("[\ud800-\udfff]", "\ufffd", text).encode()  # lone surrogates → U+FFFD


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def arguments_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def response_hash(*, text: str, tool_calls: list[dict[str, Any]], parsed: Any) -> str:
    body = {"text": text, "tool_calls": tool_calls, "parsed": parsed}
    return "sha256:" + hashlib.sha256(canonical(body)).hexdigest()


def check(
    *,
    signature: dict[str, Any],
    job_id: str,
    provenance: dict[str, Any],
    response_sha256: str,
    keys: dict[str, Any],
) -> str | None:
    """None when valid; else which check failed: "unknown key", "response", "signature"."""
    found = [k for k in keys["keys"] if k["kid"] == signature["kid"]]
    if not found:
        return "unknown key"
    raw = unb64url(found[0]["public_key"])
    assert hashlib.sha256(raw).hexdigest()[:16] == found[0]["kid"]  # the kid names the key
    if response_sha256 != signature["response_sha256"]:
        return "response"
    claims = {
        "alg": signature["alg"],
        "kid": signature["kid"],
        "job_id": job_id,
        "model": signature["model"],
        "provenance": provenance,
        "response_sha256": signature["response_sha256"],
        "signed_at": signature["signed_at"],
    }
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(
            unb64url(signature["value"]), canonical(claims)
        )
    except InvalidSignature:
        return "signature"
    return None


def check_envelope(envelope: dict[str, Any], keys: dict[str, Any]) -> str | None:
    """A native envelope (`POST /v1/completions`, or the stream's `envelope` event)."""
    response = envelope["response"]
    calls = [
        {"id": c["id"], "name": c["name"], "arguments": arguments_value(c["arguments"])}
        for c in response.get("tool_calls", [])
    ]
    digest = response_hash(text=response["text"], tool_calls=calls, parsed=envelope.get("parsed"))
    return check(
        signature=envelope["signature"],
        job_id=envelope["job_id"],
        provenance=envelope["provenance"],
        response_sha256=digest,
        keys=keys,
    )
