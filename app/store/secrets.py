"""Server secrets (the redaction HMAC key, the replay encryption key) and the replay vault."""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr

from app.errors import ConfigurationError
from app.store.private import PRIVATE_FILE_MODE, ensure_private_dir

KEY_BYTES = 32
_FORMAT_V1 = b"\x01"  # leading byte of every sealed blob, so the format can evolve
_NONCE_BYTES = 12


def decode_key(text: str, *, what: str) -> bytes:
    """The key bytes; a ConfigurationError naming `what` (the setting or file) otherwise."""
    try:
        key = base64.urlsafe_b64decode(text.strip().encode() + b"==")
    except (binascii.Error, ValueError):
        raise ConfigurationError(what, f"must be base64 of {KEY_BYTES} bytes") from None
    if len(key) != KEY_BYTES:
        raise ConfigurationError(what, f"must be base64 of {KEY_BYTES} bytes, got {len(key)} bytes")
    return key


def _read_key_file(path: Path, *, what: str) -> bytes:
    # Named after the file, with the setting that would replace it.
    where = f"{path} (used because {what} is unset)"
    try:
        return decode_key(path.read_text(encoding="ascii"), what=where)
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else "is not a key"
        raise ConfigurationError(where, f"cannot be read: {problem}") from None


def load_or_create_key(configured: SecretStr | None, path: Path, *, what: str) -> bytes:
    """The configured key, else the one kept at `path`, else a new one written there (mode 0600,
    in a 0700 directory). Every failure is a ConfigurationError naming the setting or file."""
    if configured is not None:
        return decode_key(configured.get_secret_value(), what=what)
    if path.exists():
        return _read_key_file(path, what=what)
    key = os.urandom(KEY_BYTES)
    try:
        ensure_private_dir(path.parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:  # another worker created it first: use theirs
        return _read_key_file(path, what=what)
    except OSError as exc:
        raise ConfigurationError(
            what, f"is unset and {path} cannot be created: {exc.strerror or exc}"
        ) from None
    with os.fdopen(fd, "w") as handle:
        handle.write(base64.urlsafe_b64encode(key).decode())
    return key


def new_key_text() -> str:
    """A fresh key in the form the settings expect (for `genai keys new`)."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode()


class VaultError(Exception):
    """A sealed blob could not be opened: wrong key, or the bytes were altered."""


class ReplayVault:
    """AES-256-GCM over JSON; the job id is bound in as associated data, so a blob cannot be
    moved to another record."""

    def __init__(self, key: bytes) -> None:
        self._aead = AESGCM(key)

    def seal(self, job_id: str, payload: dict[str, Any]) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        data = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        return _FORMAT_V1 + nonce + self._aead.encrypt(nonce, data, job_id.encode())

    def open(self, job_id: str, blob: bytes) -> dict[str, Any]:
        if not blob.startswith(_FORMAT_V1):
            raise VaultError("unknown sealed format")
        nonce, sealed = blob[1 : 1 + _NONCE_BYTES], blob[1 + _NONCE_BYTES :]
        try:
            data = self._aead.decrypt(nonce, sealed, job_id.encode())
        except InvalidTag:
            raise VaultError("the replay inputs cannot be decrypted with this key") from None
        result: dict[str, Any] = json.loads(data)
        return result
