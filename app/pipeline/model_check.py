"""At start: the model configuration gives each pattern, without a request's `model`, must be able
to serve it. A configured model lacking a capability a pattern needs is refused then, with a line
naming the pattern, the model, the link of the chain it came from and what it lacks, instead of
answering 422 capability_missing to the first caller.

A model chosen by the pattern's own `model_hint` is the pattern author's choice, not the
configuration's: it is not refused here (a request names a model, or capable fallbacks apply).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.catalog.pattern import PatternInfo
from app.errors import CapabilityMissing, InvalidModel, Shortfall
from app.providers.base import ProviderDescriptor
from app.routing.capabilities import CapabilityCatalog, Requirement
from app.routing.policy import ModelSelectionPolicy
from app.schemas import ModelChoice, ModelParams, ModelSource

_PATTERN_OWN: frozenset[ModelSource] = frozenset({"hint"})
_TOOLS: tuple[Requirement, ...] = ("tools",)


def unservable_patterns(
    patterns: Iterable[PatternInfo],
    *,
    policy: ModelSelectionPolicy,
    capabilities: CapabilityCatalog,
    default_params: ModelParams,
    describe: Callable[[str], ProviderDescriptor],
) -> list[tuple[str, str]]:
    """(pattern, problem) for each pattern its configured model cannot serve."""
    problems = []
    for info in patterns:
        meta = info.meta
        try:
            first = policy.choose_model(None, tasks=(info.name, *meta.tags), hint=meta.model_hint)
        except InvalidModel:  # a bad model_hint: the pattern's problem (`genai patterns validate`)
            continue
        if first.source in _PATTERN_OWN:
            continue
        try:
            policy.choose_capable(first, _shortfalls(info, capabilities, default_params, describe))
        except CapabilityMissing as exc:
            problems.append(
                (
                    f"pattern {info.name}",
                    f"model {first.model} ({first.source}: {first.reason}) lacks: "
                    f"{'; '.join(exc.missing)}; configure a model that has it for this task, "
                    "or list one in GENAI_CAPABLE_FALLBACK_MODELS",
                )
            )
    return problems


def _shortfalls(
    info: PatternInfo,
    capabilities: CapabilityCatalog,
    default_params: ModelParams,
    describe: Callable[[str], ProviderDescriptor],
) -> Callable[[ModelChoice], list[Shortfall]]:
    """What a model lacks for this pattern before any request: its requirements and its
    max_tokens (the prompt's length is a request's own)."""

    def shortfalls(choice: ModelChoice) -> list[Shortfall]:
        params = ModelParams.effective(default_params, info.meta.params).only(
            describe(choice.provider).supported_params
        )
        return capabilities.shortfalls(
            choice.provider,
            choice.name,
            # A pattern's declared tools need a model that takes tools, as `requires` does.
            requires=[*info.meta.requires, *(_TOOLS if info.meta.tools else ())],
            max_tokens=params.max_tokens or 0,
        )

    return shortfalls
