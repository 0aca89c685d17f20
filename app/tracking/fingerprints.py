"""SHA-256 fingerprints (`sha256:<64 hex>`) that anyone can recompute to prove an input."""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

PREFIX = "sha256:"


def sha256_hex(data: bytes) -> str:
    return PREFIX + hashlib.sha256(data).hexdigest()


def _canonical(value: Any) -> Any:
    """Reduce a value to JSON-native types so equal inputs always serialise to equal bytes."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return _canonical(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, set | frozenset):
        items = [_canonical(item) for item in value]
        try:
            return sorted(items)  # a set hashes like the sorted list of its items
        except TypeError:  # mixed types: no natural order, so order by canonical JSON
            return sorted(items, key=canonical_json)
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return str(value)


def canonical_json(value: Any) -> str:
    """The one canonical serialisation behind `variables_hash`."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def pattern_content_hash(raw: bytes) -> str:
    """Hash of the pattern file's exact bytes, front-matter included."""
    return sha256_hex(raw)


def template_checksum(text: str) -> str:
    """Hash of a database template version's text: what drift and replay compare against."""
    return sha256_hex(text.encode("utf-8"))


def variables_hash(variables: Mapping[str, Any]) -> str:
    return sha256_hex(canonical_json(variables).encode("utf-8"))


def user_prompt_hash(user_prompt: str) -> str:
    return sha256_hex(user_prompt.encode("utf-8"))


def continuation_hash(turns: Sequence[Mapping[str, Any]]) -> str:
    """The turns after the user prompt, each as its JSON form (unused fields left out)."""
    return sha256_hex(canonical_json(list(turns)).encode("utf-8"))
