"""cache_key: one SHA-256 over everything that decides what a provider would answer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.schemas import ModelParams, Provenance, RenderedPrompt
from app.tracking.fingerprints import canonical_json, sha256_hex

# Bumped whenever the key's inputs or the stored value's shape change: an old entry is then
# never read (it simply expires), so no format migration is ever needed.
CACHE_KEY_PREFIX = "genai:cache:v2:"


def cache_key(
    *,
    provenance: Provenance,
    params: ModelParams,
    prompt: RenderedPrompt,
    output_schema: Mapping[str, Any] | None = None,
    partition: str | None = None,
) -> str:
    """The key for a request about to be sent to `provenance.provider`/`provenance.model`.

    The fingerprints name the inputs, but the prompt actually sent also depends on the
    request's `instructions`, the snippet texts behind `snippet_ids` (their hashes, when used,
    are in the key too) and
    the provider-specific assembly (a folded system prompt, contract instructions): so the
    exact rendered prompt is hashed too. The output schema travels outside the prompt when the
    provider enforces it natively. The pattern's base path is left out on purpose: replicas
    that keep the same patterns under different directories share their entries.
    """
    material: dict[str, Any] = {
        "pattern_name": provenance.pattern_name,
        "pattern_content_hash": provenance.pattern_content_hash,
        "variables_hash": provenance.variables_hash,
        "user_prompt_hash": provenance.user_prompt_hash,
        "snippet_ids": list(provenance.snippet_ids),  # order is meaningful: it is prompt order
        "provider": provenance.provider,
        "model": provenance.model,
        "params": params.model_dump(mode="json"),
        "prompt_hash": sha256_hex(canonical_json(prompt.model_dump(mode="json")).encode()),
        "output_schema_hash": (
            None if output_schema is None else sha256_hex(canonical_json(output_schema).encode())
        ),
    }
    if provenance.snippet_versions:  # only then: keys of snippet-free requests stay the same
        material["snippet_hashes"] = [[s.identifier, s.sha256] for s in provenance.snippet_versions]
    if partition is not None:  # GENAI_CACHE__SCOPE=key (the default): the caller's own entries
        material["partition"] = partition
    digest = sha256_hex(canonical_json(material).encode()).removeprefix("sha256:")
    return CACHE_KEY_PREFIX + digest
