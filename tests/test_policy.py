"""ModelSelectionPolicy (`app.routing.policy`) and the Settings it is configured from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import SecretStr

from app.config import Settings, task_model_env_name
from app.errors import ConfigurationProblems, InvalidModel
from app.routing.policy import ChainLinks, ModelSelectionPolicy, split_model
from app.schemas import ModelChoice, ModelSource

DEFAULT = "openai/gpt-4o-mini"
EXPLICIT = "anthropic/claude-sonnet-4-5"
HINT = "ollama/llama3.2:3b"


def default_policy() -> ModelSelectionPolicy:
    return ModelSelectionPolicy(ChainLinks(default_model=DEFAULT))


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No GENAI_/provider variables leak in from the machine running the tests."""
    for key in list(os.environ):
        if key.startswith(("GENAI_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)  # and no stray .env file
    return monkeypatch


# --- the chain --------------------------------------------------------------------------------


def test_explicit_model_wins_over_hint_and_default() -> None:
    choice = default_policy().choose_model(EXPLICIT, hint=HINT)
    assert choice.model == EXPLICIT
    assert choice.provider == "anthropic"
    assert choice.name == "claude-sonnet-4-5"
    assert choice.source == "request"
    assert "request" in choice.reason


def test_hint_wins_over_default_when_no_explicit_model() -> None:
    choice = default_policy().choose_model(None, hint=HINT)
    assert (choice.model, choice.provider, choice.name) == (HINT, "ollama", "llama3.2:3b")
    assert choice.source == "hint"
    assert "model_hint" in choice.reason


def test_default_is_used_when_neither_explicit_nor_hint() -> None:
    choice = default_policy().choose_model(None)
    assert (choice.model, choice.provider, choice.name) == (DEFAULT, "openai", "gpt-4o-mini")
    assert choice.source == "config_default"
    assert "GENAI_DEFAULT_MODEL" in choice.reason


def test_empty_explicit_model_counts_as_not_given() -> None:
    assert default_policy().choose_model("", hint=HINT).source == "hint"


LADDER: list[tuple[ModelSource, str]] = [
    ("request", "openai/from-request"),
    ("cli_task", "openai/from-cli-task"),
    ("cli", "openai/from-cli"),
    ("env_task", "openai/from-env-task"),
    ("env", "openai/from-env"),
    ("config_task", "openai/from-config-task"),
    ("hint", "openai/from-hint"),
    ("config_default", "openai/from-default"),
]
MODEL_OF: dict[ModelSource, str] = dict(LADDER)


def choose_from(levels: set[ModelSource]) -> ModelChoice:
    """The choice with exactly `levels` set (the default always is), each to its own model, for
    the pattern `email/reply` whose tag is `email`."""

    def given(level: ModelSource) -> str | None:
        return MODEL_OF[level] if level in levels else None

    def per_task(level: ModelSource, key: str = "email/reply") -> dict[str, str]:
        return {key: MODEL_OF[level]} if level in levels else {}

    policy = ModelSelectionPolicy(
        ChainLinks(
            default_model=MODEL_OF["config_default"],
            model=given("env"),
            task_models=per_task("config_task"),
            cli_model=given("cli"),
            cli_task_models=per_task("cli_task"),
            env_task_models=per_task("env_task", "GENAI_MODEL_EMAIL_REPLY"),
        )
    )
    return policy.choose_model(given("request"), tasks=("email/reply", "email"), hint=given("hint"))


@pytest.mark.parametrize("index", range(len(LADDER)))
def test_each_link_beats_every_link_below_it(index: int) -> None:
    source, model = LADDER[index]
    choice = choose_from({level for level, _ in LADDER[index:]})
    assert (choice.source, choice.model) == (source, model)


@pytest.mark.parametrize("index", range(1, len(LADDER)))
def test_each_link_loses_to_the_link_above_it(index: int) -> None:
    above, model = LADDER[index - 1]
    choice = choose_from({above, LADDER[index][0]})
    assert (choice.source, choice.model) == (above, model)


def test_a_task_entry_matches_the_pattern_name_before_its_tags_in_order() -> None:
    tasks = ("email/reply", "draft", "email")
    by_tag = ModelSelectionPolicy(
        ChainLinks(
            default_model=DEFAULT,
            task_models={"email": "openai/by-second-tag", "draft": "openai/by-first-tag"},
        )
    ).choose_model(None, tasks=tasks)
    assert (by_tag.source, by_tag.model) == ("config_task", "openai/by-first-tag")
    assert "task_models.draft" in by_tag.reason
    by_name = ModelSelectionPolicy(
        ChainLinks(
            default_model=DEFAULT,
            task_models={"draft": "openai/by-first-tag", "email/reply": "openai/by-name"},
        )
    ).choose_model(None, tasks=tasks)
    assert by_name.model == "openai/by-name"


def test_a_tag_entry_on_a_higher_link_beats_a_name_entry_on_a_lower_one() -> None:
    policy = ModelSelectionPolicy(
        ChainLinks(
            default_model=DEFAULT,
            cli_task_models={"email": "openai/cli-tag"},
            task_models={"email/reply": "openai/file-name"},
        )
    )
    choice = policy.choose_model(None, tasks=("email/reply", "email"))
    assert (choice.source, choice.model) == ("cli_task", "openai/cli-tag")


def test_task_entries_for_other_tasks_are_not_used() -> None:
    policy = ModelSelectionPolicy(
        ChainLinks(
            default_model=DEFAULT,
            cli_task_models={"summarize": "openai/elsewhere"},
            env_task_models={"GENAI_MODEL_SUMMARIZE": "openai/elsewhere"},
            task_models={"summarize": "openai/elsewhere"},
        )
    )
    assert policy.choose_model(None, tasks=("email/reply",)).source == "config_default"


@pytest.mark.parametrize(
    ("task", "variable"),
    [
        ("summarize", "GENAI_MODEL_SUMMARIZE"),
        ("email/reply", "GENAI_MODEL_EMAIL_REPLY"),
        ("code-review.v2", "GENAI_MODEL_CODE_REVIEW_V2"),
        ("Mixed Case", "GENAI_MODEL_MIXED_CASE"),
    ],
)
def test_the_task_variable_is_upper_case_with_every_other_character_an_underscore(
    task: str, variable: str
) -> None:
    assert task_model_env_name(task) == variable
    policy = ModelSelectionPolicy(
        ChainLinks(default_model=DEFAULT, env_task_models={variable: EXPLICIT})
    )
    choice = policy.choose_model(None, tasks=(task,))
    assert (choice.source, choice.model) == ("env_task", EXPLICIT)
    assert variable in choice.reason


def test_the_retired_order_knob_is_refused_with_a_line_saying_so(
    clean_env: pytest.MonkeyPatch,
) -> None:
    assert "model_selection_order" not in Settings.model_fields
    clean_env.setenv("GENAI_MODEL_SELECTION_ORDER", "default,hint,explicit")
    with pytest.raises(ConfigurationProblems) as caught:
        ModelSelectionPolicy.from_settings(Settings(_env_file=None))
    [(setting, problem)] = caught.value.problems
    assert setting == "GENAI_MODEL_SELECTION_ORDER"
    assert problem.startswith("removed: the model chain has a fixed order (request > ")


def test_task_variables_are_collected_from_the_environment(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GENAI_MODEL_EMAIL_REPLY", "anthropic/claude-haiku-4-5")
    clean_env.setenv("GENAI_MODEL", "openai/gpt-4o")
    settings = Settings(_env_file=None)
    assert settings.env_task_models == {"GENAI_MODEL_EMAIL_REPLY": "anthropic/claude-haiku-4-5"}
    assert settings.model == "openai/gpt-4o"
    policy = ModelSelectionPolicy.from_settings(settings)
    assert policy.choose_model(None, tasks=("email/reply",)).source == "env_task"
    assert policy.choose_model(None, tasks=("summarize",)).source == "env"


def test_task_variables_are_read_from_dotenv_too_and_the_environment_wins(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text(
        "GENAI_MODEL_SUMMARIZE=openai/from-dotenv\nGENAI_MODEL_DRAFT=openai/dotenv-draft\n"
    )
    clean_env.setenv("GENAI_MODEL_DRAFT", "openai/env-draft")
    settings = Settings()
    assert settings.env_task_models == {
        "GENAI_MODEL_SUMMARIZE": "openai/from-dotenv",
        "GENAI_MODEL_DRAFT": "openai/env-draft",
    }


def test_every_unusable_model_setting_is_one_problem_naming_the_setting(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("GENAI_MODEL_SUMMARIZE", "no-slash")
    settings = Settings(
        _env_file=None,
        default_model="nowhere/model",
        task_models={"email": "openai/fine", "draft": "mistral/large"},
        fallbacks={"openai/gpt-4o": ["anthropic/fine", "mystery-model"]},
        cli_model="openai/",
    )
    with pytest.raises(ConfigurationProblems) as caught:
        ModelSelectionPolicy.from_settings(settings)
    problems = dict(caught.value.problems)
    assert set(problems) == {
        "GENAI_DEFAULT_MODEL (default_model)",
        "GENAI_MODEL_SUMMARIZE",
        "task_models.draft",
        "fallbacks.openai/gpt-4o[1]",
        "--model",
    }
    assert "Unknown provider 'nowhere'" in problems["GENAI_DEFAULT_MODEL (default_model)"]
    assert "provider/model" in problems["GENAI_MODEL_SUMMARIZE"]


def test_a_configured_endpoint_is_a_known_provider(clean_env: pytest.MonkeyPatch) -> None:
    settings = Settings(
        _env_file=None,
        endpoints={"vllm": {"base_url": "http://127.0.0.1:9/v1"}},
        task_models={"summarize": "vllm/meta-llama/Llama-3.1-8B-Instruct"},
    )
    policy = ModelSelectionPolicy.from_settings(settings)
    choice = policy.choose_model(None, tasks=("summarize",))
    assert (choice.provider, choice.name) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
    with pytest.raises(InvalidModel, match="vllm"):  # the message lists the known ones
        policy.split("groq/llama-3.1-8b-instant")
    with pytest.raises(InvalidModel):
        split_model("vllm/some-model")  # not without the settings that declare it


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
    choice = default_policy().choose_model(model)
    assert (choice.provider, choice.name, choice.model) == (provider, name, f"{provider}/{name}")


@pytest.mark.parametrize("model", ["gpt-4o-mini", "openai", "openai/", "/gpt-4o", ""])
def test_model_without_provider_slash_model_is_invalid(model: str) -> None:
    with pytest.raises(InvalidModel, match="provider/model"):
        split_model(model)


def test_a_bare_model_id_resolves_through_the_alias_map_and_an_unknown_one_is_invalid() -> None:
    policy = default_policy()
    assert policy.choose_model("gpt-4o-mini").model == "openai/gpt-4o-mini"
    assert policy.choose_model("claude-sonnet-4-5").model == "anthropic/claude-sonnet-4-5"
    assert policy.choose_model("llama3.2").model == "ollama/llama3.2"
    assert policy.choose_model("gpt-oss:20b").model == "ollama/gpt-oss:20b"  # longest pattern
    with pytest.raises(InvalidModel, match="alias"):
        policy.choose_model("mystery-model")


def test_configured_aliases_win_and_may_name_a_whole_model() -> None:
    settings = Settings(
        _env_file=None, model_aliases={"fast": "openai/gpt-4o-mini", "gpt-*": "anthropic"}
    )
    policy = ModelSelectionPolicy.from_settings(settings)
    assert policy.choose_model("fast").model == "openai/gpt-4o-mini"
    assert policy.choose_model("gpt-5").model == "anthropic/gpt-5"


def test_an_alias_to_an_unknown_provider_is_refused_at_start() -> None:
    settings = Settings(_env_file=None, model_aliases={"x-*": "nowhere"})
    with pytest.raises(ConfigurationProblems, match=r"model_aliases\.x-"):
        ModelSelectionPolicy.from_settings(settings)


def test_unknown_provider_is_invalid_model_and_names_the_known_ones() -> None:
    with pytest.raises(InvalidModel) as caught:
        default_policy().choose_model("mistral/large")
    assert "mistral" in caught.value.message
    assert "openai" in caught.value.message


def test_invalid_hint_is_invalid_model_when_the_hint_is_chosen() -> None:
    with pytest.raises(InvalidModel):
        default_policy().choose_model(None, hint="not-a-model")


@pytest.mark.parametrize("bad", ["mystery-model", "unknown/model", "openai/"])
def test_bad_default_model_fails_at_construction(bad: str) -> None:
    with pytest.raises(InvalidModel):
        ModelSelectionPolicy(ChainLinks(default_model=bad))


def test_bad_default_model_from_settings_fails_at_construction(
    clean_env: pytest.MonkeyPatch,
) -> None:
    settings = Settings(_env_file=None, default_model="nowhere/model")
    with pytest.raises(ConfigurationProblems, match="GENAI_DEFAULT_MODEL"):
        ModelSelectionPolicy.from_settings(settings)


# --- Settings parsing -------------------------------------------------------------------------


def test_settings_defaults(clean_env: pytest.MonkeyPatch) -> None:
    settings = Settings(_env_file=None)
    assert settings.pattern_dir == [Path("patterns")]
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


def test_model_aliases_from_the_environment_are_not_a_task_named_aliases(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("GENAI_MODEL_ALIASES", '{"fast": "openai/gpt-4o-mini"}')
    settings = Settings(_env_file=None)
    assert settings.model_aliases == {"fast": "openai/gpt-4o-mini"}
    assert settings.env_task_models == {}
    assert ModelSelectionPolicy.from_settings(settings).choose_model("fast").name == "gpt-4o-mini"
