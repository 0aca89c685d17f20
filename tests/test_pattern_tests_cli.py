"""`genai patterns test`: passing and failing output, exit codes, JUnit, bad input in one line,
and a live run through the fake provider recorded as a job (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import junitparser
import pytest

from app.release.assertions import prompt_hash
from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import OPENAI_KEY, SHIPPED_PATTERNS
from tests.support import run_cli as run

GREET = """---
description: Greet a customer.
tests:
  - name: names the customer
    variables: {customer: Ana}
    user_prompt: Where is my order?
    expect:
      prompt_contains: [Ana]
---
You help {{ customer }}.
"""
PROMPT = "You help Ana.\n\nWhere is my order?"
TESTS = f"""- name: the exact prompt
  variables: {{customer: Ana}}
  user_prompt: Where is my order?
  expect:
    prompt_equals: "You help Ana.\\n\\nWhere is my order?"
    prompt_hash: {prompt_hash(PROMPT)}
- name: answers about the order
  variables: {{customer: Ana}}
  user_prompt: Where is my order?
  expect:
    answer_contains: [order]
"""
FAILING = """- name: wrong customer
  variables: {customer: Ana}
  user_prompt: Hi
  expect:
    prompt_contains: [Bob]
"""


@pytest.fixture
def root(tmp_path: Path, cli_env: Callable[..., None]) -> Path:
    pattern_root = tmp_path / "patterns"
    (pattern_root / "support").mkdir(parents=True)
    (pattern_root / "support" / "greet.md").write_text(GREET, encoding="utf-8")
    (pattern_root / "support" / "greet.tests.yaml").write_text(TESTS, encoding="utf-8")
    (pattern_root / "plain.md").write_text("---\ndescription: No tests.\n---\nHi.\n")
    cli_env(GENAI_PATTERN_DIR=str(pattern_root), GENAI_DATA_DIR=str(tmp_path / "data"))
    return pattern_root


def test_passing_cases_exit_0_with_a_summary_and_skip_the_live_ones(root: Path) -> None:
    result = run("patterns", "test")
    assert result.exit_code == 0, result.output
    assert "2 passed, 0 failed, 1 skipped" in result.stdout
    assert "support/greet" in result.stdout and "plain" in result.stdout  # the summary table
    assert "FAILED" not in result.stdout


def test_a_failing_case_exits_1_naming_the_case_and_the_reason(root: Path) -> None:
    (root / "plain.tests.yaml").write_text(FAILING, encoding="utf-8")
    (root / "plain.md").write_text("---\ndescription: Hi.\n---\nHello {{ customer }}.\n")
    result = run("patterns", "test", "plain", "support/greet")
    assert result.exit_code == 1, result.output
    assert "FAILED plain > wrong customer: prompt does not contain 'Bob'" in result.stdout
    assert "2 passed, 1 failed, 1 skipped" in result.stdout


def test_junit_file_is_written_for_ci(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    result = run("patterns", "test", "support/greet", "--junit", str(target))
    assert result.exit_code == 0, result.output
    [suite] = list(junitparser.JUnitXml.fromfile(str(target)))
    assert (suite.name, suite.tests, suite.failures, suite.skipped) == ("support/greet", 3, 0, 1)
    assert [case.name for case in suite] == [
        "names the customer",
        "the exact prompt",
        "answers about the order",
    ]


def test_a_syntax_error_is_one_line_naming_file_and_line(root: Path) -> None:
    (root / "support" / "greet.tests.yaml").write_text("- name: a\n  expect: {prompt_contains: [\n")
    result = run("patterns", "test")
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"genai: {root / 'support' / 'greet.tests.yaml'}:3: YAML syntax error")
    assert result.stdout == ""


def test_an_unknown_pattern_is_bad_input(root: Path) -> None:
    result = run("patterns", "test", "nope")
    assert result.exit_code == 2
    assert result.stderr.strip().startswith("genai: No pattern named 'nope'.")


def test_an_unknown_model_is_bad_input(root: Path) -> None:
    result = run("patterns", "test", "support/greet", "--model", "nope/x")
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("genai: Unknown provider 'nope' in 'nope/x'")


def test_live_without_a_provider_is_one_clear_line(root: Path) -> None:
    result = run("patterns", "test", "support/greet", "--live", "--model", "openai/gpt-4o-mini")
    assert result.exit_code == 2, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("genai: --live: Provider 'openai' is not configured")


def test_the_shipped_catalog_passes_its_own_cases(cli_env: Callable[..., None]) -> None:
    cli_env(GENAI_PATTERN_DIR=str(SHIPPED_PATTERNS))
    result = run("patterns", "test")
    assert result.exit_code == 0, result.output
    assert " 0 failed, " in result.stdout


def test_a_live_run_answers_through_the_provider_and_records_jobs(
    root: Path,
    fake: FakeProviderServer,
    cli_env: Callable[..., None],
    database_url: str,
) -> None:
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_OPENAI__API_KEY=OPENAI_KEY,
        GENAI_OPENAI__BASE_URL=f"{fake.base_url}/v1",
    )
    fake.script("openai", Reply.ok("Your order left the warehouse."))
    result = run("patterns", "test", "support/greet", "--live", "--model", "openai/gpt-4o-mini")
    assert result.exit_code == 0, result.output
    assert "3 passed, 0 failed, 0 skipped" in result.stdout
    [call] = fake.calls("openai")  # only the case asserting an answer was completed
    assert "You help Ana." in str(call.body)

    jobs = run("jobs", "list")
    assert jobs.exit_code == 0, jobs.output
    [line] = jobs.stdout.strip().splitlines()
    assert "completed" in line and "support/greet" in line


def test_an_unwritable_junit_file_is_one_line(root: Path, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "report.xml"
    result = run("patterns", "test", "support/greet", "--junit", str(target))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"genai: --junit: cannot write {target}: No such file or directory"
    )
