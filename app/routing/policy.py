"""ModelSelectionPolicy: one documented chain picks the model and says which link decided.

Highest first (the `ModelChoice.source` each link reports):

    request         the request's `model`
    cli_task        `genai serve/render --model-for TASK=M`
    cli             `genai serve/render --model M`
    env_task        GENAI_MODEL_<TASK>
    env             GENAI_MODEL
    config_task     the config file's `task_models: {TASK: M}`
    hint            the pattern's `model_hint`
    config_default  `default_model` (the config file, or GENAI_DEFAULT_MODEL)

A task is the pattern's name, then each of its tags in order; in a per-task link the first task
with an entry decides. The links are fixed: there is no setting that reorders them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from app.config import Settings, task_model_env_name
from app.errors import CapabilityMissing, ConfigurationProblems, InvalidModel
from app.providers.registry import PROVIDER_NAMES, provider_names
from app.routing.aliases import ModelAliases
from app.routing.configured import configured_models
from app.schemas import MODEL, ModelChoice, ModelSource

_MODEL = re.compile(MODEL)
CHAIN = (
    "request > --model-for TASK > --model > GENAI_MODEL_<TASK> > GENAI_MODEL > "
    "task_models > model_hint > default_model"
)


def split_model(
    model: str,
    providers: Collection[str] = PROVIDER_NAMES,
    aliases: ModelAliases | None = None,
) -> tuple[str, str]:
    """`provider/model` → (provider, model); the model part may itself contain `/` or `:`.

    `providers` are the names known (`provider_names(settings)` adds configured endpoints); a
    name that does not start with one is looked up in `aliases` (a bare id, `gpt-4o-mini`).
    """
    provider, sep, name = model.strip().partition("/")
    if aliases is not None and provider.lower() not in providers:
        resolved = aliases.resolve(model.strip())
        if resolved is not None:
            return split_model(resolved, providers)
    if not sep or not provider or not name:
        raise InvalidModel(
            f"Model {model!r} must be written 'provider/model' (e.g. 'openai/gpt-4o-mini') or "
            "be a model id the alias map knows (model_aliases)."
        )
    if not _MODEL.fullmatch(model.strip()):  # the rule a request's `model` is held to
        raise InvalidModel(
            f"Model {model!r} may hold only letters, digits and . _ : / - (at most 255)."
        )
    provider = provider.lower()
    if provider not in providers:
        raise InvalidModel(
            f"Unknown provider {provider!r} in {model!r}; use one of: {', '.join(providers)}."
        )
    return provider, name


def model_ids(
    models: Iterable[str],
    providers: Collection[str] = PROVIDER_NAMES,
    aliases: ModelAliases | None = None,
) -> frozenset[str]:
    """Each usable model as the `provider/model` a choice of it reports (aliases resolved);
    anything `split_model` refuses is left out."""
    ids = set()
    for model in models:
        try:
            provider, name = split_model(model, providers, aliases)
        except InvalidModel:
            continue
        ids.add(f"{provider}/{name}")
    return frozenset(ids)


def configured_model_ids(settings: Settings) -> frozenset[str]:
    """Every model the settings name, and each fallback chain's own model (a chain may be kept
    for a model rather than a task): the models a metric may name. What start-up would refuse
    is left out."""
    named = [each.model for each in configured_models(settings)]
    return model_ids(named, provider_names(settings), ModelAliases(settings.model_aliases))


# A variable that looks like GENAI_MODEL_<TASK> but once meant something else.
_RETIRED = {
    "GENAI_MODEL_SELECTION_ORDER": "removed: the model chain has a fixed order "
    f"({CHAIN}); unset it",
}


def model_setting_problems(settings: Settings) -> list[tuple[str, str]]:
    """(setting, problem) for each configured model that is not a usable `provider/model`."""
    known = provider_names(settings)
    aliases = ModelAliases(settings.model_aliases)
    problems = [
        (
            f"model_aliases.{alias}",
            f"{target!r} is not a known provider: use one of {', '.join(known)}",
        )
        for alias, target in settings.model_aliases.items()
        if "/" not in target and target not in known
    ]
    for named in configured_models(settings):
        if named.kind == "chain_key":  # a key may name a task: only a chain's models must be models
            continue
        if named.setting in _RETIRED:
            problems.append((named.setting, _RETIRED[named.setting]))
            continue
        try:
            split_model(named.model, known, aliases)
        except InvalidModel as exc:
            problems.append((named.setting, exc.message))
    return problems


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainLinks:
    """What the configured links of the chain name, one value so the policy takes one argument
    for them (the request's `model` and the pattern's hint come with each choice)."""

    default_model: str
    model: str | None = None  # GENAI_MODEL
    cli_model: str | None = None
    task_models: Mapping[str, str] = field(default_factory=dict)
    cli_task_models: Mapping[str, str] = field(default_factory=dict)
    env_task_models: Mapping[str, str] = field(default_factory=dict)  # by variable name

    def __post_init__(self) -> None:
        # Copies, as the policy always kept: a caller's dict changed later changes no choice.
        for name in ("task_models", "cli_task_models", "env_task_models"):
            object.__setattr__(self, name, dict(getattr(self, name)))

    @classmethod
    def from_settings(cls, settings: Settings) -> ChainLinks:
        return cls(
            default_model=settings.default_model,
            model=settings.model,
            cli_model=settings.cli_model,
            task_models=settings.task_models,
            cli_task_models=settings.cli_task_models,
            env_task_models=settings.env_task_models,
        )

    def models(self) -> Iterator[str | None]:
        """Every model a link names (None where a link is unset)."""
        yield from (self.default_model, self.model, self.cli_model)
        for per_task in (self.task_models, self.cli_task_models, self.env_task_models):
            yield from per_task.values()


class ModelSelectionPolicy:
    """Walks the chain in its fixed order and takes the first link that names a model."""

    def __init__(
        self,
        links: ChainLinks,
        *,
        capable_fallbacks: Sequence[str] = (),
        providers: Collection[str] = PROVIDER_NAMES,
        aliases: ModelAliases | None = None,
    ) -> None:
        self.links = links
        self.capable_fallbacks = tuple(capable_fallbacks)
        self.providers = tuple(providers)
        self.aliases = aliases or ModelAliases()
        for named in (*links.models(), *capable_fallbacks):
            if named:
                self.split(named)  # fail at start-up, not on the first request

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelSelectionPolicy:
        """Raises ConfigurationProblems naming every model setting that cannot be used."""
        problems = model_setting_problems(settings)
        if problems:
            raise ConfigurationProblems(problems)
        return cls(
            ChainLinks.from_settings(settings),
            capable_fallbacks=settings.capable_fallback_models,
            providers=provider_names(settings),
            aliases=ModelAliases(settings.model_aliases),
        )

    def split(self, model: str) -> tuple[str, str]:
        """`split_model` against the providers this policy knows (endpoints included) and its
        alias map."""
        return split_model(model, self.providers, self.aliases)

    def model_ids(self, models: Iterable[str]) -> frozenset[str]:
        """`model_ids` against this policy's providers and alias map."""
        return model_ids(models, self.providers, self.aliases)

    def choice(self, model: str, source: ModelSource, reason: str) -> ModelChoice:
        provider, name = self.split(model)
        return ModelChoice(
            model=f"{provider}/{name}", provider=provider, name=name, source=source, reason=reason
        )

    def _links(
        self, requested: str | None, tasks: Sequence[str], hint: str | None
    ) -> Iterator[tuple[ModelSource, str | None, str]]:
        """(source, the model it names or None, what it is called), highest first."""
        yield "request", requested, "the request's `model`"
        for task in tasks:
            yield "cli_task", self.links.cli_task_models.get(task), f"`--model-for {task}=…`"
        yield "cli", self.links.cli_model, "`--model` on the command line"
        for task in tasks:
            variable = task_model_env_name(task)
            yield "env_task", self.links.env_task_models.get(variable), variable
        yield "env", self.links.model, "GENAI_MODEL"
        for task in tasks:
            yield (
                "config_task",
                self.links.task_models.get(task),
                f"task_models.{task} (config file)",
            )
        yield "hint", hint, "the pattern's model_hint"
        yield (
            "config_default",
            self.links.default_model,
            "the default model (GENAI_DEFAULT_MODEL or the config file's default_model)",
        )

    def choose_model(
        self, requested: str | None, *, tasks: Sequence[str] = (), hint: str | None = None
    ) -> ModelChoice:
        """The first link of the chain that names a model; `tasks` are the pattern's name, then
        its tags."""
        for source, model, named_by in self._links(requested, tasks, hint):
            if model:
                return self.choice(model, source, f"{named_by}: the first link of the chain set")
        raise InvalidModel(
            f"No model could be chosen: name one in the request's 'model' ({CHAIN})."
        )

    def choose_capable(
        self, first: ModelChoice, shortfalls: Callable[[ModelChoice], Sequence[str]]
    ) -> ModelChoice:
        """Keep `first` if it can serve the request, else the first capable configured fallback.

        `shortfalls(choice)` lists what a model lacks; with no capable model the request is
        refused before any call.
        """
        missing = shortfalls(first)
        if not missing:
            return first
        for model in self.capable_fallbacks:
            candidate = self.choice(
                model,
                "capability_fallback",
                f"{first.model} cannot serve this request ({'; '.join(missing)}); "
                "first capable model in GENAI_CAPABLE_FALLBACK_MODELS",
            )
            if not shortfalls(candidate):
                return candidate
        raise CapabilityMissing(first.model, missing)
