"""API key format and hashing: pure functions, no I/O.

A key reads `gsk_<id>_<secret>`. The id is public (it names the key in lists and logs and is how
a key is found); the secret is 32 random bytes. Only HMAC-SHA256(server secret, salt + secret)
is stored, so a stolen database alone cannot be turned back into keys or checked against
guesses, and verification costs one HMAC (cheap enough for every request).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from enum import StrEnum

PREFIX = "gsk_"
_ID_BYTES = 8
_SECRET_BYTES = 32
_SALT_BYTES = 16
_KEY_RE = re.compile(r"^gsk_(?P<id>[0-9a-f]{16})_(?P<secret>[A-Za-z0-9_-]{43})$")


class Scope(StrEnum):
    """`complete` renders, completes and reads the prompt catalog; `admin` may do everything."""

    complete = "complete"
    admin = "admin"

    def allows(self, needed: Scope) -> bool:
        return self is Scope.admin or self is needed


@dataclass(frozen=True, slots=True)
class NewKey:
    """A freshly minted key: `text` is shown once; only `salt` and `digest` are kept."""

    id: str
    text: str
    salt: str
    digest: str


@dataclass(frozen=True, slots=True)
class PresentedKey:
    """A key as a caller sent it, split into its public id and its secret."""

    id: str
    secret: str


def digest(server_secret: bytes, salt: str, secret: str) -> str:
    return hmac.new(server_secret, f"{salt}:{secret}".encode(), hashlib.sha256).hexdigest()


def mint(server_secret: bytes) -> NewKey:
    key_id = os.urandom(_ID_BYTES).hex()
    secret = base64.urlsafe_b64encode(os.urandom(_SECRET_BYTES)).decode().rstrip("=")
    salt = os.urandom(_SALT_BYTES).hex()
    return NewKey(
        id=key_id,
        text=f"{PREFIX}{key_id}_{secret}",
        salt=salt,
        digest=digest(server_secret, salt, secret),
    )


def parse(text: str) -> PresentedKey | None:
    """The key's parts, or None when the text is not shaped like one of our keys."""
    match = _KEY_RE.match(text)
    return PresentedKey(match["id"], match["secret"]) if match else None


def matches(server_secret: bytes, presented: PresentedKey, salt: str, stored: str) -> bool:
    """Constant-time comparison of the presented secret against the stored digest."""
    return hmac.compare_digest(digest(server_secret, salt, presented.secret), stored)
