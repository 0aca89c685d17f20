"""The envelope signing key (issue 20): configured, or kept in data_dir/keys/signing.key (0600,
created on first start like the other server secrets), plus the verify-only public keys of
rotated-out ones."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from app.config import Settings
from app.errors import ConfigurationError
from app.store.secrets import load_or_create_key
from app.tracking.signing import KeyRing, Signer, public_key_of

SIGNING_KEY_FILE = "signing.key"


def _previous(texts: list[str]) -> list[Ed25519PublicKey]:
    keys = []
    for number, text in enumerate(texts, start=1):
        try:
            keys.append(public_key_of(text))
        except ValueError as exc:
            raise ConfigurationError(
                "GENAI_SIGNING__PREVIOUS_KEYS", f"key {number} {exc}"
            ) from None
    return keys


def load_signer(settings: Settings) -> Signer:
    """The signer whether or not signing is on (`genai provenance keys` prints its keys either
    way); a ConfigurationError names the setting or file that is wrong."""
    signing = settings.signing
    seed = load_or_create_key(
        signing.key, settings.data_dir / "keys" / SIGNING_KEY_FILE, what="GENAI_SIGNING__KEY"
    )
    return Signer(Ed25519PrivateKey.from_private_bytes(seed), _previous(signing.previous_keys))


def signer_from_settings(settings: Settings) -> Signer | None:
    """None with GENAI_SIGNING__ENABLED=false: no key is read or created."""
    return load_signer(settings) if settings.signing.enabled else None


def local_keys(settings: Settings) -> KeyRing:
    """The keys this installation signs and verifies with, for `genai verify` without `--keys`;
    never creates a key (a new one would verify nothing)."""
    path = settings.data_dir / "keys" / SIGNING_KEY_FILE
    if settings.signing.key is None and not path.exists():
        raise ConfigurationError(
            "--keys",
            f"is needed: no signing key here (GENAI_SIGNING__KEY is unset and {path} does not "
            "exist); pass the service's keys as a file or its /v1/provenance/keys URL",
        )
    return load_signer(settings).ring
