"""API keys: minting, hashing, scopes, revocation, the first admin key, and the off switch."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import select
from sqlalchemy.ext.asyncio import create_async_engine

from app.auth import keys
from app.auth.authenticator import Authenticator
from app.errors import Unauthenticated
from app.schemas import ApiKeyCreate
from app.store.db import Database
from app.store.keys import ApiKeyRepository
from app.store.tables import ApiKey
from tests.fakes.provider_server import FakeProviderServer
from tests.support import run_cli as run
from tests.support import running_app, serve_app, settings_for

SECRET = b"s" * 32
RENDER = {"pattern_key": "summarize", "variables": {"max_words": 10}, "user_prompt": "Hi."}


# --- the key format (pure) -------------------------------------------------------------------


def test_a_minted_key_parses_and_matches_only_its_own_digest() -> None:
    new = keys.mint(SECRET)
    presented = keys.parse(new.text)
    assert presented is not None and presented.id == new.id
    assert keys.matches(SECRET, presented, new.salt, new.digest)
    assert not keys.matches(b"x" * 32, presented, new.salt, new.digest)  # another server secret
    other = keys.mint(SECRET)
    assert not keys.matches(SECRET, presented, other.salt, other.digest)
    assert new.text not in new.digest and presented.secret not in new.digest


@given(st.text(max_size=120))
def test_parse_accepts_nothing_but_the_key_shape(text: str) -> None:
    presented = keys.parse(text)
    if presented is not None:
        assert text == f"gsk_{presented.id}_{presented.secret}"


def test_the_same_secret_under_two_salts_has_two_digests() -> None:
    assert keys.digest(SECRET, "a", "same") != keys.digest(SECRET, "b", "same")


# --- over HTTP -------------------------------------------------------------------------------


async def _new_key(http: httpx.AsyncClient, scope: str, name: str = "t") -> dict[str, str]:
    resp = await http.post("/v1/keys", json={"scope": scope, "name": name})
    assert resp.status_code == 201, resp.text
    return dict(resp.json())


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_complete_key_renders_but_may_not_administer(client: httpx.AsyncClient) -> None:
    key = (await _new_key(client, "complete"))["key"]
    assert (await client.post("/v1/render", json=RENDER, headers=_bearer(key))).status_code == 200
    assert (await client.get("/v1/patterns", headers=_bearer(key))).status_code == 200
    for method, path, body in (
        ("GET", "/v1/jobs/" + "0" * 32, None),
        ("POST", "/v1/keys", {"scope": "admin"}),
        ("GET", "/v1/drift", None),
        ("POST", "/v1/templates", {"name": "t", "role": "r", "template": "x"}),
    ):
        resp = await client.request(method, path, json=body, headers=_bearer(key))
        assert resp.status_code == 403, (path, resp.text)
        error = resp.json()["error"]
        assert error["type"] == "forbidden" and "'complete'" in error["message"]


async def test_listing_keys_never_shows_a_key_or_its_digest(client: httpx.AsyncClient) -> None:
    made = await _new_key(client, "complete", "listed")
    listing = await client.get("/v1/keys")
    assert listing.status_code == 200
    assert made["key"] not in listing.text
    entry = next(k for k in listing.json()["keys"] if k["id"] == made["id"])
    assert set(entry) == {
        *("id", "name", "scope", "created_at", "last_used_at", "revoked_at", "expires_at"),
        *("team", "budgets", "rpm", "tpm", "allowed_models", "allowed_patterns"),
    }


async def test_a_revoked_key_stops_working_at_once(client: httpx.AsyncClient) -> None:
    made = await _new_key(client, "complete")
    assert (await client.get("/v1/patterns", headers=_bearer(made["key"]))).status_code == 200
    assert (await client.delete(f"/v1/keys/{made['id']}")).status_code == 200
    resp = await client.get("/v1/patterns", headers=_bearer(made["key"]))
    assert resp.status_code == 401 and resp.json()["error"]["type"] == "unauthenticated"


async def test_revoking_an_unknown_key_is_404(client: httpx.AsyncClient) -> None:
    resp = await client.delete("/v1/keys/" + "0" * 16)
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "api_key_not_found"


async def test_a_tampered_secret_is_refused(client: httpx.AsyncClient) -> None:
    made = await _new_key(client, "admin")
    tampered = made["key"][:-1] + ("A" if made["key"][-1] != "A" else "B")
    resp = await client.get("/v1/patterns", headers=_bearer(tampered))
    assert resp.status_code == 401


async def test_only_salt_and_digest_are_stored_and_last_use_is_recorded(
    fake: FakeProviderServer, database_url: str
) -> None:
    settings = settings_for(fake, database_url=database_url, database_auto_migrate=True)
    async with running_app(settings) as (app, http):
        made = await _new_key(http, "complete")
        assert (await http.get("/v1/patterns", headers=_bearer(made["key"]))).status_code == 200
        await app.state.runtime.authenticator.save_last_use()
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(select(ApiKey).where(ApiKey.id == made["id"]))).one()
    finally:
        await engine.dispose()
    presented = keys.parse(made["key"])  # the secret itself may contain "_" (base64url)
    assert presented is not None
    secret = presented.secret
    assert secret not in repr(tuple(row)) and made["key"] not in repr(tuple(row))
    assert row.last_used_at is not None and row.revoked_at is None


async def test_first_start_writes_one_admin_key_to_a_file_and_a_restart_writes_none(
    fake: FakeProviderServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started in-process (the lifespan, as `uvicorn app.main:create_app --factory` runs it)
    with a console that is no terminal; tests/security/test_first_key.py covers `genai serve`."""
    settings = settings_for(fake, data_dir=tmp_path / "data")
    key_file = tmp_path / "data" / "keys" / "first-admin-key"
    async with running_app(settings):
        pass
    assert "gsk_" not in capsys.readouterr().err
    written = key_file.read_text().strip()
    key_file.unlink()  # as the docs ask, once it is read
    async with running_app(settings):
        pass
    assert "gsk_" not in capsys.readouterr().err and not key_file.exists()
    async with serve_app(settings) as http:  # the written key is a working admin key
        resp = await http.get("/v1/keys", headers=_bearer(written))
    assert resp.status_code == 200
    assert next(k["name"] for k in resp.json()["keys"]) == "first-admin"


async def test_disabled_auth_answers_anyone_and_says_so_loudly(
    fake: FakeProviderServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async with serve_app(settings_for(fake, auth_disabled=True)) as http:
        assert "authorization" not in http.headers
        assert (await http.post("/v1/render", json=RENDER)).status_code == 200
        assert (await http.get("/v1/keys")).status_code == 200
        ready = (await http.get("/readyz")).json()
    assert ready["auth"]["enabled"] is False and "GENAI_AUTH_DISABLED" in ready["auth"]["warning"]
    console = capsys.readouterr().err
    assert "WARNING: GENAI_AUTH_DISABLED" in console and "gsk_" not in console


async def test_readyz_reports_auth_enabled(client: httpx.AsyncClient) -> None:
    assert (await client.get("/readyz")).json()["auth"] == {"enabled": True}


# --- the command line ------------------------------------------------------------------------


def test_cli_key_flow_create_use_list_revoke(
    cli_env: Callable[..., None], fake: FakeProviderServer, tmp_path: Path
) -> None:
    cli_env(GENAI_DATA_DIR=str(tmp_path / "data"))
    created = run("keys", "create", "--scope", "complete", "--name", "ci-bot")
    assert created.exit_code == 0, created.output
    key = created.stdout.strip().splitlines()[-1]  # alone on the last line, for scripts
    assert keys.parse(key) is not None
    key_id = key.split("_")[1]

    listed = run("keys", "list")
    assert listed.exit_code == 0 and key_id in listed.stdout and "ci-bot" in listed.stdout
    assert key not in listed.stdout

    revoked = run("keys", "revoke", key_id)
    assert revoked.exit_code == 0 and key_id in revoked.stdout
    assert "revoked" in run("keys", "list").stdout
    assert run("keys", "revoke", "0" * 16).exit_code == 1


def test_cli_rejects_an_unknown_scope(cli_env: Callable[..., None], tmp_path: Path) -> None:
    cli_env(GENAI_DATA_DIR=str(tmp_path / "data"))
    result = run("keys", "create", "--scope", "root")
    assert result.exit_code == 2
    assert not os.path.exists(tmp_path / "data" / "genai.db")  # nothing was made


async def test_concurrent_requests_with_an_uncached_key_share_one_lookup(
    database: Database,
) -> None:
    """When a busy key's cache entry expires, its requests must not each take a database
    connection: one lookup is shared, a caller that goes away does not cancel it, and a
    refusal reaches every caller."""
    repository = ApiKeyRepository(database.sessions)
    authenticator = Authenticator(repository, b"s" * 32, cache_seconds=60, disabled=False)
    created = await authenticator.create(ApiKeyCreate(scope="complete", name="busy"))
    lookups = 0
    find = repository.find

    async def counted(key_id: str) -> Any:
        nonlocal lookups
        lookups += 1
        await asyncio.sleep(0.05)  # every caller arrives while the first lookup runs
        return await find(key_id)

    repository.find = counted  # type: ignore[method-assign]
    header = f"Bearer {created.key}"
    leaving = asyncio.create_task(authenticator.authenticate(header))
    callers = [asyncio.create_task(authenticator.authenticate(header)) for _ in range(200)]
    await asyncio.sleep(0.01)
    leaving.cancel()
    principals = await asyncio.gather(*callers)
    assert lookups == 1
    assert {p.key_id for p in principals} == {created.id}
    assert leaving.cancelled()

    wrong = "Bearer " + created.key[:-4] + ("aaaa" if not created.key.endswith("aaaa") else "bbbb")
    refusals = await asyncio.gather(
        *(authenticator.authenticate(wrong) for _ in range(50)), return_exceptions=True
    )
    assert lookups == 2
    assert all(isinstance(r, Unauthenticated) for r in refusals)
