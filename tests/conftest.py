"""Shared fixtures: a loopback provider server, an isolated environment, the app over ASGI."""

from __future__ import annotations

import asyncio
import os
import shutil
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


# The slow tiers, marked here in one place so a fast local loop can leave them out
# (`pytest -m "not browser and not served"`, docs/development.md); `.ci/run` runs everything.
# A module that serves the app on a port (uvicorn, or `genai serve` in a subprocess) is `served`;
# a module whose code meets a clock it does not own (Redis TTLs, `now()` in SQL, expiries,
# windows, retention) is `clock`, and `.ci/shifted-clock` runs those under a moved calendar.
_SERVED = {
    "test_anthropic_door", "test_auth", "test_cli", "test_clients", "test_deploy",
    "test_generated_client", "test_metrics", "test_openai_compat", "test_openai_door",
    "test_precedence", "test_processes", "test_quotas_http", "test_runtime", "test_schemathesis",
    "test_serve_workers", "test_signing_doors", "test_webhooks",
}  # fmt: skip
_CLOCK = {
    "test_admin_events", "test_admin_events_store", "test_audit_chain", "test_audit_chain_http",
    "test_auth", "test_cache", "test_cli_keys", "test_console_keys", "test_console_sessions",
    "test_console_usage_integrity", "test_jobs_list_api", "test_jobs_list_store",
    "test_keys_and_teams", "test_limits", "test_quotas", "test_quotas_http", "test_retention",
    "test_template_labels", "test_template_labels_release", "test_usage", "test_usage_overhead",
    "test_usage_report", "test_webhooks", "test_webhooks_http",
}  # fmt: skip


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module, folder = item.path.stem, item.path.parent.name
        callspec = getattr(item, "callspec", None)
        params = {v for v in callspec.params.values() if isinstance(v, str)} if callspec else set()
        fixtures = set(getattr(item, "fixturenames", ()))
        if folder == "console":
            item.add_marker(pytest.mark.browser)
        if folder == "security" or module in _SERVED:
            item.add_marker(pytest.mark.served)
        if module in _CLOCK:
            item.add_marker(pytest.mark.clock)
        if "postgres" in params or "postgres" in fixtures:
            item.add_marker(pytest.mark.postgres)
        if "redis" in params or "redis" in fixtures:
            item.add_marker(pytest.mark.redis)


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


def _postgres_unreachable(exc: BaseException) -> None:
    message = f"PostgreSQL at {POSTGRES_ADMIN_DSN} is unreachable: {exc}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI must run the PostgreSQL suite, so this fails)")
    pytest.skip(message)


async def _postgres_database(template: str | None = None) -> tuple[str, str]:
    """Create a database, empty or a copy of `template`; return (its SQLAlchemy URL, its name)."""
    name = f"genai_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = await asyncpg.connect(POSTGRES_ADMIN_DSN, timeout=5)
    except (OSError, asyncpg.PostgresError) as exc:
        _postgres_unreachable(exc)
    try:
        copy = f' TEMPLATE "{template}"' if template else ""
        await admin.execute(f'CREATE DATABASE "{name}"{copy}')
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


class MigratedTemplates:
    """A database of each backend migrated to head once per test process, copied for each test
    that wants a migrated one: a migration costs 0.4 s (SQLite) to 1 s (PostgreSQL), and all
    but a few tests are not about it (those take `empty_database_url`)."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._sqlite: Path | None = None
        self._postgres: str | None = None

    async def sqlite_copy(self, target: Path) -> str:
        if self._sqlite is None:
            path = self._root / "template.db"
            template = Database(f"sqlite+aiosqlite:///{path}")
            await template.migrate()
            await template.aclose()  # checkpoints the WAL: the one file holds everything
            self._sqlite = path
        shutil.copyfile(self._sqlite, target)
        return f"sqlite+aiosqlite:///{target}"

    async def postgres_copy(self) -> tuple[str, str]:
        if self._postgres is None:
            url, name = await _postgres_database()
            template = Database(url)
            await template.migrate()
            await template.aclose()  # a template may have no other connection when copied
            self._postgres = name
        return await _postgres_database(template=self._postgres)

    async def aclose(self) -> None:
        if self._postgres is not None:
            await _drop_postgres_database(self._postgres)


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    templates = MigratedTemplates(tmp_path_factory.mktemp("templates"))
    yield templates
    asyncio.run(templates.aclose())


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(
    request: pytest.FixtureRequest, tmp_path: Path, migrated_templates: MigratedTemplates
) -> AsyncIterator[str]:
    """A fresh database on each backend the service supports, already migrated to head."""
    if request.param == "sqlite":
        yield await migrated_templates.sqlite_copy(tmp_path / "genai.db")
        return
    url, name = await migrated_templates.postgres_copy()
    try:
        yield url
    finally:
        await _drop_postgres_database(name)


@pytest.fixture(params=["sqlite", "postgres"])
async def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh, empty database on each backend: for tests of the migrations themselves."""
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
