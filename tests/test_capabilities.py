"""Tests for the data-driven provider/model capabilities (app.routing.capabilities)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from app.routing.capabilities import Capabilities, CapabilityCatalog

SHIPPED = yaml.safe_load(resources.files("app.routing").joinpath("capabilities.yaml").read_text())


@pytest.fixture(scope="module")
def catalog() -> CapabilityCatalog:
    return CapabilityCatalog.load()


def user_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "capabilities.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# --- shipped defaults ---------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic", "ollama"])
def test_an_unlisted_model_gets_its_providers_shipped_defaults(
    catalog: CapabilityCatalog, provider: str
) -> None:
    expected = Capabilities(**SHIPPED["providers"][provider]["defaults"])
    assert catalog.for_model(provider, "no-such-model-xyz") == expected


def test_shipped_provider_defaults_differ_per_provider(catalog: CapabilityCatalog) -> None:
    openai = catalog.for_model("openai", "unlisted")
    anthropic = catalog.for_model("anthropic", "unlisted")
    ollama = catalog.for_model("ollama", "unlisted")
    assert openai.context_tokens == 128000
    assert anthropic.context_tokens == 200000
    assert ollama.context_tokens == 8192
    assert all(c.supports_system_prompt for c in (openai, anthropic, ollama))


def test_an_unknown_provider_gets_the_plain_default_capabilities(
    catalog: CapabilityCatalog,
) -> None:
    assert catalog.for_model("no-such-provider", "gpt-5") == Capabilities()


def test_a_matching_pattern_overrides_only_the_keys_it_names(
    catalog: CapabilityCatalog,
) -> None:
    caps = catalog.for_model("openai", "o1-mini-2024-09-12")
    assert caps.supports_system_prompt is False
    assert caps.supports_tools is False
    assert caps.supports_streaming is True  # from the provider defaults
    assert caps.context_tokens == 128000


def test_patterns_are_shell_style_and_case_sensitive(catalog: CapabilityCatalog) -> None:
    assert catalog.for_model("ollama", "gemma:7b").supports_system_prompt is False
    assert catalog.for_model("ollama", "gemma3:4b").supports_system_prompt is True
    assert catalog.for_model("ollama", "GEMMA:7b").supports_system_prompt is True


# --- precedence ---------------------------------------------------------------------------


def test_the_longest_matching_pattern_wins_over_shorter_ones_and_defaults(
    tmp_path: Path,
) -> None:
    path = user_file(
        tmp_path,
        """
providers:
  acme:
    defaults: {context_tokens: 100, output_tokens: 10, supports_tools: true}
    models:
      "*": {context_tokens: 200}
      "big*": {context_tokens: 300, output_tokens: 30}
      "big-model-v2*": {context_tokens: 400}
""",
    )
    catalog = CapabilityCatalog.load(path)
    caps = catalog.for_model("acme", "big-model-v2-latest")
    assert caps.context_tokens == 400  # the longest pattern
    assert caps.output_tokens == 30  # a shorter pattern still beats the defaults
    assert caps.supports_tools is True  # only the defaults name it
    assert catalog.for_model("acme", "big-model-v1").context_tokens == 300
    assert catalog.for_model("acme", "small").context_tokens == 200


def test_longest_pattern_wins_regardless_of_listing_order(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        """
providers:
  acme:
    models:
      "m-large-*": {context_tokens: 999}
      "m-*": {context_tokens: 111}
""",
    )
    assert CapabilityCatalog.load(path).for_model("acme", "m-large-1").context_tokens == 999


@pytest.mark.parametrize(
    ("supports", "expected"),
    [
        ("system_prompt", False),
        ("structured_output", True),
        ("tools", False),
        ("streaming", True),
    ],
)
def test_supports_reads_the_named_capability(supports: str, expected: bool) -> None:
    caps = Capabilities(
        supports_system_prompt=False,
        supports_structured_output=True,
        supports_tools=False,
        supports_streaming=True,
    )
    assert caps.supports(supports) is expected  # type: ignore[arg-type]


# --- the user file ------------------------------------------------------------------------


def test_a_user_file_overrides_a_shipped_default(tmp_path: Path) -> None:
    path = user_file(tmp_path, "providers:\n  openai:\n    defaults: {supports_tools: false}\n")
    catalog = CapabilityCatalog.load(path)
    caps = catalog.for_model("openai", "unlisted")
    assert caps.supports_tools is False
    assert caps.context_tokens == 128000  # other shipped defaults survive
    assert CapabilityCatalog.load().for_model("openai", "unlisted").supports_tools is True


def test_a_user_file_overrides_a_shipped_model_pattern_key_by_key(tmp_path: Path) -> None:
    path = user_file(
        tmp_path, 'providers:\n  openai:\n    models:\n      "gpt-4.1*": {output_tokens: 1000}\n'
    )
    caps = CapabilityCatalog.load(path).for_model("openai", "gpt-4.1-mini")
    assert caps.output_tokens == 1000
    assert caps.context_tokens == 1047576  # the shipped pattern's other key survives


def test_a_user_file_adds_a_new_model_pattern(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        'providers:\n  ollama:\n    models:\n      "qwen2.5*": {context_tokens: 32768}\n',
    )
    catalog = CapabilityCatalog.load(path)
    assert catalog.for_model("ollama", "qwen2.5:7b").context_tokens == 32768
    assert catalog.for_model("ollama", "gemma:2b").supports_system_prompt is False


def test_a_user_file_adds_a_new_provider(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        """
providers:
  mistral:
    defaults: {supports_tools: true, context_tokens: 32000}
    models:
      "mistral-large*": {context_tokens: 128000}
""",
    )
    catalog = CapabilityCatalog.load(path)
    assert catalog.for_model("mistral", "mistral-small") == Capabilities(
        supports_tools=True, context_tokens=32000
    )
    assert catalog.for_model("mistral", "mistral-large-2").context_tokens == 128000
    assert catalog.for_model("openai", "unlisted").context_tokens == 128000


def test_an_empty_user_file_changes_nothing(tmp_path: Path) -> None:
    catalog = CapabilityCatalog.load(user_file(tmp_path, ""))
    shipped = CapabilityCatalog.load()
    for provider, model in [("openai", "o1-mini"), ("anthropic", "claude-opus-4-1")]:
        assert catalog.for_model(provider, model) == shipped.for_model(provider, model)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("provider:\n  openai: {}\n", "provider"),
        ("providers:\n  openai:\n    default: {}\n", "default"),
        ("providers:\n  openai:\n    defaults: {supports_telepathy: true}\n", "supports_telepathy"),
        (
            'providers:\n  openai:\n    models:\n      "x*": {supports_vision: true}\n',
            "supports_vision",
        ),
        ("providers:\n  openai:\n    defaults: {context_tokens: lots}\n", "context_tokens"),
        ('providers:\n  openai:\n    models:\n      "x*": {output_tokens: 0}\n', "output_tokens"),
        ("providers:\n  openai:\n    defaults: {supports_tools: maybe}\n", "supports_tools"),
        ("providers:\n  openai:\n    models: [a, b]\n", "models"),
        ("providers: [openai]\n", "providers"),
    ],
)
def test_an_invalid_user_file_fails_at_load_naming_the_problem(
    tmp_path: Path, text: str, named: str
) -> None:
    path = user_file(tmp_path, text)
    with pytest.raises(ValueError, match=named):
        CapabilityCatalog.load(path)


def test_a_user_file_with_bad_yaml_fails_at_load_naming_the_file(tmp_path: Path) -> None:
    path = user_file(tmp_path, "providers:\n  openai: {defaults: [unclosed\n")
    with pytest.raises(ValueError, match="invalid") as raised:
        CapabilityCatalog.load(path)
    assert str(path) in str(raised.value)


def test_a_bad_model_entry_is_reported_with_its_provider_and_pattern(tmp_path: Path) -> None:
    path = user_file(
        tmp_path, 'providers:\n  acme:\n    models:\n      "bad*": {context_tokens: -1}\n'
    )
    with pytest.raises(ValueError, match=r"acme/bad\*"):
        CapabilityCatalog.load(path)


# --- the shipped file ---------------------------------------------------------------------


SHIPPED_PATTERNS = [
    (provider, pattern)
    for provider, entry in SHIPPED["providers"].items()
    for pattern in entry.get("models", {})
]


def test_the_shipped_file_lists_model_patterns() -> None:
    assert len(SHIPPED_PATTERNS) >= 3


@pytest.mark.parametrize(("provider", "pattern"), SHIPPED_PATTERNS)
def test_every_shipped_model_pattern_yields_valid_capabilities(
    catalog: CapabilityCatalog, provider: str, pattern: str
) -> None:
    model = pattern.replace("*", "example").replace("?", "x")
    caps = catalog.for_model(provider, model)
    assert isinstance(caps, Capabilities)
    entry = SHIPPED["providers"][provider]
    expected = {**entry["defaults"], **entry["models"][pattern]}
    for key, value in expected.items():
        assert getattr(caps, key) == value, (provider, pattern, key)


# --- shortfalls ---------------------------------------------------------------------------


def test_a_capable_model_has_no_shortfalls(catalog: CapabilityCatalog) -> None:
    assert catalog.shortfalls("openai", "gpt-4o-mini", max_tokens=100, prompt_chars=400) == []


def test_shortfalls_name_each_missing_requirement_in_words(tmp_path: Path) -> None:
    path = user_file(
        tmp_path,
        "providers:\n  acme:\n    defaults: {supports_structured_output: false, "
        "supports_tools: false, supports_streaming: true}\n",
    )
    catalog = CapabilityCatalog.load(path)
    found = catalog.shortfalls("acme", "m", requires=["structured_output", "tools", "streaming"])
    assert found == ["no structured output support", "no tools support"]


def test_shortfalls_compare_max_tokens_with_the_output_limit(tmp_path: Path) -> None:
    path = user_file(tmp_path, "providers:\n  acme:\n    defaults: {output_tokens: 1000}\n")
    found = CapabilityCatalog.load(path).shortfalls("acme", "m", max_tokens=1001)
    assert found == ["max_tokens 1001 exceeds its output limit 1000"]


def test_shortfalls_estimate_the_prompt_plus_answer_against_the_context(tmp_path: Path) -> None:
    path = user_file(
        tmp_path, "providers:\n  acme:\n    defaults: {context_tokens: 1000, output_tokens: 500}\n"
    )
    catalog = CapabilityCatalog.load(path)
    # About four characters a token: 3,600 characters are ~900 tokens, plus 100 to answer.
    assert catalog.shortfalls("acme", "m", max_tokens=100, prompt_chars=3600) == []
    assert catalog.shortfalls("acme", "m", max_tokens=101, prompt_chars=3600) == [
        "the prompt is too long for its context window (context_length_exceeded): ~1001 tokens "
        "with max_tokens, over its 1000"
    ]
