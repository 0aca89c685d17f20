"""A bad setting or an unreachable store ends any `genai` command with one line and exit 2.

`genai serve` is run as the real console script (its preflight must answer before uvicorn
would); the other commands in-process through the same Typer app.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.processes import run_process
from tests.security.live import free_port, genai_command
from tests.support import SHIPPED_PATTERNS, run_cli

GOOD_KEY = "A" * 43 + "="  # base64 of 32 zero-ish bytes


def _cases() -> dict[str, tuple[dict[str, str], str]]:
    """name → (environment, what the one line must say)."""
    closed = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/genai"
    return {
        "bad_nested_number": (
            {"GENAI_UPSTREAM__TIMEOUT_SECONDS": "-1"},
            "GENAI_UPSTREAM__TIMEOUT_SECONDS: Input should be greater than 0",
        ),
        "bad_top_level_number": (
            {"GENAI_MAX_BODY_BYTES": "lots"},
            "GENAI_MAX_BODY_BYTES: Input should be a valid integer",
        ),
        "unparseable_json_setting": ({"GENAI_PATTERN_DEFAULTS": "{broken"}, "pattern_defaults"),
        "bad_data_key": ({"GENAI_DATA_KEY": "not-a-key"}, "GENAI_DATA_KEY: must be base64 of 32"),
        "short_redaction_key": (
            {"GENAI_REDACTION_KEY": GOOD_KEY[:20]},
            "GENAI_REDACTION_KEY: must be base64 of 32 bytes",
        ),
        "sync_driver": (
            {"GENAI_DATABASE_URL": "postgresql://postgres@127.0.0.1/test"},
            "GENAI_DATABASE_URL: postgresql:// needs the async driver: write postgresql+asyncpg",
        ),
        "sync_sqlite": (
            {"GENAI_DATABASE_URL": "sqlite:///genai.db"},
            "GENAI_DATABASE_URL: sqlite:// needs the async driver: write sqlite+aiosqlite",
        ),
        "unknown_scheme": (
            {"GENAI_DATABASE_URL": "mysql+aiomysql://u:secret@db/genai"},
            "GENAI_DATABASE_URL: the 'mysql' database is not supported",
        ),
        "not_a_url": ({"GENAI_DATABASE_URL": "no url at all"}, "is not a database URL"),
        "unreachable_postgres": (
            {"GENAI_DATABASE_URL": closed, "GENAI_DATABASE_LOCK_TIMEOUT_SECONDS": "2"},
            "GENAI_DATABASE_URL: cannot reach postgresql+asyncpg://postgres@127.0.0.1:",
        ),
    }


CASES = _cases()


def _assert_one_line(stderr: str, expected: str, exit_code: int) -> None:
    assert exit_code == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("genai: ") and expected in lines[0], lines[0]
    assert "secret" not in lines[0]  # a password in the URL is never printed


@pytest.mark.parametrize("case", CASES, ids=CASES.keys())
def test_serve_refuses_to_start_with_one_line(case: str, tmp_path: Path) -> None:
    env_extra, expected = CASES[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENAI_", "OPENAI_"))}
    env |= {"GENAI_DATA_DIR": str(tmp_path / "data"), "GENAI_PATTERN_DIR": str(SHIPPED_PATTERNS)}
    env |= env_extra
    done = run_process(
        [genai_command(), "serve", "--port", str(free_port())],
        cwd=tmp_path,
        env=env,
        timeout=120,  # liveness only: a preflight that hangs would start serving instead
    )
    _assert_one_line(done.stderr, expected, done.returncode)
    assert "Uvicorn running" not in done.stderr + done.stdout


COMMAND_CASES = [
    (command, case)
    for command in (("templates", "list"), ("snippets", "list"), ("db", "upgrade"))
    for case in ("bad_nested_number", "bad_data_key", "sync_driver", "unreachable_postgres")
    if not (command == ("db", "upgrade") and case == "bad_data_key")  # it reads no keys
]


@pytest.mark.parametrize(("command", "case"), COMMAND_CASES)
def test_every_command_reports_operator_errors_as_one_line(
    cli_env: Callable[..., None], tmp_path: Path, command: tuple[str, ...], case: str
) -> None:
    env_extra, expected = CASES[case]
    cli_env(GENAI_DATA_DIR=str(tmp_path / "data"), **env_extra)
    result = run_cli(*command)
    _assert_one_line(result.stderr, expected, result.exit_code)


def test_a_corrupt_key_file_is_named(cli_env: Callable[..., None], tmp_path: Path) -> None:
    keys = tmp_path / "data" / "keys"
    keys.mkdir(parents=True)
    (keys / "redaction.key").write_text("this is not a key")
    cli_env(GENAI_DATA_DIR=str(tmp_path / "data"))
    result = run_cli("templates", "list")
    _assert_one_line(
        result.stderr, f"{keys / 'redaction.key'} (used because GENAI_REDACTION_KEY is unset)", 2
    )
    assert result.exit_code == 2


def test_cli_input_that_fails_validation_is_reported_without_a_traceback(
    cli_env: Callable[..., None], tmp_path: Path
) -> None:
    cli_env(GENAI_DATA_DIR=str(tmp_path / "data"), GENAI_PATTERN_DIR=str(SHIPPED_PATTERNS))
    result = run_cli("render", "summarize", "--model", "openai/gpt 4o")
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.stderr.startswith("genai: model: String should match pattern")


def test_working_settings_still_work(cli_env: Callable[..., None], tmp_path: Path) -> None:
    """The checks above refuse bad settings only: a good key and URL pass them."""
    cli_env(
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_DATA_KEY=GOOD_KEY,
        GENAI_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'other.db'}",
    )
    result = run_cli("templates", "list")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "other.db").exists()
