"""Every `genai` command fails the same way: the API's error body (exit 1) for a service error,
one `genai: FIELD: problem` line (exit 2) for bad input or settings, never a traceback."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from app.main import create_app
from tests.support import SHIPPED_PATTERNS, settings_for
from tests.support import run_cli as run


@pytest.fixture
def env(cli_env: Callable[..., None], tmp_path: Path) -> None:
    cli_env(
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(SHIPPED_PATTERNS),
        GENAI_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'genai.db'}",
    )


def _error_body_schema() -> jsonschema.Draft202012Validator:
    spec = create_app(settings_for(None)).openapi()
    schema = {"$ref": "#/components/schemas/ErrorBody", "components": spec["components"]}
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(
    ("args", "error_type"),
    [
        (("render", "nope"), "pattern_not_found"),  # the pattern catalog, through the runtime
        (("patterns", "show", "nope"), "pattern_not_found"),  # the catalog alone, no runtime
        (("templates", "show", "reply", "writer", "7"), "template_not_found"),
        (("snippets", "show", "nope"), "snippet_not_found"),
        (("keys", "revoke", "0" * 16), "api_key_not_found"),
    ],
)
def test_a_service_error_prints_the_apis_documented_body_and_exits_1(
    env: None, args: tuple[str, ...], error_type: str
) -> None:
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    # The last line is the error, one line of JSON (log lines may come before it).
    body = json.loads(result.stderr.strip().splitlines()[-1])
    _error_body_schema().validate(body)
    assert body["error"]["type"] == error_type
    assert "request_id" not in body["error"]  # only an HTTP answer has one
    assert result.stdout == ""


def test_invalid_command_input_is_one_line_per_field_exit_2(env: None, tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("Hello {{ name }}.")
    result = run("templates", "create", "Not A Name", "writer", "-f", str(text), "-v", "name")
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("genai: name: String should match"), lines


def test_an_unreadable_schema_file_is_one_line_exit_2(env: None, tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("Hello {{ name }}.")
    broken = tmp_path / "schema.json"
    broken.write_text("{not json")
    result = run(
        "templates",
        "create",
        "reply",
        "writer",
        "-f",
        str(text),
        "-v",
        "name",
        "--blueprint-schema",
        str(broken),
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("genai: "), lines
