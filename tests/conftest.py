"""Shared fixtures: a loopback provider server, an isolated environment, the app over ASGI."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import structlog

from app.config import get_settings
from app.store.db import Database
from tests.fakes.provider_server import FakeProviderServer, running_fake_provider
from tests.processes import interrupt_on_sigterm
from tests.support import serve_app, settings_for

_ENV_PREFIXES = ("GENAI_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")
# The PostgreSQL server the suite runs against; each test gets a database of its own on it.
POSTGRES_ADMIN_DSN = os.environ.get(
    "GENAI_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()  # the processes tests start still end when the run is terminated


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A developer's own keys or overrides must never leak into a test, nor one test's logging
    set-up into the next (an app points structlog at the stderr of the test that built it,
    which pytest may close once that test ends)."""
    for name in list(os.environ):
        if name.startswith(_ENV_PREFIXES) and not name.startswith("GENAI_TEST_"):
            monkeypatch.delenv(name)
    logging_config = structlog.get_config()
    yield
    structlog.configure(**logging_config)


async def _postgres_database() -> tuple[str, str]:
    """Create an empty database; return (its SQLAlchemy URL, its name)."""
    name = f"genai_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = await asyncpg.connect(POSTGRES_ADMIN_DSN, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        message = f"PostgreSQL at {POSTGRES_ADMIN_DSN} is unreachable: {exc}"
        if os.environ.get("CI"):
            pytest.fail(message + " (CI must run the PostgreSQL suite, so this fails)")
        pytest.skip(message)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base = POSTGRES_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return f"{base}/{name}", name


async def _drop_postgres_database(name: str) -> None:
    admin = await asyncpg.connect(POSTGRES_ADMIN_DSN, timeout=5)
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty database on each backend the service supports."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'genai.db'}"
        return
    url, name = await _postgres_database()
    try:
        yield url
    finally:
        await _drop_postgres_database(name)


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A migrated database on each backend, closed after the test."""
    db = Database(database_url)
    await db.migrate()
    try:
        yield db
    finally:
        await db.aclose()


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeProviderServer]:
    with running_fake_provider() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeProviderServer) -> FakeProviderServer:
    """The shared loopback provider, with its script and recordings cleared."""
    fake_server.reset()
    return fake_server


@pytest.fixture
async def client(fake: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(settings_for(fake)) as http:
        yield http


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """For in-process `genai` runs: a clean working directory (no stray .env), fresh cached
    settings, and structlog restored afterwards (the CLI points it at the runner's stderr).
    Yields a setter for GENAI_* variables."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GENAI_LOG_JSON", "true")
    logging_config = structlog.get_config()
    get_settings.cache_clear()

    def use(**env: str) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    yield use
    get_settings.cache_clear()
    structlog.configure(**logging_config)
