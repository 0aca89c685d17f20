"""ModelSelectionPolicy: request model, pattern hint or default, in a configured order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from app.config import SelectionSource, Settings
from app.errors import CapabilityMissing, InvalidModel
from app.providers.registry import PROVIDER_NAMES
from app.schemas import ModelChoice, ModelSource


def split_model(model: str) -> tuple[str, str]:
    """`provider/model` → (provider, model); the model part may itself contain `/` or `:`."""
    provider, sep, name = model.strip().partition("/")
    if not sep or not provider or not name:
        raise InvalidModel(
            f"Model {model!r} must be written 'provider/model', e.g. 'openai/gpt-4o-mini'."
        )
    provider = provider.lower()
    if provider not in PROVIDER_NAMES:
        raise InvalidModel(
            f"Unknown provider {provider!r} in {model!r}; use one of: {', '.join(PROVIDER_NAMES)}."
        )
    return provider, name


_SOURCE_NAMES: dict[SelectionSource, ModelSource] = {
    "explicit": "request",
    "hint": "hint",
    "default": "config_default",
}


class ModelSelectionPolicy:
    """Walks the configured order and takes the first source that names a model."""

    _REASONS: ClassVar[dict[str, str]] = {
        "explicit": "the request named a model",
        "hint": "the pattern's model_hint",
        "default": "the configured default model (GENAI_DEFAULT_MODEL)",
    }

    def __init__(
        self,
        *,
        order: Sequence[SelectionSource],
        default_model: str,
        capable_fallbacks: Sequence[str] = (),
    ) -> None:
        self.order = tuple(order)
        self.default_model = default_model
        self.capable_fallbacks = tuple(capable_fallbacks)
        for model in (default_model, *capable_fallbacks):
            split_model(model)  # fail at start-up, not on the first request

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelSelectionPolicy:
        return cls(
            order=settings.model_selection_order,
            default_model=settings.default_model,
            capable_fallbacks=settings.capable_fallback_models,
        )

    def choose_capable(
        self, first: ModelChoice, shortfalls: Callable[[ModelChoice], list[str]]
    ) -> ModelChoice:
        """Keep `first` if it can serve the request, else the first capable configured fallback.

        `shortfalls(choice)` lists what a model lacks; with no capable model the request is
        refused before any call.
        """
        missing = shortfalls(first)
        if not missing:
            return first
        for model in self.capable_fallbacks:
            provider, name = split_model(model)
            candidate = ModelChoice(
                model=f"{provider}/{name}",
                provider=provider,
                name=name,
                source="capability_fallback",
                reason=f"{first.model} cannot serve this request ({'; '.join(missing)}); "
                "first capable model in GENAI_CAPABLE_FALLBACK_MODELS",
            )
            if not shortfalls(candidate):
                return candidate
        raise CapabilityMissing(first.model, missing)

    def choose_model(self, explicit: str | None, hint: str | None) -> ModelChoice:
        candidates: dict[SelectionSource, str | None] = {
            "explicit": explicit,
            "hint": hint,
            "default": self.default_model,
        }
        for source in self.order:
            model = candidates[source]
            if model:
                provider, name = split_model(model)
                return ModelChoice(
                    model=f"{provider}/{name}",
                    provider=provider,
                    name=name,
                    source=_SOURCE_NAMES[source],
                    reason=f"{self._REASONS[source]} (order: {' > '.join(self.order)})",
                )
        raise InvalidModel(
            "No model could be chosen: name one in the request's 'model' field "
            f"(selection order is {' > '.join(self.order)})."
        )
