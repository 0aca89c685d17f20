"""AnswerSealer: AES-256-GCM for answers kept outside the process (Redis).

The audit trail keeps only redacted text, but a cached answer is the raw response: sealed, a
dump or snapshot of the shared Redis reveals nothing. The key is derived (HKDF) from the data key
(GENAI_DATA_KEY), so it never equals the replay vault's key, and replicas that share the data key
read each other's entries. The answer's `stored_at` is sealed with it, so whoever can write to
Redis cannot make an entry look younger than it is: its age against the TTL is checked on every
read, and Redis's own expiry (which PERSIST removes) is not relied on.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from app.cache.answer import UnreadableEntry

_FORMAT_V1 = b"\x01"  # leading byte of every sealed value, so the format can evolve
_NONCE_BYTES = 12
_KEY_PURPOSE = b"genai response cache v1"


class AnswerSealer:
    """Seals bytes bound to their cache key (associated data): a value copied under another key,
    by anyone with write access to Redis, fails to open instead of answering the wrong request."""

    def __init__(self, data_key: bytes) -> None:
        derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_KEY_PURPOSE)
        self._aead = AESGCM(derived.derive(data_key))

    def seal(self, key: str, value: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        return _FORMAT_V1 + nonce + self._aead.encrypt(nonce, value, key.encode())

    def open(self, key: str, sealed: bytes) -> bytes:
        if not sealed.startswith(_FORMAT_V1) or len(sealed) <= 1 + _NONCE_BYTES:
            raise UnreadableEntry("unknown sealed format")
        nonce, body = sealed[1 : 1 + _NONCE_BYTES], sealed[1 + _NONCE_BYTES :]
        try:
            return self._aead.decrypt(nonce, body, key.encode())
        except InvalidTag:
            raise UnreadableEntry(
                "cannot be decrypted: written under another GENAI_DATA_KEY, or altered"
            ) from None
