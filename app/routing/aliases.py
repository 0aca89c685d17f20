"""Bare model ids → `provider/model`, so stock client code that names `gpt-4o-mini` or
`claude-sonnet-4-5` (not `openai/gpt-4o-mini`) reaches the provider that serves it.

The map is shell-style patterns (or exact ids) → a provider, or a whole `provider/model`. The
shipped defaults go by name family; `model_aliases` in the config file (or GENAI_MODEL_ALIASES as
JSON) is laid over them. An exact id wins, then the longest matching pattern.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping

DEFAULT_ALIASES: Mapping[str, str] = {
    "gpt-*": "openai",
    "chatgpt-*": "openai",
    "o1*": "openai",
    "o3*": "openai",
    "o4*": "openai",
    "claude-*": "anthropic",
    "gpt-oss*": "ollama",
    "llama*": "ollama",
    "llava*": "ollama",
    "qwen*": "ollama",
    "mistral*": "ollama",
    "mixtral*": "ollama",
    "gemma*": "ollama",
    "phi*": "ollama",
    "deepseek*": "ollama",
    "granite*": "ollama",
    "smollm*": "ollama",
}


class ModelAliases:
    def __init__(self, configured: Mapping[str, str] | None = None) -> None:
        merged = {**DEFAULT_ALIASES, **(configured or {})}
        self._exact = {key: value for key, value in merged.items() if not _is_pattern(key)}
        # Longest first: the most specific pattern decides (`gpt-oss*` before `gpt-*`).
        self._patterns = sorted(
            ((key, value) for key, value in merged.items() if _is_pattern(key)),
            key=lambda item: -len(item[0]),
        )

    def resolve(self, name: str) -> str | None:
        """`provider/model` for `name`, or None when no alias covers it. A name with a `/`
        (`mistral/large`: an unknown provider, most likely) matches only keys that have one."""
        target = self._exact.get(name)
        if target is None:
            slashed = "/" in name
            target = next(
                (
                    value
                    for key, value in self._patterns
                    if ("/" in key) == slashed and fnmatch.fnmatchcase(name, key)
                ),
                None,
            )
        if target is None:
            return None
        return target if "/" in target else f"{target}/{name}"

    def targets(self) -> list[tuple[str, str]]:
        """(alias, target) for every entry: the providers they name are checked at start."""
        return [*self._exact.items(), *self._patterns]


def _is_pattern(key: str) -> bool:
    return any(char in key for char in "*?[")
