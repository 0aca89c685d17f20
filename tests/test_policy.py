"""ModelSelectionPolicy (`app.routing.policy`) and the Settings it is configured from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from app.config import Settings
from app.errors import InvalidModel
from app.routing.policy import ModelSelectionPolicy, split_model

DEFAULT = "openai/gpt-4o-mini"
EXPLICIT = "anthropic/claude-sonnet-4-5"
HINT = "ollama/llama3.2:3b"


def default_policy() -> ModelSelectionPolicy:
    return ModelSelectionPolicy(order=["explicit", "hint", "default"], default_model=DEFAULT)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No GENAI_/provider variables leak in from the machine running the tests."""
    for key in list(os.environ):
        if key.startswith(("GENAI_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # and no stray .env file
    return monkeypatch


# --- default order ----------------------------------------------------------------------------


def test_explicit_model_wins_over_hint_and_default() -> None:
    choice = default_policy().choose_model(EXPLICIT, HINT)
    assert choice.model == EXPLICIT
    assert choice.provider == "anthropic"
    assert choice.name == "claude-sonnet-4-5"
    assert choice.source == "request"
    assert "request" in choice.reason


def test_hint_wins_over_default_when_no_explicit_model() -> None:
    choice = default_policy().choose_model(None, HINT)
    assert (choice.model, choice.provider, choice.name) == (HINT, "ollama", "llama3.2:3b")
    assert choice.source == "hint"
    assert "model_hint" in choice.reason


def test_default_is_used_when_neither_explicit_nor_hint() -> None:
    choice = default_policy().choose_model(None, None)
    assert (choice.model, choice.provider, choice.name) == (DEFAULT, "openai", "gpt-4o-mini")
    assert choice.source == "config_default"
    assert "default" in choice.reason


def test_empty_explicit_model_counts_as_not_given() -> None:
    assert default_policy().choose_model("", HINT).source == "hint"


def test_reason_states_the_order_that_was_applied() -> None:
    choice = default_policy().choose_model(None, None)
    assert "explicit > hint > default" in choice.reason


# --- configured order -------------------------------------------------------------------------


def test_configured_order_changes_the_choice_without_code_changes(
    clean_env: pytest.MonkeyPatch,
) -> None:
    settings = Settings(_env_file=None, model_selection_order="hint,explicit,default")
    assert settings.model_selection_order == ["hint", "explicit", "default"]
    policy = ModelSelectionPolicy.from_settings(settings)
    choice = policy.choose_model(EXPLICIT, HINT)
    assert choice.source == "hint"
    assert choice.model == HINT
    assert "hint > explicit > default" in choice.reason
    # Without a hint the next source in the configured order applies.
    assert policy.choose_model(EXPLICIT, None).source == "request"
    # The stock order, same inputs: the explicit model wins.
    assert default_policy().choose_model(EXPLICIT, HINT).source == "request"


def test_configured_order_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GENAI_MODEL_SELECTION_ORDER", "default, explicit")
    clean_env.setenv("GENAI_DEFAULT_MODEL", "anthropic/claude-haiku")
    policy = ModelSelectionPolicy.from_settings(Settings(_env_file=None))
    choice = policy.choose_model(EXPLICIT, HINT)
    assert (choice.source, choice.model) == ("config_default", "anthropic/claude-haiku")


def test_order_that_leaves_no_source_raises_invalid_model() -> None:
    policy = ModelSelectionPolicy(order=["explicit"], default_model=DEFAULT)
    with pytest.raises(InvalidModel) as caught:
        policy.choose_model(None, HINT)
    assert caught.value.status_code == 422
    assert caught.value.error_type == "invalid_model"
    assert policy.choose_model(EXPLICIT, HINT).model == EXPLICIT


def test_order_without_default_and_no_explicit_or_hint_raises_invalid_model() -> None:
    policy = ModelSelectionPolicy(order=["explicit", "hint"], default_model=DEFAULT)
    with pytest.raises(InvalidModel):
        policy.choose_model(None, None)


# --- model names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "provider", "name"),
    [
        ("ollama/llama3.2:3b", "ollama", "llama3.2:3b"),
        ("openai/org/model", "openai", "org/model"),
        ("openai/ft:gpt-4o-mini:acme::abc123", "openai", "ft:gpt-4o-mini:acme::abc123"),
        ("anthropic/claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("OpenAI/gpt-4o", "openai", "gpt-4o"),
    ],
)
def test_model_part_may_contain_slashes_and_colons(model: str, provider: str, name: str) -> None:
    assert split_model(model) == (provider, name)
    choice = default_policy().choose_model(model, None)
    assert (choice.provider, choice.name, choice.model) == (provider, name, f"{provider}/{name}")


@pytest.mark.parametrize("model", ["gpt-4o-mini", "openai", "openai/", "/gpt-4o", ""])
def test_model_without_provider_slash_model_is_invalid(model: str) -> None:
    with pytest.raises(InvalidModel, match="provider/model"):
        split_model(model)


def test_explicit_model_without_slash_is_invalid_model() -> None:
    with pytest.raises(InvalidModel):
        default_policy().choose_model("gpt-4o-mini", None)


def test_unknown_provider_is_invalid_model_and_names_the_known_ones() -> None:
    with pytest.raises(InvalidModel) as caught:
        default_policy().choose_model("mistral/large", None)
    assert "mistral" in caught.value.message
    assert "openai" in caught.value.message


def test_invalid_hint_is_invalid_model_when_the_hint_is_chosen() -> None:
    with pytest.raises(InvalidModel):
        default_policy().choose_model(None, "not-a-model")


@pytest.mark.parametrize("bad", ["gpt-4o-mini", "unknown/model", "openai/"])
def test_bad_default_model_fails_at_construction(bad: str) -> None:
    with pytest.raises(InvalidModel):
        ModelSelectionPolicy(order=["explicit", "hint", "default"], default_model=bad)


def test_bad_default_model_from_settings_fails_at_construction(
    clean_env: pytest.MonkeyPatch,
) -> None:
    settings = Settings(_env_file=None, default_model="nowhere/model")
    with pytest.raises(InvalidModel):
        ModelSelectionPolicy.from_settings(settings)


# --- Settings parsing -------------------------------------------------------------------------


def test_settings_defaults(clean_env: pytest.MonkeyPatch) -> None:
    settings = Settings(_env_file=None)
    assert settings.pattern_dir == [Path("patterns")]
    assert settings.model_selection_order == ["explicit", "hint", "default"]
    assert settings.default_model == DEFAULT
    assert settings.openai.api_key is None


def test_pattern_dir_env_splits_on_os_pathsep_in_order(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GENAI_PATTERN_DIR", os.pathsep.join(["/srv/team", "patterns", "/srv/shared"]))
    settings = Settings(_env_file=None)
    assert settings.pattern_dir == [Path("/srv/team"), Path("patterns"), Path("/srv/shared")]


def test_pattern_dir_env_with_one_root(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GENAI_PATTERN_DIR", "/srv/only")
    assert Settings(_env_file=None).pattern_dir == [Path("/srv/only")]


def test_pattern_dir_env_ignores_empty_segments(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GENAI_PATTERN_DIR", f"/a{os.pathsep}{os.pathsep}/b{os.pathsep}")
    assert Settings(_env_file=None).pattern_dir == [Path("/a"), Path("/b")]


def test_model_selection_order_env_is_a_comma_list(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GENAI_MODEL_SELECTION_ORDER", " hint , default ")
    assert Settings(_env_file=None).model_selection_order == ["hint", "default"]


@pytest.mark.parametrize(
    "order", ["hint,hint,default", "explicit,hint,explicit", "default,default"]
)
def test_model_selection_order_with_duplicates_is_rejected(
    clean_env: pytest.MonkeyPatch, order: str
) -> None:
    clean_env.setenv("GENAI_MODEL_SELECTION_ORDER", order)
    with pytest.raises(ValidationError, match="at most once"):
        Settings(_env_file=None)


@pytest.mark.parametrize("order", ["", "explicit,cheapest", "random"])
def test_model_selection_order_empty_or_unknown_source_is_rejected(
    clean_env: pytest.MonkeyPatch, order: str
) -> None:
    with pytest.raises(ValidationError):
        Settings(_env_file=None, model_selection_order=order)


def test_openai_api_key_env_is_read_as_a_secret_hidden_from_repr(
    clean_env: pytest.MonkeyPatch,
) -> None:
    key = "sk-test-DO-NOT-PRINT-0123456789"
    clean_env.setenv("OPENAI_API_KEY", key)
    settings = Settings(_env_file=None)
    assert isinstance(settings.openai.api_key, SecretStr)
    assert settings.openai.api_key.get_secret_value() == key
    assert key not in repr(settings.openai.api_key)
    assert key not in repr(settings.openai)
    assert key not in repr(settings)
    assert key not in str(settings)
    assert key not in settings.model_dump_json()


def test_openai_api_key_is_kept_when_a_nested_genai_openai_option_is_set(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("OPENAI_API_KEY", "sk-kept")
    clean_env.setenv("GENAI_OPENAI__BASE_URL", "http://localhost:9999/v1")
    settings = Settings(_env_file=None)
    assert settings.openai.base_url == "http://localhost:9999/v1"
    assert settings.openai.api_key is not None
    assert settings.openai.api_key.get_secret_value() == "sk-kept"
