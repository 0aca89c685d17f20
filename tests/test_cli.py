"""The `genai` command line (`app.cli`), run in-process against a tmp_path pattern root."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from app.tracking import pattern_content_hash, user_prompt_hash, variables_hash
from tests.support import run_cli as run

FINGERPRINT = re.compile(r"^sha256:[0-9a-f]{64}$")

CLASSIFY = """---
description: Classify text into labels.
model_hint: anthropic/claude-sonnet-4-5
defaults:
  tone: neutral
  threshold: 0.5
variables:
  labels: Allowed labels.
  tone: Tone.
  threshold: Confidence threshold.
  limit: How many labels at most.
---
Labels: {{ labels | join(", ") }}. Tone: {{ tone }}.
Threshold: {{ threshold }}. Limit: {{ limit + 1 }}.
"""

GREET = """---
description: Greet someone.
---
Hello {{ name }}.
"""


@pytest.fixture
def root(tmp_path: Path, cli_env: Callable[..., None]) -> Path:
    """A pattern root named by GENAI_PATTERN_DIR, with settings and logging isolated."""
    pattern_root = tmp_path / "patterns"
    (pattern_root / "email").mkdir(parents=True)
    (pattern_root / "classify.md").write_text(CLASSIFY, encoding="utf-8")
    (pattern_root / "email" / "greet.md").write_text(GREET, encoding="utf-8")
    cli_env(GENAI_PATTERN_DIR=str(pattern_root))
    return pattern_root


def write(root: Path, name: str, text: str) -> None:
    path = root / f"{name}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# --- render -----------------------------------------------------------------------------------


def test_render_prints_prompt_model_choice_and_provenance_as_json(root: Path) -> None:
    result = run(
        "render",
        "classify",
        "--var",
        "limit=2",
        "--var",
        'labels=["a","b"]',
        "--var",
        "tone=calm",
        "--user-prompt",
        "Is this spam?",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)

    assert "Labels: a, b. Tone: calm.\nThreshold: 0.5. Limit: 3." in out["prompt"]["system"]
    assert out["prompt"]["messages"] == [{"role": "user", "content": "Is this spam?"}]
    assert out["model_choice"]["model"] == "anthropic/claude-sonnet-4-5"
    assert out["model_choice"]["source"] == "hint"

    prov = out["provenance"]
    for field in ("pattern_content_hash", "variables_hash", "user_prompt_hash"):
        assert FINGERPRINT.match(prov[field]), (field, prov[field])
    effective = {"labels": ["a", "b"], "tone": "calm", "threshold": 0.5, "limit": 2}
    assert prov["variables_hash"] == variables_hash(effective)
    assert prov["user_prompt_hash"] == user_prompt_hash("Is this spam?")
    assert prov["pattern_content_hash"] == pattern_content_hash((root / "classify.md").read_bytes())
    assert prov["pattern_name"] == "classify"
    assert prov["pattern_base_path"] == str(root)
    assert (prov["provider"], prov["model"]) == ("anthropic", "claude-sonnet-4-5")


def test_render_reads_json_var_values_as_numbers_and_lists_and_others_as_text(root: Path) -> None:
    result = run(
        "render",
        "classify",
        "--var",
        "limit=41",
        "--var",
        "labels=[1, 2]",
        "--var",
        "threshold=0.9",
        "--var",
        "tone=not json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # `limit + 1` only renders 42 if limit arrived as a number, not the string "41".
    assert "Limit: 42." in out["prompt"]["system"]
    assert "Labels: 1, 2." in out["prompt"]["system"]
    expected = {"labels": [1, 2], "tone": "not json", "threshold": 0.9, "limit": 41}
    assert out["provenance"]["variables_hash"] == variables_hash(expected)
    # Had "41" stayed a string, the fingerprint would differ.
    assert out["provenance"]["variables_hash"] != variables_hash({**expected, "limit": "41"})


def test_render_model_option_overrides_the_hint(root: Path) -> None:
    variables = ("--var", "labels=[1]", "--var", "limit=1")
    result = run("render", "classify", *variables, "--model", "ollama/llama3.2:3b")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["model_choice"]["source"] == "cli"  # over the pattern's model_hint
    assert out["provenance"]["model"] == "llama3.2:3b"


def test_render_with_missing_variables_exits_1_and_names_them(root: Path) -> None:
    result = run("render", "classify", "--var", "tone=calm")
    assert result.exit_code == 1
    error = json.loads(result.stderr)["error"]
    assert error["type"] == "missing_variables"
    assert error["missing"] == ["labels", "limit"]
    assert result.stdout == ""


def test_render_unknown_pattern_exits_1_with_pattern_not_found(root: Path) -> None:
    result = run("render", "nope")
    assert result.exit_code == 1
    assert json.loads(result.stderr)["error"]["type"] == "pattern_not_found"


def test_render_rejects_a_var_without_equals_sign(root: Path) -> None:
    result = run("render", "email/greet", "--var", "name")
    assert result.exit_code != 0
    assert "KEY=VALUE" in result.output


# --- patterns list / show ---------------------------------------------------------------------


def test_patterns_list_lists_every_name_with_its_description(root: Path) -> None:
    result = run("patterns", "list")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["classify", "email/greet"]
    assert "Classify text into labels." in lines[0]
    assert "Greet someone." in lines[1]


def test_patterns_list_marks_invalid_patterns(root: Path) -> None:
    write(root, "broken", "---\ndescription: d\nbogus: 1\n---\nx\n")
    result = run("patterns", "list")
    assert result.exit_code == 0, result.output
    assert any(
        line.startswith("broken") and "INVALID" in line for line in result.stdout.splitlines()
    )


def test_patterns_show_prints_the_pattern_as_json(root: Path) -> None:
    result = run("patterns", "show", "classify")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["name"] == "classify"
    assert shown["base_path"] == str(root)
    assert shown["content_hash"] == pattern_content_hash((root / "classify.md").read_bytes())
    assert shown["description"] == "Classify text into labels."
    assert shown["model_hint"] == "anthropic/claude-sonnet-4-5"
    assert shown["defaults"] == {"tone": "neutral", "threshold": 0.5}
    assert shown["required_variables"] == ["labels", "limit"]
    assert shown["variables"] == {
        "labels": "Allowed labels.",
        "limit": "How many labels at most.",
        "threshold": "Confidence threshold.",
        "tone": "Tone.",
    }


def test_patterns_show_lists_used_variables_even_when_front_matter_documents_none(
    root: Path,
) -> None:
    result = run("patterns", "show", "email/greet")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["variables"] == {"name": None}
    assert shown["required_variables"] == ["name"]


def test_patterns_show_unknown_name_exits_1(root: Path) -> None:
    result = run("patterns", "show", "nope")
    assert result.exit_code == 1
    assert json.loads(result.stderr)["error"]["type"] == "pattern_not_found"


# --- patterns validate ------------------------------------------------------------------------


def test_patterns_validate_exits_0_on_a_clean_root(root: Path) -> None:
    result = run("patterns", "validate")
    assert result.exit_code == 0, result.output
    assert "2 patterns checked, 0 problems" in result.stdout


def test_patterns_validate_exits_1_naming_an_unknown_front_matter_key(root: Path) -> None:
    write(root, "typo", "---\ndescription: d\ntemprature: 0.1\n---\nx\n")
    result = run("patterns", "validate")
    assert result.exit_code == 1
    assert "typo:" in result.stderr
    assert "temprature" in result.stderr
    assert "3 patterns checked, 1 problems" in result.stdout


def test_patterns_validate_exits_1_on_a_bad_model_hint(root: Path) -> None:
    write(root, "badhint", "---\ndescription: d\nmodel_hint: gpt-4o\n---\nx\n")
    result = run("patterns", "validate")
    assert result.exit_code == 1
    assert "badhint: model_hint:" in result.stderr
    assert "provider/model" in result.stderr


def test_patterns_validate_exits_1_on_an_unknown_provider_in_model_hint(root: Path) -> None:
    write(root, "badhint", "---\ndescription: d\ndefault_model: mistral/large\n---\nx\n")
    result = run("patterns", "validate")
    assert result.exit_code == 1
    assert "badhint: model_hint:" in result.stderr
    assert "mistral" in result.stderr


def test_patterns_validate_exits_1_on_a_bad_fallback_model(root: Path) -> None:
    write(
        root,
        "badchain",
        "---\ndescription: d\nfallbacks: [anthropic/claude-haiku-4-5, gpt-4o]\n---\nx\n",
    )
    result = run("patterns", "validate")
    assert result.exit_code == 1
    assert "badchain: fallbacks[1]:" in result.stderr
    assert "badchain: fallbacks[0]" not in result.stderr
    assert "3 patterns checked, 1 problems" in result.stdout


def test_patterns_validate_exits_1_when_a_root_does_not_exist(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = root.parent / "missing"
    monkeypatch.setenv("GENAI_PATTERN_DIR", os.pathsep.join([str(root), str(missing)]))
    result = run("patterns", "validate")
    assert result.exit_code == 1
    assert f"root {missing}: does not exist" in result.stderr


def test_patterns_validate_reports_shadowed_names_without_failing(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    second = root.parent / "second"
    write(second, "classify", GREET)
    monkeypatch.setenv("GENAI_PATTERN_DIR", os.pathsep.join([str(root), str(second)]))
    result = run("patterns", "validate")
    assert result.exit_code == 0, result.output
    assert f"classify: found in {root}, {second}; the first one is used" in result.stdout


# --- any working directory ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [("patterns", "list"), ("patterns", "show", "summarize"), ("render", "summarize")],
)
def test_a_missing_pattern_root_is_one_line_exit_2_not_an_empty_success(
    cli_env: Callable[..., None], tmp_path: Path, command: tuple[str, ...]
) -> None:
    # The default root `patterns` is relative; cli_env runs in an empty tmp_path, as a user
    # running `genai` outside the project would.
    result = run(*command)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"genai: GENAI_PATTERN_DIR: pattern root patterns (relative to {tmp_path}) does not exist; "
        "run genai from the project directory or set GENAI_PATTERN_DIR to an absolute path"
    ]
    assert result.stdout == ""


def test_an_absolute_pattern_root_works_from_any_directory(
    root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    result = run("patterns", "list")
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()] == ["classify", "email/greet"]


def test_patterns_list_keeps_an_invalid_pattern_in_name_order(root: Path) -> None:
    write(root, "aaa_broken", "---\ndescription: [unclosed\n---\nx\n")
    lines = run("patterns", "list").stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["aaa_broken", "classify", "email/greet"]
    assert "INVALID (run: genai patterns validate)" in lines[0]


def test_every_command_group_is_listed_in_help(cli_env: Callable[..., None]) -> None:
    listed = run("--help").stdout
    groups = ("serve", "render", "patterns", "jobs", "drift", "templates", "keys", "teams", "db")
    for command in groups:
        assert command in listed
    assert {"list", "show", "replay"} <= set(re.findall(r"│ (\w+)\s", run("jobs", "--help").stdout))
