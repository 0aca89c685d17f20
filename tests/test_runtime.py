"""The runtime's lifecycle: `build_runtime` only builds (every CLI command stops there), `start`
adds the background work a serving process needs, and `aclose` stops all of it before closing
the rest, so a stop leaves no task behind."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from app.runtime import build_runtime
from tests.support import settings_for


def _events(logs: list[MutableMapping[str, Any]]) -> list[Any]:
    return [line["event"] for line in logs]


async def test_a_started_runtime_runs_its_background_work_until_it_is_closed(
    tmp_path: Path,
) -> None:
    settings = settings_for(None, data_dir=tmp_path, pattern_reload_seconds=0.05)
    before = asyncio.all_tasks()
    with capture_logs() as logs:
        runtime = await build_runtime(settings)
        built = asyncio.all_tasks() - before  # the audit writer's own
        await runtime.start()
        started = asyncio.all_tasks() - before - built
        # Saving keys' last use, the stale-job checks, the pattern file watcher.
        assert len(started) == 3
        assert not any(task.done() for task in started)
        await runtime.aclose()
    assert all(task.done() for task in built | started)
    assert _events(logs).count("service_started") == 1
    assert _events(logs)[-1] == "service_stopped"


async def test_a_runtime_that_is_only_built_starts_nothing_and_says_no_service_ran(
    tmp_path: Path,
) -> None:
    settings = settings_for(None, data_dir=tmp_path, pattern_reload_seconds=0.05)
    before = asyncio.all_tasks()
    with capture_logs() as logs:
        runtime = await build_runtime(settings)
        built = asyncio.all_tasks() - before
        await runtime.aclose()
    assert all(task.done() for task in built)
    assert "service_started" not in _events(logs)
    assert "service_stopped" not in _events(logs)
