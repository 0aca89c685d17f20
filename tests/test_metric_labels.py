"""The label vocabulary: whatever a caller names, a label value comes from a bounded set."""

from __future__ import annotations

from collections.abc import Collection

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import Counter

from app.config import Settings
from app.observability.metric_labels import (
    OTHER,
    PATTERN_MODELS_SECONDS,
    TEMPLATE,
    Bounded,
    LabelVocabulary,
)
from app.observability.metrics import Metrics
from app.routing.policy import configured_model_ids

MODELS = frozenset({"openai/gpt-4o-mini", "anthropic/claude-haiku-4-5"})
PATTERNS = frozenset({"summarize", "email/reply", "builtin:chat"})


def vocabulary(**changes: object) -> LabelVocabulary:
    fields: dict[str, object] = {
        "models": MODELS,
        "providers": frozenset({"openai", "anthropic"}),
        "is_pattern": PATTERNS.__contains__,
    }
    return LabelVocabulary(**{**fields, **changes})  # type: ignore[arg-type]


def bound(vocabulary: LabelVocabulary, **labels: str) -> dict[str, str]:
    return dict(zip(labels, vocabulary.bound(list(labels), list(labels.values())), strict=True))


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"pattern": "summarize"}, "summarize"),
        ({"pattern": "builtin:chat"}, "builtin:chat"),
        ({"pattern": "made-up"}, OTHER),
        ({"pattern": "template:reply:writer:v3"}, TEMPLATE),
        ({"pattern": "fallback:made-up:critic"}, TEMPLATE),
        ({"pattern": ""}, ""),  # a route that reached no pattern
        ({"provider": "openai"}, "openai"),
        ({"provider": "unknown"}, OTHER),
        ({"from_model": "openai/gpt-4o-mini"}, "openai/gpt-4o-mini"),
        ({"to_model": "openai/made-up"}, OTHER),
        ({"error_type": "upstream_error"}, "upstream_error"),
        ({"error_type": "ConnectionResetError"}, OTHER),
        ({"role": "assistant"}, "assistant"),
        ({"role": "critic"}, OTHER),
        ({"route": "/v1/jobs/{job_id}"}, "/v1/jobs/{job_id}"),  # the gateway's own values
        ({"status": "499"}, "499"),
        ({"limit": "provider:openai"}, "provider:openai"),
    ],
)
def test_each_label_keeps_what_its_vocabulary_knows_and_counts_the_rest_as_other(
    labels: dict[str, str], expected: str
) -> None:
    [(name, value)] = labels.items()
    assert bound(vocabulary(), **{name: value})[name] == expected


def test_a_model_is_kept_only_when_configured_for_its_own_provider() -> None:
    labels = vocabulary()
    assert bound(labels, provider="openai", model="gpt-4o-mini")["model"] == "gpt-4o-mini"
    assert bound(labels, provider="anthropic", model="gpt-4o-mini")["model"] == OTHER
    assert bound(labels, provider="openai", model="made-up")["model"] == OTHER


@given(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40))
def test_whatever_a_caller_sends_the_value_comes_from_the_bounded_set(
    pattern: str, provider: str, model: str
) -> None:
    got = bound(vocabulary(), pattern=pattern, provider=provider, model=model)
    assert got["pattern"] in PATTERNS | {OTHER, TEMPLATE, ""}
    assert got["provider"] in {"openai", "anthropic", OTHER, ""}
    assert got["model"] in {"gpt-4o-mini", "claude-haiku-4-5", OTHER, ""}


def test_without_a_vocabulary_every_value_a_caller_chooses_is_other() -> None:
    metrics = Metrics()
    metrics.requests.labels("/v1/completions", "summarize", "openai", "gpt-4o-mini", "200").inc()
    labels = {
        "route": "/v1/completions",
        "pattern": OTHER,
        "provider": OTHER,
        "model": OTHER,
        "status": "200",
    }
    assert metrics.registry.get_sample_value("genai_requests_total", labels) == 1


def test_a_label_without_a_vocabulary_is_refused_when_the_series_is_made() -> None:
    counter = Counter("made_total", "A series labelled by tenant.", ["tenant"], registry=None)
    with pytest.raises(ValueError, match="tenant"):
        Bounded(counter, ["tenant"], LabelVocabulary())


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_models_named_by_pattern_files_are_read_again_at_most_every_few_seconds() -> None:
    named = {"anthropic/claude-from-a-file"}
    asked: list[int] = []

    def pattern_models() -> Collection[str]:
        asked.append(1)
        return frozenset(named)

    clock = Clock()
    labels = vocabulary(pattern_models=pattern_models, clock=clock)
    assert labels.knows_model("openai/gpt-4o-mini") and not asked  # configured: never asked
    assert labels.knows_model("anthropic/claude-from-a-file") and len(asked) == 1
    named.add("openai/edited-in")
    for _ in range(100):  # a caller's made-up models cost one question per interval at most
        assert not labels.knows_model("openai/edited-in")
    assert len(asked) == 1
    clock.now += PATTERN_MODELS_SECONDS
    assert labels.knows_model("openai/edited-in") and len(asked) == 2


def test_configured_model_ids_resolve_aliases_and_keep_chains_kept_for_a_model() -> None:
    settings = Settings(
        _env_file=None,
        default_model="quick",
        model_aliases={"quick": "openai/gpt-4o-mini", "big": "anthropic"},
        task_models={"summarize": "OpenAI/gpt-4.1"},
        fallbacks={"anthropic/claude-opus-4-1": ["openai/o3"], "email/reply": ["openai/o4-mini"]},
    )
    assert configured_model_ids(settings) == {
        "openai/gpt-4o-mini",
        "openai/gpt-4.1",
        "anthropic/claude-opus-4-1",
        "openai/o3",
        "openai/o4-mini",
    }
