"""The engine and sessions, their timeouts, the storage-error seam, and Alembic migrations.

Every repository method that touches the database is wrapped by `store_seam`: whatever the
driver, pool or network raises there becomes one `StoreUnavailable` (503), so no route answers
500 because the database is down, locked or slow. Timeouts make sure "slow" ends: PostgreSQL
gets server-side statement and lock timeouts plus client-side connect and command timeouts,
SQLite a busy timeout, and both a bounded wait for a pooled connection.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import asyncpg
import structlog
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, text
from sqlalchemy import exc as sqlalchemy_exc
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from app.config import Settings
from app.errors import ConfigurationError, StoreUnavailable
from app.store import sqlite_hints  # noqa: F401  (registers INDEXED BY for SQLite queries)
from app.store.lane import HeldConnectionLane, PooledLane, WriteLane
from app.store.private import create_private_file, ensure_private_dir

log = structlog.get_logger(__name__)

MIGRATIONS = "app.store:migrations"
DATABASE_URL_SETTING = "GENAI_DATABASE_URL"
# Room for the server's own statement timeout to fire first, with its clearer error.
_COMMAND_TIMEOUT_MARGIN_SECONDS = 5.0
_DEFAULTS = Settings.model_fields

#: What the storage layer raises when the database cannot serve: SQLAlchemy's errors (pool
#: timeouts included), OS and network errors (TimeoutError is an OSError), and driver errors
#: raised outside SQLAlchemy's wrapping, such as asyncpg's while connecting.
STORAGE_ERRORS: tuple[type[BaseException], ...] = (
    SQLAlchemyError,
    OSError,
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
)

P = ParamSpec("P")
T = TypeVar("T")


# PostgreSQL's query_canceled (statement_timeout) and lock_not_available (lock_timeout).
_PG_TIMEOUT_STATES = frozenset({"57014", "55P03"})


def _timed_out(cause: BaseException) -> bool:
    """Whether the store gave up waiting, judged by type and structured error codes."""
    if isinstance(cause, TimeoutError | sqlalchemy_exc.TimeoutError):  # client side, pool
        return True
    if getattr(cause, "sqlstate", None) in _PG_TIMEOUT_STATES:
        return True
    return getattr(cause, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY  # busy_timeout


def describe_storage_error(exc: BaseException) -> str:
    """One line about what went wrong, without SQL or parameters (they may hold personal data)."""
    cause: BaseException = exc.orig if isinstance(exc, DBAPIError) and exc.orig else exc
    message = next(iter(str(cause).strip().splitlines()), "")[:200]
    if _timed_out(cause) or _timed_out(exc):
        return f"timed out: {message}" if message else "timed out"
    return message or type(cause).__name__


def store_unavailable(exc: BaseException) -> StoreUnavailable:
    """The 503 for a storage failure; the cause stays attached for logs and the CLI."""
    timed_out = describe_storage_error(exc).startswith("timed out")
    problem = "did not answer in time" if timed_out else "cannot be reached"
    error = StoreUnavailable(f"The database {problem}; try again shortly (see /readyz).")
    error.__cause__ = exc
    return error


def store_seam(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Decorate a repository method: storage failures leave it only as StoreUnavailable."""

    @functools.wraps(method)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(*args, **kwargs)
        except STORAGE_ERRORS as exc:
            raise store_unavailable(exc) from exc

    return guarded


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    return config


def _parse_url(url: str) -> URL:
    """The URL, if it names a backend this service runs on with its async driver."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigurationError(
            DATABASE_URL_SETTING,
            "is not a database URL; use sqlite+aiosqlite:///path/genai.db or "
            "postgresql+asyncpg://user@host/db",
        ) from None
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    wanted = {"sqlite": "aiosqlite", "postgresql": "asyncpg"}.get(backend)
    if wanted is None:
        raise ConfigurationError(
            DATABASE_URL_SETTING,
            f"the {backend!r} database is not supported; use sqlite+aiosqlite:// or "
            "postgresql+asyncpg://",
        )
    if driver != wanted:
        raise ConfigurationError(
            DATABASE_URL_SETTING,
            f"{parsed.drivername}:// needs the async driver: write {backend}+{wanted}://…",
        )
    return parsed


def _sqlite_tuning(busy_timeout_ms: int) -> Callable[[Any, Any], None]:
    def tune(dbapi_connection: Any, _: Any) -> None:
        """WAL lets readers run beside the writer; a busy timeout waits, boundedly, for the lock.
        Incremental auto-vacuum lets a prune return freed pages in steps; it only takes on a
        database with no table yet (elsewhere it is a no-op: `genai jobs prune --vacuum`)."""
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    return tune


class Database:
    def __init__(
        self,
        url: str,
        *,
        statement_timeout: float = _DEFAULTS["database_statement_timeout_seconds"].default,
        lock_timeout: float = _DEFAULTS["database_lock_timeout_seconds"].default,
    ) -> None:
        """Raises ConfigurationError for a URL this service cannot use; connects lazily."""
        parsed = _parse_url(url)
        self.url = url
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self.safe_url = parsed.render_as_string(hide_password=True)
        self._statement_timeout = statement_timeout
        self._lock_timeout = lock_timeout
        if self.is_sqlite and parsed.database and parsed.database != ":memory:":
            self._prepare_sqlite_file(Path(parsed.database))
        self.engine: AsyncEngine = self._engine(for_migrations=False)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self.lane: WriteLane = self._lane()

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(
            settings.resolved_database_url,
            statement_timeout=settings.database_statement_timeout_seconds,
            lock_timeout=settings.database_lock_timeout_seconds,
        )

    @staticmethod
    def _prepare_sqlite_file(path: Path) -> None:
        """Directory 0700 and file 0600 before SQLite opens it (its -wal and -shm copy the mode)."""
        try:
            ensure_private_dir(path.parent)
            create_private_file(path)
        except OSError as exc:
            raise ConfigurationError(
                DATABASE_URL_SETTING, f"cannot create {path}: {exc.strerror or exc}"
            ) from None

    def _engine(self, *, for_migrations: bool) -> AsyncEngine:
        # Parameters never appear in error messages or logs: they may hold personal data.
        options: dict[str, Any] = {"hide_parameters": True}
        if self.is_sqlite:
            # SQLite allows one writer: a single pooled connection queues work fairly in-process
            # instead of letting transactions collide on the file lock (seen as multi-second tails
            # and "database is locked" under load).
            options |= {"pool_size": 1, "max_overflow": 0, "pool_timeout": self._lock_timeout}
        elif for_migrations:
            # Migrations may legitimately run long: no statement or command timeout, one
            # short-lived connection; the lock timeout stays so they never queue forever.
            options |= {
                "poolclass": NullPool,
                "connect_args": self._postgres_connect_args(statement_timeout=None),
            }
        else:
            # A real pool, pinged on checkout so a restarted server costs no failed request.
            options |= {
                "pool_size": 10,
                "max_overflow": 10,
                "pool_pre_ping": True,
                "pool_timeout": self._lock_timeout,
                "connect_args": self._postgres_connect_args(
                    statement_timeout=self._statement_timeout
                ),
            }
        engine = create_async_engine(self.url, **options)
        if self.is_sqlite:
            busy_ms = int(self._lock_timeout * 1000)
            event.listen(engine.sync_engine, "connect", _sqlite_tuning(busy_ms))
        return engine

    def _lane(self) -> WriteLane:
        """The audit writer's way in (see `app.store.lane` for why SQLite keeps the pool)."""
        if self.is_sqlite:
            return PooledLane(self.sessions)
        return HeldConnectionLane(self.engine)

    def _postgres_connect_args(self, *, statement_timeout: float | None) -> dict[str, Any]:
        server = {"lock_timeout": str(int(self._lock_timeout * 1000))}
        args: dict[str, Any] = {"timeout": self._lock_timeout, "server_settings": server}
        if statement_timeout is not None:
            server["statement_timeout"] = str(int(statement_timeout * 1000))
            args["command_timeout"] = statement_timeout + _COMMAND_TIMEOUT_MARGIN_SECONDS
        return args

    @store_seam
    async def migrate(self, revision: str = "head") -> None:
        """Bring the schema up to `revision`, the newest by default."""
        await self._run_migrations(command.upgrade, revision)
        log.info("database_migrated", url=self.safe_url, revision=revision)

    @store_seam
    async def downgrade(self, revision: str) -> None:
        """Take the schema back down to `revision` (an operator's way back from an upgrade)."""
        await self._run_migrations(command.downgrade, revision)
        log.info("database_downgraded", url=self.safe_url, revision=revision)

    async def _run_migrations(self, action: Callable[[Config, str], None], revision: str) -> None:
        """On a connection without statement timeout: migrations may legitimately run long."""

        def run(connection: Connection) -> None:
            config = _alembic_config()
            config.attributes["connection"] = connection
            action(config, revision)

        engine = self.engine if self.is_sqlite else self._engine(for_migrations=True)
        try:
            async with engine.begin() as connection:
                await connection.run_sync(run)
        finally:
            if engine is not self.engine:
                await engine.dispose()

    @store_seam
    async def schema_is_current(self) -> bool:
        def current(connection: Connection) -> bool:
            heads = set(ScriptDirectory.from_config(_alembic_config()).get_heads())
            return set(MigrationContext.configure(connection).get_current_heads()) == heads

        async with self.engine.connect() as connection:
            return await connection.run_sync(current)

    async def ensure_reachable(self) -> None:
        """A round trip to the database; an operator error naming the setting when it fails."""
        try:
            async with self.engine.connect() as connection:
                await connection.execute(text("SELECT 1"))
        except STORAGE_ERRORS as exc:
            raise ConfigurationError(
                DATABASE_URL_SETTING,
                f"cannot reach {self.safe_url}: {describe_storage_error(exc)}",
            ) from None

    async def aclose(self) -> None:
        await self.lane.aclose()
        await self.engine.dispose()


async def check_reachable(settings: Settings) -> None:
    """For start-up and the CLI: the configured store answers, or a one-line ConfigurationError."""
    database = Database.from_settings(settings)
    try:
        await database.ensure_reachable()
    finally:
        await database.aclose()
