"""The engine and sessions, SQLite tuning, and migrations run in-process with Alembic."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

log = structlog.get_logger(__name__)

MIGRATIONS = "app.store:migrations"


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    return config


def _tune_sqlite(dbapi_connection: Any, _: Any) -> None:
    """WAL lets readers run beside the writer; a busy timeout waits instead of failing."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class Database:
    def __init__(self, url: str) -> None:
        parsed = make_url(url)
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        if self.is_sqlite and parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        # SQLite allows one writer: a single pooled connection queues work fairly in-process
        # instead of letting transactions collide on the file lock (seen as multi-second tails
        # and "database is locked" under load). PostgreSQL gets a real pool, pinged on checkout
        # so a restarted server costs no failed request.
        options: dict[str, Any] = (
            {"pool_size": 1, "max_overflow": 0, "pool_timeout": 30}
            if self.is_sqlite
            else {"pool_size": 10, "max_overflow": 10, "pool_pre_ping": True}
        )
        self.engine: AsyncEngine = create_async_engine(url, **options)
        if self.is_sqlite:
            event.listen(self.engine.sync_engine, "connect", _tune_sqlite)
        self.sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        self.safe_url = parsed.render_as_string(hide_password=True)

    async def migrate(self) -> None:
        """Bring the schema to the newest migration."""

        def upgrade(connection: Connection) -> None:
            config = _alembic_config()
            config.attributes["connection"] = connection
            command.upgrade(config, "head")

        async with self.engine.begin() as connection:
            await connection.run_sync(upgrade)
        log.info("database_migrated", url=self.safe_url)

    async def schema_is_current(self) -> bool:
        def current(connection: Connection) -> bool:
            heads = set(ScriptDirectory.from_config(_alembic_config()).get_heads())
            return set(MigrationContext.configure(connection).get_current_heads()) == heads

        async with self.engine.connect() as connection:
            return await connection.run_sync(current)

    async def aclose(self) -> None:
        await self.engine.dispose()
