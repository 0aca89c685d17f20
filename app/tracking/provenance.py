"""The single constructor of Provenance, so every envelope is fingerprinted the same way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.schemas import Message, Provenance, SnippetUse
from app.tracking.fingerprints import continuation_hash, user_prompt_hash, variables_hash


@dataclass(frozen=True, slots=True)
class RenderedFrom:
    """What a prompt was rendered from: the source as provenance names it (pattern file, template
    version or fallback) and the effective variables (defaults merged), which travel together."""

    name: str
    base_path: str
    content_hash: str
    variables: Mapping[str, Any]
    label: str | None = None  # the template label that chose the version, if one did


def build_provenance(
    source: RenderedFrom,
    *,
    user_prompt: str,
    provider: str,
    model: str,
    snippet_ids: list[str] | None = None,
    snippet_versions: Sequence[SnippetUse] = (),
    continuation: Sequence[Message] = (),
) -> Provenance:
    """Fingerprint the effective variables (defaults merged), the verbatim user prompt and, when
    there is one, the continuation after it (which makes the provenance prov-2)."""
    turns = [turn.model_dump(mode="json") for turn in continuation]
    return Provenance(
        schema_version="prov-2" if turns else "prov-1",
        continuation_hash=continuation_hash(turns) if turns else None,
        pattern_name=source.name,
        pattern_base_path=source.base_path,
        pattern_content_hash=source.content_hash,
        variables_hash=variables_hash(source.variables),
        user_prompt_hash=user_prompt_hash(user_prompt),
        provider=provider,
        model=model,
        snippet_ids=list(snippet_ids or []),
        snippet_versions=list(snippet_versions),
        template_label=source.label,
    )
