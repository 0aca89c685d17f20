"""The genai.yaml configuration file (`app.config.file`): where it ranks, what it refuses, and the
OpenAI-compatible endpoints it declares, end to end against the loopback fake."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.config import BUILTIN_PROVIDERS, Settings
from app.errors import ConfigurationProblems
from app.providers.registry import PROVIDER_NAMES
from tests.fakes.provider_server import FakeProviderServer
from tests.support import REPO_ROOT, SHIPPED_PATTERNS, run_cli, serve_app, settings_for

EXAMPLE = REPO_ROOT / "deploy" / "genai.example.yaml"


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    """Writes genai.yaml and names it in GENAI_CONFIG; the working directory has no .env."""
    monkeypatch.chdir(tmp_path)

    def write(text: str) -> Path:
        path = tmp_path / "genai.yaml"
        path.write_text(text, encoding="utf-8")
        monkeypatch.setenv("GENAI_CONFIG", str(path))
        return path

    return write


def problems_of(**init: Any) -> list[str]:
    """Each problem as the CLI prints it (without the `genai: ` prefix)."""
    with pytest.raises(ConfigurationProblems) as caught:
        Settings(_env_file=None, **init)
    return [f"{setting}: {problem}" for setting, problem in caught.value.problems]


# --- what the file sets, and what overrides it ------------------------------------------------


def test_no_file_is_read_without_genai_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "genai.yaml").write_text("default_model: anthropic/from-a-stray-file\n")
    assert Settings(_env_file=None).default_model == "openai/gpt-4o-mini"


def test_keys_map_onto_nested_settings(config: Callable[[str], Path]) -> None:
    config(
        "default_model: anthropic/claude-haiku-4-5\n"
        "upstream: {deadline_seconds: 30}\n"
        "limits: {per_provider: {ollama: 4}}\n"
        "fallbacks: {openai/gpt-4o: [anthropic/claude-sonnet-4-6]}\n"
        "task_models: {summarize: anthropic/claude-haiku-4-5}\n"
        "cache: {ttl_seconds: 60}\n"
        "prices: {vllm/*: {input: 0, output: 0}}\n"
    )
    settings = Settings(_env_file=None)
    assert settings.default_model == "anthropic/claude-haiku-4-5"
    assert settings.upstream.deadline_seconds == 30
    assert settings.upstream.max_retries == 2  # a default the file leaves alone
    assert settings.limits.per_provider == {"ollama": 4}
    assert settings.fallbacks == {"openai/gpt-4o": ["anthropic/claude-sonnet-4-6"]}
    assert settings.task_models == {"summarize": "anthropic/claude-haiku-4-5"}
    assert settings.cache.ttl_seconds == 60
    assert settings.prices["vllm/*"].output == 0


def test_the_environment_overrides_the_file_key_by_key(
    config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config("default_model: anthropic/from-file\nupstream: {deadline_seconds: 30, max_retries: 5}\n")
    monkeypatch.setenv("GENAI_DEFAULT_MODEL", "openai/from-env")
    monkeypatch.setenv("GENAI_UPSTREAM__DEADLINE_SECONDS", "9")
    settings = Settings(_env_file=None)
    assert settings.default_model == "openai/from-env"
    assert settings.upstream.deadline_seconds == 9
    assert settings.upstream.max_retries == 5  # its sibling still comes from the file


def test_dotenv_overrides_the_file_and_init_arguments_override_both(
    config: Callable[[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config("default_model: anthropic/from-file\nlog_level: DEBUG\n")
    (tmp_path / ".env").write_text("GENAI_DEFAULT_MODEL=openai/from-dotenv\n")
    assert Settings().default_model == "openai/from-dotenv"
    assert Settings().log_level == "DEBUG"
    assert Settings(default_model="ollama/from-init").default_model == "ollama/from-init"


def test_genai_config_may_come_from_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conf.yaml").write_text("default_model: anthropic/from-file\n")
    (tmp_path / ".env").write_text(f"GENAI_CONFIG={tmp_path / 'conf.yaml'}\n")
    assert Settings().default_model == "anthropic/from-file"


def test_an_empty_file_sets_nothing(config: Callable[[str], Path]) -> None:
    config("# nothing yet\n")
    assert Settings(_env_file=None).default_model == "openai/gpt-4o-mini"


# --- secrets by reference ---------------------------------------------------------------------


def test_a_secret_is_read_from_the_variable_the_file_names(
    config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config("openai: {api_key_env: MY_OPENAI_KEY, base_url: http://127.0.0.1:9/v1}\n")
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-from-my-variable")
    openai = Settings(_env_file=None).openai
    assert openai.api_key is not None
    assert openai.api_key.get_secret_value() == "sk-from-my-variable"
    assert openai.base_url == "http://127.0.0.1:9/v1"


def test_the_providers_own_variable_wins_over_the_files_reference(
    config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config("openai: {api_key_env: MY_OPENAI_KEY, base_url: http://file/v1}\n")
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-from-the-file-reference")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-api-key")
    openai = Settings(_env_file=None).openai
    assert openai.api_key is not None
    assert openai.api_key.get_secret_value() == "sk-from-openai-api-key"
    assert openai.base_url == "http://file/v1"


def test_a_literal_secret_is_refused_and_never_printed(config: Callable[[str], Path]) -> None:
    path = config("openai: {api_key: sk-live-do-not-print}\n")
    [line] = problems_of()
    assert line == (
        f"{path}: openai.api_key: a secret is never written in the config file: write "
        "`api_key_env: VARIABLE`, the environment variable holding it"
    )
    assert "sk-live" not in line


def test_a_reference_to_an_unset_variable_is_a_problem(config: Callable[[str], Path]) -> None:
    path = config("endpoints: {groq: {base_url: https://x/v1, api_key_env: GROQ_KEY_UNSET}}\n")
    assert problems_of() == [
        f"{path}: endpoints.groq.api_key_env: the environment variable GROQ_KEY_UNSET is not set"
    ]


# --- one line per problem ---------------------------------------------------------------------


def test_every_problem_is_one_line_naming_the_file_and_the_key_path(
    config: Callable[[str], Path],
) -> None:
    path = config(
        "upstream: {deadline_secnds: 30, max_retries: -1}\n"
        "limits: {per_provider: {ollama: many}}\n"
        "defualt_model: openai/gpt-4o\n"
        "model: openai/gpt-4o\n"
        "task_models: [summarize]\n"
    )
    assert problems_of() == [
        f"{path}: upstream.deadline_secnds: unknown key (did you mean 'deadline_seconds'?); "
        "known here: backoff_initial_seconds, backoff_max_seconds, connect_timeout_seconds, "
        "deadline_seconds, first_token_seconds, idle_seconds, max_answer_bytes, max_retries, "
        "max_retry_after_seconds, timeout_seconds",
        f"{path}: defualt_model: unknown key (did you mean 'default_model'?)",
        f"{path}: model: is GENAI_MODEL, an environment override; the file sets default_model "
        "and task_models",
        f"{path}: task_models: Input should be a valid dictionary",  # in Settings' field order
        f"{path}: upstream.max_retries: Input should be greater than or equal to 0",
        f"{path}: limits.per_provider.ollama: Input should be a valid integer, unable to parse "
        "string as an integer",
    ]


def test_an_unknown_key_inside_an_endpoint_is_a_problem(config: Callable[[str], Path]) -> None:
    path = config("endpoints: {vllm: {base_url: http://x/v1, timeout: 3}}\n")
    assert problems_of() == [
        f"{path}: endpoints.vllm.timeout: unknown key; known here: api_key, api_key_env, base_url"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("default_model: [unclosed\n", "line 2, column 1: not valid YAML: expected ',' or ']'"),
        ("- just\n- a list\n", "the top level must be a mapping of settings"),
        ("log_level: INFO\nlog_level: DEBUG\n", "the key 'log_level' is written twice"),
    ],
    ids=["invalid_yaml", "not_a_mapping", "duplicate_key"],
)
def test_a_file_that_is_not_a_settings_mapping_is_one_line(
    config: Callable[[str], Path], text: str, expected: str
) -> None:
    path = config(text)
    [line] = problems_of()
    assert line.startswith(f"{path}: ") and expected in line, line


def test_a_missing_file_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENAI_CONFIG", str(tmp_path / "nowhere.yaml"))
    assert problems_of() == [f"{tmp_path / 'nowhere.yaml'}: no such file (named by GENAI_CONFIG)"]


@pytest.mark.parametrize(
    ("endpoints", "expected"),
    [
        ("{openai: {base_url: http://x/v1}}", "'openai' is a built-in provider"),
        ("{My Server: {base_url: http://x/v1}}", "lower-case letters, digits"),
        ("{vllm: {api_key_env: HOME}}", "endpoints.vllm.base_url: Field required"),
    ],
)
def test_endpoint_declarations_are_checked(
    config: Callable[[str], Path], endpoints: str, expected: str
) -> None:
    config(f"endpoints: {endpoints}\n")
    [line] = problems_of()
    assert expected in line, line


def test_the_cli_prints_each_problem_on_its_own_line_and_exits_2(
    cli_env: Callable[..., None], tmp_path: Path
) -> None:
    path = tmp_path / "genai.yaml"
    path.write_text("upstream: {deadline_seconds: 0}\nlimts: {}\nopenai: {api_key: sk-x}\n")
    cli_env(GENAI_CONFIG=str(path))
    result = run_cli("patterns", "list")
    assert result.exit_code == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"genai: {path}: limts: unknown key (did you mean 'limits'?)",
        f"genai: {path}: openai.api_key: a secret is never written in the config file: write "
        "`api_key_env: VARIABLE`, the environment variable holding it",
        f"genai: {path}: upstream.deadline_seconds: Input should be greater than 0",
    ]


# --- the shipped example and endpoint providers -----------------------------------------------


def test_the_builtin_provider_names_agree_with_the_config_layer() -> None:
    assert PROVIDER_NAMES == BUILTIN_PROVIDERS


async def test_the_shipped_example_loads_and_the_service_starts_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for variable in ("MY_OPENAI_KEY", "MY_ANTHROPIC_KEY", "GROQ_API_KEY"):
        monkeypatch.setenv(variable, f"sk-{variable.lower()}")
    monkeypatch.setenv("GENAI_CONFIG", str(EXAMPLE))
    monkeypatch.setenv("GENAI_PATTERN_DIR", str(SHIPPED_PATTERNS))
    monkeypatch.setenv("GENAI_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("GENAI_AUTH_DISABLED", "true")
    settings = Settings(_env_file=None)
    assert settings.task_models["translation"] == "groq/llama-3.1-8b-instant"
    assert set(settings.endpoints) == {"vllm", "groq"}
    assert settings.openai.api_key is not None
    async with serve_app(settings) as http:
        ready = (await http.get("/readyz")).json()
        render = await http.post(
            "/v1/render",
            json={
                "pattern_key": "translate",
                "variables": {"target_language": "fr"},
                "user_prompt": "Hello.",
            },
        )
    assert ready["providers"] == {
        "openai": True,
        "anthropic": True,
        "ollama": True,
        "vllm": True,
        "groq": True,
    }
    assert render.status_code == 200, render.text
    choice = render.json()["model_choice"]
    assert (choice["model"], choice["source"]) == ("groq/llama-3.1-8b-instant", "config_task")


async def test_a_completion_through_an_endpoint_reaches_it_with_its_own_key(
    fake: FakeProviderServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_KEY", "vllm-secret-key")
    config = tmp_path / "genai.yaml"
    config.write_text(
        f"endpoints:\n  vllm: {{base_url: '{fake.base_url}/v1', api_key_env: VLLM_KEY}}\n"
    )
    settings = settings_for(fake, config=config)
    async with serve_app(settings) as http:
        resp = await http.post(
            "/v1/completions",
            json={
                "pattern_key": "summarize",
                "variables": {"max_words": 10},
                "user_prompt": "Long text.",
                "model": "vllm/meta-llama/Llama-3.1-8B-Instruct",
            },
        )
        envelope = resp.json()
        record = (await http.get(f"/v1/jobs/{envelope['job_id']}")).json()
        ready = (await http.get("/readyz")).json()
    assert resp.status_code == 200, resp.text
    [sent] = fake.calls("openai")  # the fake serves the OpenAI API at <base_url>/v1
    assert sent.body["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert sent.headers["authorization"] == "Bearer vllm-secret-key"  # not OPENAI_API_KEY
    assert envelope["model_choice"]["provider"] == "vllm"
    assert envelope["provenance"]["provider"] == "vllm"
    assert record["provider"] == "vllm"
    assert ready["providers"]["vllm"] is True


async def test_an_undeclared_endpoint_name_is_an_invalid_model(fake: FakeProviderServer) -> None:
    async with serve_app(settings_for(fake)) as http:
        resp = await http.post(
            "/v1/render",
            json={"pattern_key": "summarize", "user_prompt": "x", "model": "groq/llama"},
        )
    assert resp.status_code == 422
    assert resp.json()["error"]["type"] == "invalid_model"
    assert "groq" in resp.json()["error"]["message"]


def test_the_environment_may_declare_an_endpoint_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GENAI_ENDPOINTS__GROQ__BASE_URL", "https://api.groq.com/openai/v1")
    monkeypatch.setenv("GENAI_ENDPOINTS__GROQ__API_KEY", "gsk-env")
    groq = Settings(_env_file=None).endpoints["groq"]
    assert groq.base_url == "https://api.groq.com/openai/v1"
    assert groq.api_key is not None and groq.api_key.get_secret_value() == "gsk-env"
