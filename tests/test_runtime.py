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
        # Saving keys' last use, the stale-job checks, the pattern file watcher, the chainer.
        assert len(started) == 4
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


def test_genai_serve_reads_the_pattern_catalog_once_for_one_worker(
    tmp_path: Path, cli_env: Any, monkeypatch: Any
) -> None:
    """The preflight's catalog is the one the single worker's runtime serves; with several
    workers each process imports the factory and reads its own."""
    import uvicorn
    from starlette.testclient import TestClient

    from app.catalog import library
    from tests.support import SHIPPED_PATTERNS, run_cli

    cli_env(GENAI_DATA_DIR=str(tmp_path / "data"), GENAI_PATTERN_DIR=str(SHIPPED_PATTERNS))
    reads: list[str] = []
    original = library.read_pattern  # type: ignore[attr-defined]

    def counted(name: str, *args: Any, **kwargs: Any) -> Any:
        reads.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(library, "read_pattern", counted)
    apps: list[Any] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: apps.append((app, options)))

    assert run_cli("serve").exit_code == 0
    ((factory, options),) = apps
    assert options["factory"] is True and callable(factory)
    with TestClient(factory()) as client:  # the lifespan builds the runtime
        assert client.get("/readyz").status_code == 200
        assert client.app.state.runtime.patterns.names()  # type: ignore[attr-defined]
    assert sorted(reads) == sorted(set(reads))  # each file read once, by the preflight

    apps.clear()
    # `serve --workers 2` sets this for its workers; the monkeypatch takes it back afterwards.
    monkeypatch.setenv("GENAI_DATABASE_AUTO_MIGRATE", "true")
    assert run_cli("serve", "--workers", "2").exit_code == 0
    assert apps[0][0] == "app.main:create_app"
