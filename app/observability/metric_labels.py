"""Metric label values from bounded sets, so no caller can mint series.

A request names its model (`openai/<anything>`), pattern and template freely; as label values
those would add series with every new name, growing `/metrics` (which is open) and the time a
scrape holds the event loop without bound. So every label name has a vocabulary here: a value
the configuration or the pattern catalog knows is kept, anything else is counted as `other`.
`Bounded` applies it to every `labels()` call, so no call site has to remember to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar, get_args

from prometheus_client.metrics import MetricWrapperBase

from app.errors import error_types
from app.schemas.conversation import Role

OTHER = "other"
TEMPLATE = "template"  # every database template (and the fallback prompt), whatever its name
# Provenance names of template sources (`template:<name>:<role>:v<n>`, `fallback:<name>:<role>`).
_TEMPLATE_PREFIXES = ("template:", "fallback:")
_ROLES = frozenset(get_args(Role))
# Values the gateway makes itself from a fixed set, kept as they are: a route template of its
# own route table, an HTTP status or outcome, a cache result, a token kind, a source kind, a
# concurrency limit (global, or one per provider the settings limit).
_OWN_VALUES = frozenset({"route", "status", "result", "kind", "source_kind", "limit"})
# Values a caller can influence, each checked by its own rule below.
_CHECKED = frozenset(
    {"pattern", "provider", "model", "from_model", "to_model", "error_type", "role"}
)
# How long the models named by pattern files are reused before the catalog is asked again.
PATTERN_MODELS_SECONDS = 5.0

M = TypeVar("M", bound=MetricWrapperBase)


def _nothing() -> Collection[str]:
    return ()


@dataclass(slots=True)
class LabelVocabulary:
    """What each label may say. The defaults know no model, provider or pattern: everything a
    caller could choose is `other` until the runtime says what is configured.

    `models` are `provider/name` ids from the settings; `pattern_models` the ids the pattern
    files name (`model_hint`, `fallbacks`), asked for again at most every few seconds and only
    when a model is not already known, since the catalog reloads while serving.
    """

    models: frozenset[str] = frozenset()
    providers: frozenset[str] = frozenset()
    is_pattern: Callable[[str], bool] = lambda _name: False
    pattern_models: Callable[[], Collection[str]] = _nothing
    clock: Callable[[], float] = time.monotonic
    _error_types: frozenset[str] = field(
        default_factory=lambda: frozenset(error_types()), init=False
    )
    _from_patterns: frozenset[str] = field(default=frozenset(), init=False)
    _patterns_asked_at: float | None = field(default=None, init=False)

    @staticmethod
    def check(names: Sequence[str]) -> None:
        """Refuse a series with a label no rule bounds: a new label needs its vocabulary."""
        unruled = set(names) - _OWN_VALUES - _CHECKED
        if unruled:
            raise ValueError(f"no bounded vocabulary for label(s) {sorted(unruled)}")

    def bound(self, names: Sequence[str], values: Sequence[str]) -> tuple[str, ...]:
        """The values to count under: each one kept if its vocabulary knows it, else `other`."""
        given = dict(zip(names, values, strict=True))
        return tuple(self._value(name, value, given) for name, value in given.items())

    def _value(self, name: str, value: str, given: dict[str, str]) -> str:
        if not value or name in _OWN_VALUES:  # "" means none: a route that reached no model
            return value
        kept: bool
        match name:
            case "pattern":
                if value == TEMPLATE or value.startswith(_TEMPLATE_PREFIXES):
                    return TEMPLATE
                kept = self.is_pattern(value)
            case "provider":
                kept = value in self.providers
            case "model":  # the model's own name, beside its provider
                kept = self.knows_model(f"{given.get('provider', '')}/{value}")
            case "from_model" | "to_model":
                kept = self.knows_model(value)
            case "error_type":
                kept = value in self._error_types
            case "role":  # a message's role
                kept = value in _ROLES
            case _:
                kept = False
        return value if kept else OTHER

    def knows_model(self, model: str) -> bool:
        """Whether `provider/name` is configured or named by a pattern file."""
        if model in self.models or model in self._from_patterns:
            return True
        now = self.clock()
        asked = self._patterns_asked_at
        if asked is None or now - asked >= PATTERN_MODELS_SECONDS:
            self._patterns_asked_at = now
            self._from_patterns = frozenset(self.pattern_models())
        return model in self._from_patterns


class Bounded(Generic[M]):
    """A labelled series whose label values go through the vocabulary first."""

    def __init__(self, metric: M, names: Sequence[str], vocabulary: LabelVocabulary) -> None:
        vocabulary.check(names)
        self.metric: M = metric
        self._names = tuple(names)
        self._vocabulary = vocabulary

    def labels(self, *values: str) -> M:
        return self.metric.labels(*self._vocabulary.bound(self._names, values))
