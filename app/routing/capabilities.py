"""Provider and model capabilities, read from data files rather than `if` chains on names."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.errors import Shortfall

Requirement = Literal["system_prompt", "structured_output", "tools", "streaming", "images"]
CHARS_PER_TOKEN = 4
"""A deliberately rough estimate, used only to compare a prompt against a context limit."""


class Capabilities(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    supports_system_prompt: bool = True
    supports_structured_output: bool = False
    supports_tools: bool = False
    supports_streaming: bool = False
    supports_images: bool = False
    supports_image_urls: bool = True  # an image by URL, fetched by the provider (else data: only)
    # A call can be forced (`required`, a named tool); without it the repair loop asks again.
    supports_tool_choice: bool = True
    # How a schema is enforced when structured output is native: the provider's own output
    # format (OpenAI's response_format, Anthropic's output_config, Ollama's format) or a tool the
    # model is forced to call (Anthropic models older than its structured outputs).
    structured_output_via: Literal["format", "tool"] = "format"
    # "Any JSON object" (response_format json_object) as a native mode; without it the request
    # is held to a {"type": "object"} schema by instructions and the repair loop.
    supports_json_object: bool = True
    context_tokens: int = Field(default=8192, ge=1)
    output_tokens: int = Field(default=4096, ge=1)

    def supports(self, requirement: Requirement) -> bool:
        return bool(getattr(self, f"supports_{requirement}"))


class _ProviderEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    defaults: dict[str, Any] = Field(default_factory=dict)
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)


class _CapabilityFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    providers: dict[str, _ProviderEntry] = Field(default_factory=dict)


def _read(text: str, origin: str) -> _CapabilityFile:
    try:
        return _CapabilityFile.model_validate(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"capabilities file {origin} is invalid: {exc}") from None


class CapabilityCatalog:
    """Shipped capabilities, with a user file layered on top (its entries win)."""

    def __init__(self, layers: list[_CapabilityFile]) -> None:
        self._providers: dict[str, _ProviderEntry] = {}
        for layer in layers:
            for name, entry in layer.providers.items():
                known = self._providers.setdefault(name, _ProviderEntry())
                known.defaults.update(entry.defaults)
                for pattern, values in entry.models.items():
                    known.models.setdefault(pattern, {}).update(values)

    @classmethod
    def load(cls, user_file: Path | None = None) -> CapabilityCatalog:
        shipped = resources.files("app.routing").joinpath("capabilities.yaml").read_text()
        layers = [_read(shipped, "shipped")]
        if user_file is not None:
            layers.append(_read(user_file.read_text(encoding="utf-8"), str(user_file)))
        catalog = cls(layers)
        for provider, entry in catalog._providers.items():  # fail at start-up, not per request
            for pattern, values in [("defaults", {}), *entry.models.items()]:
                try:
                    Capabilities.model_validate({**entry.defaults, **values})
                except ValidationError as exc:
                    raise ValueError(f"capabilities {provider}/{pattern}: {exc}") from None
        return catalog

    @staticmethod
    def _build(entry: _ProviderEntry, model: str) -> Capabilities:
        matches = sorted((p for p in entry.models if fnmatch.fnmatchcase(model, p)), key=len)
        values: Mapping[str, Any] = entry.defaults
        for pattern in matches:  # shorter patterns first, so the most specific wins
            values = {**values, **entry.models[pattern]}
        return Capabilities.model_validate(values)

    def for_model(self, provider: str, model: str) -> Capabilities:
        entry = self._providers.get(provider)
        return self._build(entry, model) if entry else Capabilities()

    def shortfalls(
        self,
        provider: str,
        model: str,
        *,
        requires: Sequence[Requirement] = (),
        max_tokens: int = 0,
        prompt_chars: int = 0,
        image_urls: bool = False,
    ) -> list[Shortfall]:
        """What the model lacks to serve a request, in words for the caller; empty when capable."""
        caps = self.for_model(provider, model)
        found = [
            Shortfall(f"no {_WORDS.get(need, need)} support", kind=need, param=_PARAMS.get(need))
            for need in requires
            if not caps.supports(need)
        ]
        if image_urls and caps.supports_images and not caps.supports_image_urls:
            found.append(
                Shortfall(
                    "images only as data: URIs (the gateway never fetches an image URL)",
                    kind="image_urls",
                    param="messages",
                )
            )
        if max_tokens > caps.output_tokens:
            found.append(
                Shortfall(
                    f"max_tokens {max_tokens} exceeds its output limit {caps.output_tokens}",
                    kind="output_limit",
                    param="max_tokens",
                )
            )
        needed = prompt_chars // CHARS_PER_TOKEN + max_tokens
        if needed > caps.context_tokens:
            found.append(
                Shortfall(
                    # The code in words too: clients match on the message (LangChain does).
                    f"the prompt is too long for its context window (context_length_exceeded): "
                    f"~{needed} tokens with max_tokens, over its {caps.context_tokens}",
                    kind="context",
                    param="messages",
                )
            )
        return found


_WORDS = {"system_prompt": "system prompt", "structured_output": "structured output"}
# The OpenAI request field behind each requirement, for the door's `param`.
_PARAMS = {"tools": "tools", "images": "messages", "structured_output": "response_format"}
