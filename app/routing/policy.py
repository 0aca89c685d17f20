"""ModelSelectionPolicy: request model, pattern hint or default, in a configured order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from app.config import SelectionSource, Settings
from app.errors import InvalidModel
from app.schemas import ModelChoice

KNOWN_PROVIDERS = ("openai", "anthropic", "ollama")


def split_model(model: str) -> tuple[str, str]:
    """`provider/model` → (provider, model); the model part may itself contain `/` or `:`."""
    provider, sep, name = model.strip().partition("/")
    if not sep or not provider or not name:
        raise InvalidModel(
            f"Model {model!r} must be written 'provider/model', e.g. 'openai/gpt-4o-mini'."
        )
    provider = provider.lower()
    if provider not in KNOWN_PROVIDERS:
        raise InvalidModel(
            f"Unknown provider {provider!r} in {model!r}; use one of: {', '.join(KNOWN_PROVIDERS)}."
        )
    return provider, name


class ModelSelectionPolicy:
    """Walks the configured order and takes the first source that names a model."""

    _REASONS: ClassVar[dict[str, str]] = {
        "explicit": "the request named a model",
        "hint": "the pattern's model_hint",
        "default": "the configured default model (GENAI_DEFAULT_MODEL)",
    }

    def __init__(self, *, order: Sequence[SelectionSource], default_model: str) -> None:
        self.order = tuple(order)
        self.default_model = default_model
        split_model(default_model)  # fail at start-up, not on the first request

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelSelectionPolicy:
        return cls(order=settings.model_selection_order, default_model=settings.default_model)

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
                    source=source,
                    reason=f"{self._REASONS[source]} (order: {' > '.join(self.order)})",
                )
        raise InvalidModel(
            "No model could be chosen: name one in the request's 'model' field "
            f"(selection order is {' > '.join(self.order)})."
        )
