"""A degraded store: every route that needs it answers 503 store_unavailable, fast, never 500.

Real failures on real backends: a table locked by another session, a database dropped (or its
file gone) under a running service, and a PostgreSQL server that is not there at all. Each
request runs under a generous liveness timeout: the point is "answers instead of hanging".
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.engine import make_url

from tests.conftest import POSTGRES_ADMIN_DSN
from tests.fakes.provider_server import FakeProviderServer
from tests.security.live import free_port
from tests.support import running_app, settings_for

LIVENESS_SECONDS = 30  # far above the 0.5 s lock timeout; only a hang reaches it
RENDER = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "hello"}
TEMPLATE = {"name": "reply", "role": "writer", "template": "Hi {{ who }}", "variables": ["who"]}
SNIPPET = {"identifier": "nova", "name": "Nova", "text": "You are Nova."}
JOB = "0" * 32

# Every route that reads or writes the store, as (method, path, JSON body).
READS: list[tuple[str, str, Any]] = [
    ("GET", "/v1/templates", None),
    ("GET", "/v1/templates/reply/writer/versions/1", None),
    ("POST", "/v1/render", {"template": {"name": "reply", "role": "writer"}, "user_prompt": "x"}),
    ("GET", "/v1/snippets", None),
    ("GET", "/v1/snippets/nova", None),
    ("GET", f"/v1/jobs/{JOB}", None),
    ("POST", f"/v1/jobs/{JOB}/replay", None),
    ("GET", "/v1/drift", None),
]
WRITES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/templates", {**TEMPLATE, "template": "Hello {{ who }}"}),
    ("POST", "/v1/templates/reply/writer/versions/1/activate", None),
    ("POST", "/v1/snippets", {**SNIPPET, "identifier": "other"}),
    ("PUT", "/v1/snippets/nova", {**SNIPPET, "text": "changed"}),
    ("DELETE", "/v1/snippets/nova", None),
    ("POST", "/v1/completions", RENDER),
]


def _settings(fake: FakeProviderServer, database_url: str, **extra: Any) -> Any:
    options: dict[str, Any] = {
        "database_url": database_url,
        "database_auto_migrate": True,
        "database_lock_timeout_seconds": 0.5,
        "database_statement_timeout_seconds": 2.0,
        "auth_cache_seconds": 300,  # the key is checked once, before the store degrades
    }
    return settings_for(fake, **{**options, **extra})


@contextlib.asynccontextmanager
async def _service(settings: Any) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with running_app(settings) as (app, http):
        yield app, http


async def _call(http: httpx.AsyncClient, method: str, path: str, body: Any) -> httpx.Response:
    async with asyncio.timeout(LIVENESS_SECONDS):
        return await http.request(method, path, json=body)


async def _seed(http: httpx.AsyncClient) -> None:
    """Data for the routes to find, and one authenticated request while the store is healthy."""
    assert (await http.post("/v1/templates", json=TEMPLATE)).status_code == 201
    assert (await http.post("/v1/snippets", json=SNIPPET)).status_code == 201


async def assert_unavailable(
    http: httpx.AsyncClient, routes: list[tuple[str, str, Any]], *, saying: str | tuple[str, ...]
) -> None:
    phrasings = (saying,) if isinstance(saying, str) else saying
    for method, path, body in routes:
        resp = await _call(http, method, path, body)
        assert resp.status_code == 503, (method, path, resp.status_code, resp.text)
        error = resp.json()["error"]
        assert error["type"] == "store_unavailable", (method, path, error)
        if path != "/v1/completions":  # the audit trail words its own: the provider was not called
            assert any(p in error["message"] for p in phrasings), (method, path, error)
        assert "SELECT" not in error["message"] and "INSERT" not in error["message"]


async def assert_not_ready(http: httpx.AsyncClient) -> None:
    ready = await _call(http, "GET", "/readyz", None)
    assert ready.status_code == 503
    body = ready.json()
    assert body["status"] == "not_ready"
    assert body["database"]["reachable"] is False
    # Liveness and the routes that need no store keep working.
    assert (await _call(http, "GET", "/healthz", None)).json() == {"status": "ok"}
    assert (await _call(http, "GET", "/v1/patterns", None)).status_code == 200
    assert (await _call(http, "POST", "/v1/render", RENDER)).status_code == 200


def _asyncpg_dsn(database_url: str) -> str:
    return database_url.replace("postgresql+asyncpg://", "postgresql://")


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)
async def test_locked_postgres_tables_answer_503_within_the_lock_timeout(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with _service(_settings(fake, database_url)) as (_, http):
        await _seed(http)
        holder = await asyncpg.connect(_asyncpg_dsn(database_url))
        try:
            locked = holder.transaction()
            await locked.start()
            for table in ("jobs", "prompt_templates", "snippets"):
                await holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            await assert_unavailable(http, READS + WRITES, saying="did not answer in time")
            await assert_not_ready(http)
            await locked.rollback()
        finally:
            await holder.close()
        # The lock is gone: the same service serves again, no restart.
        assert (await _call(http, "GET", "/readyz", None)).status_code == 200
        assert (await _call(http, "GET", "/v1/templates", None)).status_code == 200


async def test_sqlite_writes_wait_boundedly_for_another_writer_then_answer_503(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    path = tmp_path / "genai.db"
    async with _service(_settings(fake, f"sqlite+aiosqlite:///{path}")) as (_, http):
        await _seed(http)
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # holds the single writer lock
            # (Activating the already active version writes nothing, so it is left out.)
            writes = [w for w in WRITES if not w[1].endswith("/activate")]
            await assert_unavailable(http, writes, saying="did not answer in time")
            # WAL: readers are not blocked by a writer.
            assert (await _call(http, "GET", "/v1/templates", None)).status_code == 200
            other.execute("ROLLBACK")
        finally:
            other.close()
        resp = await _call(http, "POST", "/v1/snippets", {**SNIPPET, "identifier": "after"})
        assert resp.status_code == 201


@contextlib.contextmanager
def _sqlite_file_gone(path: Path) -> Iterator[None]:
    """The database file's volume went away: the path now cannot be opened as a database."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.mkdir()
    try:
        yield
    finally:
        shutil.rmtree(path)


async def test_a_store_that_disappears_under_the_service_answers_503(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with _service(_settings(fake, database_url)) as (app, http):
        await _seed(http)
        # Drop every pooled connection first, as a restarted or vanished server would.
        await app.state.runtime.database.engine.dispose()
        if database_url.startswith("postgresql"):
            admin = await asyncpg.connect(POSTGRES_ADMIN_DSN)
            try:
                name = make_url(database_url).database
                await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            finally:
                await admin.close()
            # A dropped database refuses a connection at once, unless the server is too busy to
            # refuse within the connect timeout: either is a vanished store, worded truthfully.
            gone = ("cannot be reached", "did not answer in time")
            await assert_unavailable(http, READS + WRITES, saying=gone)
            await assert_not_ready(http)
        else:
            path = Path(str(make_url(database_url).database))
            with _sqlite_file_gone(path):
                await assert_unavailable(http, READS + WRITES, saying="cannot be reached")
                await assert_not_ready(http)


async def test_an_unreachable_postgres_at_start_gives_a_running_service_that_answers_503(
    fake: FakeProviderServer,
) -> None:
    """Nothing listens on the port: the service starts not-ready and recovers by itself later;
    `genai serve` refuses to start instead (tests/security/test_operator_errors.py)."""
    url = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/genai"
    settings = _settings(fake, url, database_auto_migrate=False, auth_disabled=True)
    async with _service(settings) as (_, http):
        await assert_unavailable(http, READS + WRITES, saying="cannot be reached")
        await assert_not_ready(http)
