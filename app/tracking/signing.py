"""Signed envelopes: Ed25519 over a canonical encoding of what an answer claims. Pure: no I/O.

The encoding is written out in docs/provenance-and-audit.md ("Verifying an envelope") so that a
third party can verify without this code:

    response_sha256 = "sha256:" + hex SHA-256 of canonical JSON of
        {"text": str, "tool_calls": [{"id", "name", "arguments": JSON value}], "parsed": any}
    claims = canonical JSON (UTF-8) of
        {"alg", "kid", "job_id", "model", "provenance", "response_sha256", "signed_at"}
    value = base64url (no padding) of Ed25519(claims)

Canonical JSON is `app.tracking.canonical_json`: sorted keys, no whitespace, non-ASCII as is.
A tool call's arguments are hashed as the JSON value they spell (the OpenAI door sends them as
text, the Anthropic door as an object: both reduce to the same value), or as the text itself
when it is not JSON.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from app.schemas import CompletionEnvelope, Signature, SigningKey, SigningKeys
from app.tracking.fingerprints import canonical_json, sha256_hex

ALG = "Ed25519"
PUBLIC_KEY_BYTES = 32


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def from_b64url(text: str) -> bytes:
    """Raises ValueError on anything but base64url (padding optional)."""
    try:
        return base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("is not base64url") from None


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def key_id(key: Ed25519PublicKey) -> str:
    """First 16 hex digits of SHA-256 of the raw public key: names a key without a registry."""
    return hashlib.sha256(raw_public_key(key)).hexdigest()[:16]


def public_key_of(text: str) -> Ed25519PublicKey:
    """A public key from base64url of its raw 32 bytes; ValueError otherwise."""
    raw = from_b64url(text)
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ValueError(f"must be base64url of {PUBLIC_KEY_BYTES} bytes, got {len(raw)} bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def tool_arguments(arguments: str) -> Any:
    """The JSON value a tool call's arguments text spells; the text itself when it is not JSON."""
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8(text: str) -> bytes:
    """UTF-8, with each lone surrogate (an answer may hold one; JSON can carry it escaped) as
    U+FFFD, as the WHATWG encoder (JavaScript's TextEncoder) writes it."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text).encode("utf-8")


def response_sha256(*, text: str, tool_calls: Iterable[Mapping[str, Any]], parsed: Any) -> str:
    """`tool_calls`: each {"id", "name", "arguments"} with arguments as a JSON value."""
    calls = [{"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in tool_calls]
    body = {"text": text, "tool_calls": calls, "parsed": parsed}
    return sha256_hex(utf8(canonical_json(body)))


def envelope_response_sha256(envelope: CompletionEnvelope) -> str:
    response = envelope.response
    calls = [
        {"id": c.id, "name": c.name, "arguments": tool_arguments(c.arguments)}
        for c in response.tool_calls
    ]
    return response_sha256(text=response.text, tool_calls=calls, parsed=envelope.parsed)


def claims_bytes(
    *, signature: Signature | Mapping[str, Any], job_id: str, provenance: Mapping[str, Any]
) -> bytes:
    """The exact bytes signed: everything but `value`, plus the job id and the provenance."""
    fields = signature.model_dump() if isinstance(signature, Signature) else signature
    claims = {
        "alg": fields["alg"],
        "kid": fields["kid"],
        "job_id": job_id,
        "model": fields["model"],
        "provenance": provenance,
        "response_sha256": fields["response_sha256"],
        "signed_at": fields["signed_at"],
    }
    # The claims are JSON-native already (the provenance as its JSON), so the canonical form is
    # json.dumps' own: the same bytes as `canonical_json`, without its walk over the values.
    return utf8(json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=False))


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class VerificationFailed(Exception):
    """Why an envelope does not verify: one line a person can act on."""


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Public keys by id: what verifies. `current` is the id new envelopes are signed with."""

    keys: Mapping[str, Ed25519PublicKey]
    current: str | None = None

    @classmethod
    def of(cls, published: SigningKeys) -> KeyRing:
        """From `GET /v1/provenance/keys`' answer; ValueError on a bad key."""
        keys: dict[str, Ed25519PublicKey] = {}
        for entry in published.keys:
            key = public_key_of(entry.public_key)
            if key_id(key) != entry.kid:
                raise ValueError(f"key {entry.kid}: its kid is not its public key's")
            keys[entry.kid] = key
        current = next((k.kid for k in published.keys if k.current), None)
        return cls(keys=keys, current=current)

    def published(self) -> SigningKeys:
        """Current first, then the previous keys in the order configured."""
        return SigningKeys(
            keys=[
                SigningKey(
                    kid=kid, public_key=b64url(raw_public_key(key)), current=kid == self.current
                )
                for kid, key in sorted(self.keys.items(), key=lambda item: item[0] != self.current)
            ]
        )

    def verify(
        self, *, signature: Signature, job_id: str, provenance: Mapping[str, Any], response: str
    ) -> None:
        """`response`: the response_sha256 recomputed from what was returned. Raises
        VerificationFailed naming the first thing that fails."""
        key = self.keys.get(signature.kid)
        if key is None:
            raise VerificationFailed(f"unknown key id {signature.kid!r}")
        if response != signature.response_sha256:
            raise VerificationFailed("response_sha256 does not match the response")
        try:
            value = from_b64url(signature.value)
            key.verify(
                value, claims_bytes(signature=signature, job_id=job_id, provenance=provenance)
            )
        except (ValueError, InvalidSignature):
            raise VerificationFailed("signature does not match") from None

    def verify_bytes(self, *, kid: str, data: bytes, value: str) -> None:
        """Other signed claims (the audit chain's checkpoints); raises VerificationFailed."""
        key = self.keys.get(kid)
        if key is None:
            raise VerificationFailed(f"unknown key id {kid!r}")
        try:
            key.verify(from_b64url(value), data)
        except (ValueError, InvalidSignature):
            raise VerificationFailed("signature does not match") from None


class Signer:
    """Signs with the current key; verifies with it and the previous (rotated-out) ones."""

    def __init__(
        self, current: Ed25519PrivateKey, previous: Sequence[Ed25519PublicKey] = ()
    ) -> None:
        self._key = current
        public = current.public_key()
        self.kid = key_id(public)
        keys = {key_id(k): k for k in previous}
        self.ring = KeyRing(keys={self.kid: public, **keys}, current=self.kid)

    def sign(self, envelope: CompletionEnvelope, *, now: dt.datetime | None = None) -> Signature:
        """A few tens of µs (bench/signing.py): cheap enough to run inline on every answer."""
        provider, model = envelope.response.provider, envelope.response.model  # who answered
        unsigned = {
            "alg": ALG,
            "kid": self.kid,
            "signed_at": rfc3339(now or dt.datetime.now(dt.UTC)),
            "model": f"{provider}/{model}",
            "response_sha256": envelope_response_sha256(envelope),
        }
        provenance = envelope.provenance.model_dump(mode="json")
        claims = claims_bytes(signature=unsigned, job_id=envelope.job_id, provenance=provenance)
        return Signature.model_validate({**unsigned, "value": b64url(self._key.sign(claims))})

    def sign_bytes(self, data: bytes) -> str:
        """base64url of Ed25519(data) with the current key (the audit chain's checkpoints)."""
        return b64url(self._key.sign(data))

    def signed(
        self, envelope: CompletionEnvelope, *, now: dt.datetime | None = None
    ) -> CompletionEnvelope:
        return envelope.model_copy(update={"signature": self.sign(envelope, now=now)})

    def verify(self, envelope: CompletionEnvelope) -> None:
        """Raises VerificationFailed; a missing signature is one too."""
        if envelope.signature is None:
            raise VerificationFailed("the envelope carries no signature")
        self.ring.verify(
            signature=envelope.signature,
            job_id=envelope.job_id,
            provenance=envelope.provenance.model_dump(mode="json"),
            response=envelope_response_sha256(envelope),
        )
