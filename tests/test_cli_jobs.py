"""`genai jobs list|show|replay` and `genai drift` over jobs the running service recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.support import SHIPPED_PATTERNS, serve_app, settings_for
from tests.support import run_cli as run

SUMMARIZE = {
    "pattern_key": "summarize",
    "variables": {"max_words": 20},
    "user_prompt": "Revenue rose 12% while costs fell; alice@example.com signed off.",
    "model": "openai/gpt-4o-mini",
}
TRANSLATE = {
    "pattern_key": "translate",
    "variables": {"target_language": "French"},
    "user_prompt": "Good morning.",
    "model": "openai/gpt-4o-mini",
}


async def _record_jobs(fake: FakeProviderServer, root: Path, database_url: str) -> list[str]:
    """Three completions through the real service: two succeed, the last one fails upstream."""
    settings = settings_for(
        fake,
        data_dir=root / "data",
        pattern_dir=[root / "patterns"],
        database_url=database_url,
        database_auto_migrate=True,
    )
    job_ids = []
    async with serve_app(settings) as http:
        for body in (SUMMARIZE, TRANSLATE):
            answer = await http.post("/v1/completions", json=body)
            assert answer.status_code == 200, answer.text
            job_ids.append(answer.json()["job_id"])
        fake.script("openai", Reply.error(400, message="scripted refusal"))
        failed = await http.post("/v1/completions", json=SUMMARIZE)
        assert failed.status_code >= 400
        job_ids.append(failed.json()["error"]["job_id"])
    return job_ids


@pytest.fixture
def jobs(
    fake: FakeProviderServer, tmp_path: Path, cli_env: Callable[..., None], database_url: str
) -> list[str]:
    """The job ids, oldest first, with GENAI_* aimed at the same store, keys and patterns."""
    patterns = tmp_path / "patterns"
    patterns.mkdir()
    for name in ("summarize", "translate"):
        (patterns / f"{name}.md").write_bytes((SHIPPED_PATTERNS / f"{name}.md").read_bytes())
    job_ids = asyncio.run(_record_jobs(fake, tmp_path, database_url))
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(patterns),
    )
    return job_ids


def _ids(output: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines()]


def test_jobs_list_shows_the_newest_first_and_filters(jobs: list[str]) -> None:
    everything = run("jobs", "list")
    assert everything.exit_code == 0, everything.output
    assert _ids(everything.stdout) == list(reversed(jobs))
    assert "completed" in everything.stdout and "failed" in everything.stdout

    failed = run("jobs", "list", "--status", "failed")
    assert _ids(failed.stdout) == [jobs[2]]
    assert "summarize" in failed.stdout

    translate = run("jobs", "list", "--pattern", "translate")
    assert _ids(translate.stdout) == [jobs[1]]

    newest = run("jobs", "list", "--limit", "1")
    assert _ids(newest.stdout) == [jobs[2]]

    none = run("jobs", "list", "--pattern", "nothing-like-this")
    assert (none.exit_code, none.stdout, none.stderr.strip()) == (0, "", "no jobs match")


def test_jobs_list_refuses_an_unknown_status_in_one_line(jobs: list[str]) -> None:
    result = run("jobs", "list", "--status", "done")
    assert result.exit_code == 2
    assert "'done' is not one of" in result.stderr
    assert "Traceback" not in result.output


def test_jobs_show_prints_the_redacted_record(jobs: list[str]) -> None:
    result = run("jobs", "show", jobs[0])
    assert result.exit_code == 0, result.output
    record: dict[str, Any] = json.loads(result.stdout)
    assert (record["id"], record["status"], record["source_name"]) == (
        jobs[0],
        "completed",
        "summarize",
    )
    assert record["variables_hash"].startswith("sha256:")
    assert "alice@example.com" not in result.stdout  # stored redacted


def test_jobs_show_unknown_id_is_the_apis_job_not_found(jobs: list[str]) -> None:
    result = run("jobs", "show", "0" * 32)
    assert result.exit_code == 1
    assert json.loads(result.stderr)["error"]["type"] == "job_not_found"


def test_jobs_replay_reproduces_the_prompt_and_reveal_returns_it_raw(jobs: list[str]) -> None:
    redacted = run("jobs", "replay", jobs[0])
    assert redacted.exit_code == 0, redacted.output
    result = json.loads(redacted.stdout)
    assert (result["job_id"], result["reproduced"], result["revealed"]) == (jobs[0], True, False)
    assert "alice@example.com" not in redacted.stdout

    revealed = run("jobs", "replay", jobs[0], "--reveal")
    assert revealed.exit_code == 0, revealed.output
    assert json.loads(revealed.stdout)["revealed"] is True
    assert "alice@example.com" in revealed.stdout


def test_drift_reports_an_edited_pattern_and_exits_1(jobs: list[str], tmp_path: Path) -> None:
    clean = run("drift")
    assert clean.exit_code == 0, clean.output
    assert json.loads(clean.stdout)["drifted"] == []

    pattern = tmp_path / "patterns" / "translate.md"
    pattern.write_text(pattern.read_text() + "\nBe brief.\n")
    drifted = run("drift")
    assert drifted.exit_code == 1
    assert [d["source_name"] for d in json.loads(drifted.stdout)["drifted"]] == ["translate"]

    replay = run("jobs", "replay", jobs[1])  # the job's pattern no longer hashes the same
    assert replay.exit_code == 1
    assert json.loads(replay.stdout)["reproduced"] is False


def test_the_old_templates_check_drift_name_still_works(jobs: list[str]) -> None:
    result = run("templates", "check-drift")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout[result.stdout.index("{") :])["drifted"] == []
    assert "check-drift" not in run("templates", "--help").stdout  # hidden: `genai drift` now


@pytest.mark.parametrize(
    "command",
    [("jobs", "list"), ("jobs", "show", "0" * 32), ("jobs", "replay", "0" * 32), ("drift",)],
)
def test_outside_the_service_directory_no_empty_store_is_made_up(
    cli_env: Callable[..., None], tmp_path: Path, command: tuple[str, ...]
) -> None:
    # The default store `data/genai.db` is relative: run elsewhere, the trail is not there.
    result = run(*command)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"genai: GENAI_DATABASE_URL: no audit database at data/genai.db (relative to {tmp_path}); "
        "run genai from the directory the service runs in, or set GENAI_DATA_DIR or "
        "GENAI_DATABASE_URL"
    ]
    assert not (tmp_path / "data").exists()
