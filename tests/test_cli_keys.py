"""`genai keys` and `genai teams` with limits, run in-process against a SQLite store in tmp_path:
flags reach the stored key, `--clear-*`/`--no-*` remove what they name, bad flags are one line
and exit 2 with nothing stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.clock import utc_now
from tests.support import run_cli as run

# Expiry dates the keys are given: always ahead of the real clock (issue 28).
NEXT_YEAR = utc_now().year + 1


@pytest.fixture
def store(cli_env: Callable[..., None], tmp_path: Path) -> Path:
    data = tmp_path / "data"
    cli_env(GENAI_DATA_DIR=str(data))
    return data


def _key_id(output: str) -> str:
    return output.strip().splitlines()[-1].split("_")[1]


def _listed(key_id: str) -> str:
    listed = run("keys", "list")
    assert listed.exit_code == 0, listed.output
    return next(line for line in listed.stdout.splitlines() if line.startswith(key_id))


def test_a_key_with_every_limit_flag_and_its_updates(store: Path) -> None:
    assert run("teams", "create", "payments", "--budget-usd", "50", "--rpm", "600").exit_code == 0
    created = run(
        "keys", "create", "--scope", "complete", "--name", "support-bot",
        "--budget-usd", "10", "--budget-window", "day", "--rpm", "60", "--tpm", "100000",
        "--allow-model", "openai/*", "--allow-model", "anthropic/*",
        "--allow-pattern", "support-*", "--expires", f"{NEXT_YEAR}-01-01", "--team", "payments",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    key_id = _key_id(created.stdout)
    line = _listed(key_id)
    for shown in (
        "support-bot", "team=payments", "$10/day", "60rpm", "100000tpm",
        "models=openai/*,anthropic/*", "patterns=support-*", f"expires {NEXT_YEAR}-01-01T00:00Z",
    ):  # fmt: skip
        assert shown in line, (shown, line)

    updated = run(
        "keys", "update", key_id, "--budget-usd", "300", "--rpm", "5",
        "--expires", f"{NEXT_YEAR + 1}-06-01T12:00:00+02:00",
    )  # fmt: skip
    assert updated.exit_code == 0, updated.output
    line = _listed(key_id)
    assert "$300/month" in line and "$10/day" not in line and "5rpm" in line
    assert (
        f"expires {NEXT_YEAR + 1}-06-01T10:00Z" in line and "100000tpm" in line
    )  # the rest unchanged

    cleared = run(
        "keys", "update", key_id, "--clear-budget", "--clear-rpm", "--clear-tpm",
        "--any-model", "--any-pattern", "--no-expiry", "--no-team",
    )  # fmt: skip
    assert cleared.exit_code == 0, cleared.output
    line = _listed(key_id)
    assert "team=-  unlimited  expires never" in line and "models=" not in line


def test_teams_create_list_update_delete(store: Path) -> None:
    made = run("teams", "create", "ops", "--budget-usd", "20", "--budget-window", "total")
    assert made.exit_code == 0 and "$20/total" in made.stdout, made.output
    assert run("teams", "create", "ops").exit_code == 1  # team_exists
    assert run("teams", "update", "ops", "--tpm", "900", "--clear-budget").exit_code == 0
    listed = run("teams", "list").stdout
    assert listed.startswith("ops") and "900tpm" in listed and "$20" not in listed

    key_id = _key_id(run("keys", "create", "--scope", "complete", "--team", "ops").stdout)
    in_use = run("teams", "delete", "ops")
    assert in_use.exit_code == 1 and '"team_in_use"' in in_use.stderr
    assert run("keys", "revoke", key_id).exit_code == 0
    deleted = run("teams", "delete", "ops")
    assert deleted.exit_code == 0 and "deleted team ops" in deleted.stdout
    assert run("teams", "list").stdout == ""


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (("--budget-usd", "-1"), "budget_usd"),
        (("--budget-usd", "2000000"), "budget_usd"),
        (("--budget-usd", "nan"), "budget_usd"),
        (("--budget-usd", "5", "--budget-window", "week"), "budget_window"),
        (("--budget-window", "day"), "budget_window needs budget_usd"),
        (("--rpm", "0"), "rpm"),
        (("--allow-model", "openai"), "allowed_models"),
        (("--allow-pattern", "a b"), "allowed_patterns"),
        (("--expires", "someday"), "expires_at"),
        (("--expires", f"{NEXT_YEAR}-01-01T00:00:00"), "expires_at"),  # no time zone
        (("--team", "Not A Team"), "team"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2_with_nothing_stored(
    store: Path, flags: tuple[str, ...], named: str
) -> None:
    result = run("keys", "create", "--scope", "complete", *flags)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("genai: ") and named in line
    assert not (store / "genai.db").exists()


def test_update_refuses_a_value_with_its_clear_flag_and_an_empty_change(store: Path) -> None:
    key_id = _key_id(run("keys", "create", "--scope", "complete").stdout)
    both = run("keys", "update", key_id, "--rpm", "5", "--clear-rpm")
    assert both.exit_code == 2 and "--clear-rpm" in both.output
    assert run("keys", "update", key_id).exit_code == 2
    assert "unlimited" in _listed(key_id)


def test_a_missing_team_or_past_expiry_is_the_api_error_and_stores_nothing(store: Path) -> None:
    before = run("keys", "list").stdout
    missing = run("keys", "create", "--scope", "complete", "--team", "ghosts")
    assert missing.exit_code == 1
    assert '"invalid_request"' in missing.stderr and '"team"' in missing.stderr
    past = run("keys", "create", "--scope", "complete", "--expires", "2020-01-01")
    assert past.exit_code == 1 and '"expires_at"' in past.stderr
    assert run("keys", "list").stdout == before
