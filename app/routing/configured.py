"""The models the configuration names, listed once: GET /v1/models, the start-up check of every
model setting and the metric label vocabulary all read this list, each taking the kinds it needs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from app.config import Settings

# `model`: a setting whose value must be a usable model. `chain_key`: a fallback chain's key, a
# model only when the chain is kept for a model (it may name a task). `alias_target`: where an
# alias sends a bare id, when that is a `provider/model` rather than a provider.
NamedKind = Literal["model", "chain_key", "alias_target"]


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A model as the settings write it, and the setting an operator would fix."""

    setting: str
    model: str
    kind: NamedKind = "model"


def configured_models(settings: Settings) -> Iterator[NamedModel]:
    """Every model the settings name, in the order GET /v1/models lists them.

    That order is user-visible (OpenAI-compatible clients show it, and many take the first
    entry as their default), so it is the one kept: the single model settings (GENAI_MODEL,
    --model, default_model), per-task models (flags, variables, the file), capable fallbacks,
    each fallback chain's key then its models, and last the alias targets. The start-up check
    and the metric vocabulary do not depend on the order.
    """
    if settings.model:
        yield NamedModel("GENAI_MODEL", settings.model)
    if settings.cli_model:
        yield NamedModel("--model", settings.cli_model)
    yield NamedModel("GENAI_DEFAULT_MODEL (default_model)", settings.default_model)
    for task, model in settings.cli_task_models.items():
        yield NamedModel(f"--model-for {task}", model)
    for variable, model in settings.env_task_models.items():
        yield NamedModel(variable, model)
    for task, model in settings.task_models.items():
        yield NamedModel(f"task_models.{task}", model)
    for index, model in enumerate(settings.capable_fallback_models):
        yield NamedModel(f"GENAI_CAPABLE_FALLBACK_MODELS[{index}]", model)
    for key, chain in settings.fallbacks.items():
        yield NamedModel(f"fallbacks.{key}", key, "chain_key")
        for index, model in enumerate(chain):
            yield NamedModel(f"fallbacks.{key}[{index}]", model)
    for alias, target in settings.model_aliases.items():
        if "/" in target:
            yield NamedModel(f"model_aliases.{alias}", target, "alias_target")
