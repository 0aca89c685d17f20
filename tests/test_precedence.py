"""The model chain through the real entry points: POST /v1/render for every link, the CLI flags
of `genai render` and `genai serve` (several workers), and the start-time capability check.

    request > --model-for TASK > --model > GENAI_MODEL_<TASK> > GENAI_MODEL > task_models
            > model_hint > default_model
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.config import Settings
from app.schemas import ModelSource
from tests.fakes.provider_server import FakeProviderServer
from tests.processes import run_process
from tests.security.live import free_port, genai_command, live_service, service_env
from tests.support import SHIPPED_PATTERNS, run_cli, serve_app

PATTERN = "email/reply"  # its tags: draft, email
TASK_VARIABLE = "GENAI_MODEL_EMAIL_REPLY"

# One model per link, so the answer names the link that decided.
LADDER: list[tuple[ModelSource, str]] = [
    ("request", "openai/from-request"),
    ("cli_task", "anthropic/from-cli-task"),
    ("cli", "ollama/from-cli"),
    ("env_task", "openai/from-env-task"),
    ("env", "anthropic/from-env"),
    ("config_task", "ollama/from-config-task"),
    ("hint", "openai/from-hint"),
    ("config_default", "anthropic/from-config-default"),
]
MODEL_OF: dict[ModelSource, str] = dict(LADDER)


def write_pattern(root: Path, *, hint: str | None, requires: str = "[]") -> None:
    path = root / f"{PATTERN}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    hint_line = f"model_hint: {hint}\n" if hint else ""
    path.write_text(
        f"---\ndescription: Reply to an email.\ntags: [draft, email]\n{hint_line}"
        f"requires: {requires}\n---\nReply politely.\n",
        encoding="utf-8",
    )


def configure(
    levels: set[ModelSource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Settings, str | None]:
    """Each link in `levels` set through its own mechanism; the rest left unset. Returns the
    settings and the request's `model`."""
    file: dict[str, Any] = {"default_model": MODEL_OF["config_default"]}
    if "config_task" in levels:  # by the pattern's tag: a tag counts as the task too
        file["task_models"] = {"email": MODEL_OF["config_task"]}
    config = tmp_path / "genai.yaml"
    config.write_text(json.dumps(file), encoding="utf-8")  # JSON is YAML
    if "env" in levels:
        monkeypatch.setenv("GENAI_MODEL", MODEL_OF["env"])
    if "env_task" in levels:
        monkeypatch.setenv(TASK_VARIABLE, MODEL_OF["env_task"])
    # What `genai serve --model/--model-for` hands its workers (tested below through serve).
    if "cli" in levels:
        monkeypatch.setenv("GENAI_CLI_MODEL", MODEL_OF["cli"])
    if "cli_task" in levels:
        monkeypatch.setenv("GENAI_CLI_TASK_MODELS", json.dumps({PATTERN: MODEL_OF["cli_task"]}))
    root = tmp_path / "patterns"
    write_pattern(root, hint=MODEL_OF["hint"] if "hint" in levels else None)
    settings = Settings(
        _env_file=None,
        config=config,
        data_dir=tmp_path / "data",
        pattern_dir=[root],
        pattern_reload_seconds=0,
        log_json=True,
    )
    return settings, MODEL_OF["request"] if "request" in levels else None


async def chosen(settings: Settings, request_model: str | None) -> dict[str, str]:
    body = {"pattern_key": PATTERN, "user_prompt": "Thanks!", "model": request_model}
    async with serve_app(settings) as http:
        resp = await http.post("/v1/render", json=body)
    assert resp.status_code == 200, resp.text
    choice: dict[str, str] = resp.json()["model_choice"]
    return choice


@pytest.mark.parametrize("index", range(len(LADDER) - 1), ids=[s for s, _ in LADDER[:-1]])
async def test_each_link_beats_the_link_below_it(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (link, model), (below, _) = LADDER[index], LADDER[index + 1]
    choice = await chosen(*configure({link, below}, tmp_path, monkeypatch))
    assert (choice["source"], choice["model"]) == (link, model)


@pytest.mark.parametrize("index", range(1, len(LADDER)), ids=[s for s, _ in LADDER[1:]])
async def test_each_link_loses_to_the_link_above_it(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (above, model), (link, _) = LADDER[index - 1], LADDER[index]
    choice = await chosen(*configure({above, link}, tmp_path, monkeypatch))
    assert (choice["source"], choice["model"]) == (above, model)


async def test_with_every_link_set_the_request_decides_and_each_removal_steps_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index, (link, model) in enumerate(LADDER):
        with monkeypatch.context() as scoped:
            case = tmp_path / link
            case.mkdir()
            choice = await chosen(*configure({s for s, _ in LADDER[index:]}, case, scoped))
        assert (choice["source"], choice["model"]) == (link, model)


async def test_the_config_default_may_come_from_genai_default_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GENAI_DEFAULT_MODEL", "ollama/from-variable")
    choice = await chosen(*configure(set(), tmp_path, monkeypatch))
    assert (choice["source"], choice["model"]) == ("config_default", "ollama/from-variable")
    assert "GENAI_DEFAULT_MODEL" in choice["reason"]


# --- the CLI flags ----------------------------------------------------------------------------


@pytest.fixture
def pattern_root(tmp_path: Path, cli_env: Callable[..., None]) -> Callable[..., None]:
    root = tmp_path / "patterns"
    write_pattern(root, hint=MODEL_OF["hint"])
    cli_env(GENAI_PATTERN_DIR=str(root), GENAI_DATA_DIR=str(tmp_path / "data"))
    return cli_env


def render_choice(*flags: str) -> dict[str, str]:
    result = run_cli("render", PATTERN, "--user-prompt", "Thanks!", *flags)
    assert result.exit_code == 0, result.output
    choice: dict[str, str] = json.loads(result.stdout)["model_choice"]
    return choice


def test_render_model_for_a_tag_beats_model(pattern_root: Callable[..., None]) -> None:
    choice = render_choice("--model", "ollama/general", "--model-for", "draft=openai/for-draft")
    assert (choice["source"], choice["model"]) == ("cli_task", "openai/for-draft")
    assert "--model-for draft" in choice["reason"]


def test_render_model_for_another_task_leaves_model_in_charge(
    pattern_root: Callable[..., None],
) -> None:
    choice = render_choice("--model", "ollama/general", "--model-for", "summarize=openai/x")
    assert (choice["source"], choice["model"]) == ("cli", "ollama/general")


def test_render_model_beats_the_task_variable(pattern_root: Callable[..., None]) -> None:
    pattern_root(**{TASK_VARIABLE: "anthropic/from-env-task"})
    assert render_choice()["source"] == "env_task"
    choice = render_choice("--model", "ollama/general")
    assert (choice["source"], choice["model"]) == ("cli", "ollama/general")


def test_render_model_for_without_equals_exits_2(pattern_root: Callable[..., None]) -> None:
    result = run_cli("render", PATTERN, "--model-for", "draft")
    assert result.exit_code == 2
    assert "'draft' is not TASK=PROVIDER/MODEL" in result.stderr


def test_render_with_an_unknown_provider_in_a_flag_is_one_line_exit_2(
    pattern_root: Callable[..., None],
) -> None:
    result = run_cli("render", PATTERN, "--model-for", "draft=mistral/large")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "genai: --model-for draft: Unknown provider 'mistral' in 'mistral/large'; use one of: "
        "openai, anthropic, ollama."
    ]


def test_serve_hands_its_model_flags_to_every_worker(
    fake_server: FakeProviderServer, tmp_path: Path
) -> None:
    env = service_env(fake_server, tmp_path / "data", GENAI_AUTH_DISABLED="true")
    flags = (
        "--workers",
        "2",
        "--model",
        "ollama/from-flag",
        "--model-for",
        "summarize=anthropic/x",
    )
    with (
        live_service(env, tmp_path, *flags) as service,
        httpx.Client(base_url=service.base_url, timeout=30) as http,
    ):
        answers = [
            http.post("/v1/render", json={"pattern_key": pattern, "user_prompt": "Text."})
            # With --workers 2 each answer comes from a worker process, never from the command
            # that parsed the flags; several requests spread over both.
            for pattern in ("summarize", "proofread") * 4
        ]
    choices = [(r.status_code, r.json()["model_choice"]) for r in answers]
    for (status, choice), pattern in zip(choices, ("summarize", "proofread") * 4, strict=True):
        assert status == 200
        expected = (
            ("cli_task", "anthropic/x") if pattern == "summarize" else ("cli", "ollama/from-flag")
        )
        assert (choice["source"], choice["model"]) == expected


# --- refused at start -------------------------------------------------------------------------


def test_a_pattern_with_tools_needs_a_model_that_takes_tools_at_start(
    tmp_path: Path, cli_env: Callable[..., None]
) -> None:
    root = tmp_path / "patterns"
    write_pattern(root, hint=None)
    path = root / f"{PATTERN}.md"
    tools = "tools: [{name: lookup, parameters: {type: object}}]\n"
    path.write_text(path.read_text().replace("requires: []\n", tools), encoding="utf-8")
    config = tmp_path / "genai.yaml"
    config.write_text("task_models: {email: ollama/gemma:2b}\n")
    cli_env(GENAI_PATTERN_DIR=str(root), GENAI_DATA_DIR=str(tmp_path / "data"))
    cli_env(GENAI_CONFIG=str(config))
    result = run_cli("render", PATTERN, "--user-prompt", "x")
    assert result.exit_code == 2, result.output
    assert "lacks: no tools support" in result.stderr


def test_a_configured_model_lacking_a_needed_capability_is_refused_at_start(
    tmp_path: Path, cli_env: Callable[..., None]
) -> None:
    root = tmp_path / "patterns"
    write_pattern(root, hint=None, requires="[tools]")
    config = tmp_path / "genai.yaml"
    config.write_text("task_models: {email: ollama/gemma:2b}\n")
    cli_env(GENAI_PATTERN_DIR=str(root), GENAI_DATA_DIR=str(tmp_path / "data"))
    cli_env(GENAI_CONFIG=str(config))
    result = run_cli("render", PATTERN, "--user-prompt", "x")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"genai: pattern {PATTERN}: model ollama/gemma:2b (config_task: task_models.email "
        "(config file): the first link of the chain set) lacks: no tools support; configure a "
        "model that has it for this task, or list one in GENAI_CAPABLE_FALLBACK_MODELS"
    ]
    # A capable fallback serves it, so it starts; so does a model that has the capability.
    cli_env(GENAI_CAPABLE_FALLBACK_MODELS="openai/gpt-4o")
    assert run_cli("render", PATTERN, "--user-prompt", "x").exit_code == 0
    cli_env(GENAI_CAPABLE_FALLBACK_MODELS="")
    assert (
        run_cli("render", PATTERN, "--user-prompt", "x", "--model", "ollama/llama3.2").exit_code
        == 0
    )


def test_a_model_hint_lacking_a_capability_is_the_patterns_problem_not_a_start_refusal(
    tmp_path: Path, cli_env: Callable[..., None]
) -> None:
    root = tmp_path / "patterns"
    write_pattern(root, hint="ollama/gemma:2b", requires="[tools]")
    cli_env(GENAI_PATTERN_DIR=str(root), GENAI_DATA_DIR=str(tmp_path / "data"))
    result = run_cli("render", PATTERN, "--user-prompt", "x")
    assert result.exit_code == 1  # the request is refused (422 capability_missing), not the start
    assert json.loads(result.stderr)["error"]["type"] == "capability_missing"


def test_serve_prints_every_model_problem_and_exits_2(tmp_path: Path) -> None:
    root = tmp_path / "patterns"
    write_pattern(root, hint=None, requires="[tools]")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENAI_", "OPENAI_"))}
    env |= {
        "GENAI_DATA_DIR": str(tmp_path / "data"),
        "GENAI_PATTERN_DIR": f"{root}{os.pathsep}{SHIPPED_PATTERNS}",
        "GENAI_MODEL": "ollama/gemma:2b",
    }
    done = run_process(
        [genai_command(), "serve", "--port", str(free_port()), "--model-for", "summarize=x/y"],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Uvicorn running" not in done.stderr
    assert done.stderr.splitlines() == [
        "genai: --model-for summarize: Unknown provider 'x' in 'x/y'; use one of: openai, "
        "anthropic, ollama."
    ]
    done = run_process(
        [genai_command(), "serve", "--port", str(free_port())],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith(
        f"genai: pattern {PATTERN}: model ollama/gemma:2b (env: GENAI_MODEL: the first link"
    )
    assert lines[0].endswith(
        "lacks: no tools support; configure a model that has it for this "
        "task, or list one in GENAI_CAPABLE_FALLBACK_MODELS"
    )
    assert all(line.startswith("genai: pattern ") for line in lines)
