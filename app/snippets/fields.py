"""Tag and metadata normalisation shared by file and database snippets, so both compare alike."""

from __future__ import annotations

from typing import Any

import structlog
import yaml

log = structlog.get_logger(__name__)

_SCALARS = (str, int, float)


def normalise_tags(raw: object) -> list[str]:
    """Comma-separated text or a list → stripped, non-empty tags, first spelling of each kept.

    Raises ValueError for anything else, so a malformed file is skipped rather than guessed at.
    """
    if raw is None:
        return []
    if isinstance(raw, str):
        items = raw.split(",")
    elif isinstance(raw, list | tuple) and all(isinstance(item, _SCALARS) for item in raw):
        items = [str(item) for item in raw]
    else:
        raise ValueError("tags must be a comma-separated string or a list of strings")
    tags: dict[str, str] = {}
    for item in items:
        tag = item.strip()
        if tag:
            tags.setdefault(tag.casefold(), tag)
    return list(tags.values())


def tag_key(tag: str) -> str:
    """The form tags are compared in: whole tokens, case-insensitive."""
    return tag.strip().casefold()


def has_tag(tags: list[str], wanted: str) -> bool:
    """Exact token match, ignoring case: `style` never matches `lifestyle`."""
    key = tag_key(wanted)
    return any(tag_key(tag) == key for tag in tags)


def read_metadata(raw: object, *, identifier: str, source: str, parse_text: bool) -> dict[str, Any]:
    """A JSON object for consumers, or `{}`: bad metadata is logged and never breaks a render.

    With `parse_text` (file front-matter), a string is read as a JSON/YAML mapping.
    """
    value = raw
    if parse_text and isinstance(raw, str):
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = None
    if isinstance(value, dict):
        return {str(key): item for key, item in value.items()}
    log.warning(
        "snippet_metadata_invalid",
        snippet=identifier,
        source=source,
        got=type(raw).__name__,
        hint="metadata must be a JSON object; using {}",
    )
    return {}
