"""The single constructor of Provenance, so every envelope is fingerprinted the same way."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.schemas import Provenance
from app.tracking.fingerprints import user_prompt_hash, variables_hash


def build_provenance(
    *,
    pattern_name: str,
    pattern_base_path: str,
    pattern_content_hash: str,
    variables: Mapping[str, Any],
    user_prompt: str,
    provider: str,
    model: str,
    snippet_ids: list[str] | None = None,
) -> Provenance:
    """Fingerprint the effective variables (defaults merged) and the verbatim user prompt."""
    return Provenance(
        pattern_name=pattern_name,
        pattern_base_path=pattern_base_path,
        pattern_content_hash=pattern_content_hash,
        variables_hash=variables_hash(variables),
        user_prompt_hash=user_prompt_hash(user_prompt),
        provider=provider,
        model=model,
        snippet_ids=list(snippet_ids or []),
    )
