"""Fingerprints and provenance: pure functions, no I/O."""

from app.tracking.fingerprints import (
    canonical_json,
    continuation_hash,
    pattern_content_hash,
    sha256_hex,
    template_checksum,
    user_prompt_hash,
    variables_hash,
)
from app.tracking.provenance import RenderedFrom, build_provenance

__all__ = [
    "RenderedFrom",
    "build_provenance",
    "canonical_json",
    "continuation_hash",
    "pattern_content_hash",
    "sha256_hex",
    "template_checksum",
    "user_prompt_hash",
    "variables_hash",
]
