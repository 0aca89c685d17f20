"""The first admin key never reaches the log stream, over real HTTP to `genai serve`.

Under the image, compose and Kubernetes, the console *is* the log stream (`docker logs`, a log
shipper). So only an operator's terminal is shown the key; everywhere else it lands in a 0600
file under the data directory and the log names the file, never the key.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from app.auth import keys
from tests.fakes.provider_server import FakeProviderServer
from tests.security.conftest import Serve
from tests.security.live import (
    FIRST_KEY_FILE,
    LiveService,
    cleared_umask,
    live_service,
    service_env,
    store_env,
)


async def _names_of_keys(service: LiveService, admin_key: str) -> list[str]:
    async with service.client(admin_key) as http:
        resp = await http.get("/v1/keys")
    assert resp.status_code == 200, resp.text
    return [key["name"] for key in resp.json()["keys"]]


def _files_holding(root: Path, secret: str, *, besides: Path) -> list[Path]:
    """Every file under `root` but `besides` whose bytes contain `secret`: logs, the SQLite
    database and its WAL, the spool."""
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and path != besides and secret.encode() in path.read_bytes()
    ]


def _log_events(service: LiveService) -> list[dict[str, object]]:
    return [json.loads(line) for line in service.log().splitlines() if line.startswith("{")]


async def test_without_a_terminal_the_key_goes_to_a_0600_file_and_never_to_the_log(
    serve: Serve, tmp_path: Path
) -> None:
    key_file = tmp_path / "data" / FIRST_KEY_FILE
    with cleared_umask(), serve() as first:  # the service inherits umask 0
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        key = first.first_admin_key()
        assert keys.parse(key) is not None, key
        assert await _names_of_keys(first, key) == ["first-admin"]  # a working admin key
        [written] = [e for e in _log_events(first) if e["event"] == "first_admin_key_written"]
        assert written["path"] == str(key_file)
        first.stop()
    assert "gsk_" not in first.log(), "the key (or any key) reached stdout or stderr"
    assert [p.name for p in key_file.parent.iterdir() if "first-admin" in p.name] == [key_file.name]
    with serve() as second:  # the store has a key now: no new one is made
        assert await _names_of_keys(second, key) == ["first-admin"]
        assert key_file.read_text().strip() == key
        second.stop()
    events = {str(e["event"]) for e in _log_events(second)}
    assert "first_admin_key_written" not in events and "gsk_" not in second.log()
    assert "first_admin_key_file_left" in events, "a file left on disk is pointed out"
    assert _files_holding(tmp_path, key, besides=key_file) == []


async def test_on_an_operators_terminal_the_key_is_shown_there_and_no_file_is_written(
    fake: FakeProviderServer, database_url: str, tmp_path: Path
) -> None:
    env = store_env(fake, database_url, tmp_path / "data")
    env.pop("GENAI_LOG_JSON")  # an operator's shell sets nothing: the console format, on a TTY
    with live_service(env, tmp_path, terminal=True) as service:
        shown = [
            line.strip() for line in service.log().splitlines() if line.strip().startswith("gsk_")
        ]
        assert len(shown) == 1, service.log()
        assert await _names_of_keys(service, shown[0]) == ["first-admin"]
        service.stop()
    assert not (tmp_path / "data" / FIRST_KEY_FILE).exists()


async def test_a_terminal_whose_output_is_json_logs_is_a_log_stream_and_gets_no_key(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    """`docker run -t` gives the service a terminal, and Docker still records what it shows; the
    image sets GENAI_LOG_JSON=true, which says a machine reads this console."""
    env = service_env(fake, tmp_path / "data")  # GENAI_LOG_JSON=true, as in the image
    with live_service(env, tmp_path, terminal=True) as service:
        key = service.first_admin_key()
        assert await _names_of_keys(service, key) == ["first-admin"]
        service.stop()
    assert "gsk_" not in service.log()


async def _stored_keys(database_url: str) -> list[tuple[str, bool]]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(text("SELECT name, revoked_at FROM api_keys"))
            return [(row.name, row.revoked_at is not None) for row in rows]
    finally:
        await engine.dispose()


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_key_that_cannot_be_written_is_revoked_and_never_shown(
    database_url: str, serve: Serve, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    (data_dir / FIRST_KEY_FILE).mkdir(parents=True)  # a directory where the file must go
    with serve() as service:
        [refused] = [e for e in _log_events(service) if e["event"] == "first_admin_key_not_written"]
        assert "genai keys create --scope admin" in str(refused["hint"])
        service.stop()
    assert "gsk_" not in service.log()
    assert await _stored_keys(database_url) == [("first-admin", True)]
    assert [p.name for p in (data_dir / "keys").iterdir() if "first-admin" in p.name] == [
        "first-admin-key"
    ], "the temporary file is removed"
