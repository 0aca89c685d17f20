"""What the service writes to disk is its user's alone: directories 0700, files 0600.

The umask is cleared during each test, so the modes come from the code, not from a kind umask.
"""

from __future__ import annotations

import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from app.store.db import Database
from app.store.secrets import load_or_create_key
from tests.security.live import cleared_umask
from tests.support import run_cli


@pytest.fixture(autouse=True)
def _no_umask() -> Iterator[None]:
    with cleared_umask():
        yield


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_the_sqlite_database_and_its_wal_files_are_0600_in_a_0700_directory(
    tmp_path: Path,
) -> None:
    path = tmp_path / "fresh" / "nested" / "genai.db"
    database = Database(f"sqlite+aiosqlite:///{path}")
    try:
        await database.migrate()
        async with database.sessions.begin() as session:  # a write, so the WAL is used
            await session.execute(text("CREATE TABLE probe (x INTEGER)"))
        for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            assert file.exists() and mode(file) == 0o600, (file, oct(mode(file)))
    finally:
        await database.aclose()
    assert mode(tmp_path / "fresh") == 0o700
    assert mode(tmp_path / "fresh" / "nested") == 0o700


async def test_an_existing_directory_is_not_changed(tmp_path: Path) -> None:
    """An operator's own directory keeps its mode (it may be shared on purpose)."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o750)
    database = Database(f"sqlite+aiosqlite:///{shared / 'genai.db'}")
    await database.aclose()
    assert mode(shared) == 0o750
    assert mode(shared / "genai.db") == 0o600


def test_generated_keys_are_0600_in_a_0700_directory(tmp_path: Path) -> None:
    keys = tmp_path / "data" / "keys"
    key = load_or_create_key(None, keys / "data.key", what="GENAI_DATA_KEY")
    assert len(key) == 32
    assert mode(keys / "data.key") == 0o600
    assert mode(keys) == 0o700 and mode(tmp_path / "data") == 0o700
    # Read back, not regenerated.
    assert load_or_create_key(None, keys / "data.key", what="GENAI_DATA_KEY") == key
    configured = SecretStr("A" * 43 + "=")
    assert load_or_create_key(configured, keys / "other.key", what="GENAI_DATA_KEY") != key
    assert not (keys / "other.key").exists()  # a configured key is never written to disk


def test_the_data_directory_the_cli_creates_is_private(
    cli_env: Callable[..., None], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    cli_env(GENAI_DATA_DIR=str(data))
    assert run_cli("templates", "list").exit_code == 0
    assert mode(data) == 0o700 and mode(data / "keys") == 0o700
    written = sorted(p for p in data.rglob("*") if p.is_file())
    assert {p.name for p in written} >= {"genai.db", "redaction.key", "data.key"}
    for file in written:
        assert mode(file) == 0o600, (file, oct(mode(file)))
