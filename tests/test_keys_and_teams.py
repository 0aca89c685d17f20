"""Keys and teams with limits over HTTP, on SQLite and PostgreSQL: what is stored is what reads
back, a PATCH changes only what it names, bad input is refused naming the field with nothing
stored, expiry follows the Authenticator's clock, and only admin keys manage any of it."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.auth.authenticator import Authenticator
from tests.clock import utc_now
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


@pytest.fixture
async def gateway(
    fake: FakeProviderServer, database_url: str
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    settings = settings_for(fake, database_url=database_url, database_auto_migrate=True)
    async with running_app(settings) as (app, http):
        yield app, http


@pytest.fixture
def http(gateway: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return gateway[1]


@pytest.fixture
def authenticator(gateway: tuple[FastAPI, httpx.AsyncClient]) -> Authenticator:
    runtime = gateway[0].state.runtime
    assert isinstance(runtime.authenticator, Authenticator)
    return runtime.authenticator


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _iso(when: dt.datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


async def _ok(resp: httpx.Response, status: int = 200) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    return dict(resp.json())


async def _team(http: httpx.AsyncClient, name: str, **limits: Any) -> dict[str, Any]:
    return await _ok(await http.post("/v1/teams", json={"name": name, **limits}), 201)


async def _key_ids(http: httpx.AsyncClient) -> list[str]:
    return [key["id"] for key in (await _ok(await http.get("/v1/keys")))["keys"]]


# --- create and read back --------------------------------------------------------------------


async def test_a_key_created_with_every_field_reads_back_the_same(http: httpx.AsyncClient) -> None:
    await _team(http, "payments", budget_usd=50, rpm=600)
    expires = (NOW + dt.timedelta(days=30)).astimezone(dt.timezone(dt.timedelta(hours=2)))
    body = {
        "scope": "complete",
        "name": "support bot",
        "budget_usd": 10,
        "budget_window": "day",
        "budgets": [{"usd": 200, "window": "month"}],
        "rpm": 60,
        "tpm": 100_000,
        "allowed_models": ["openai/*", "anthropic/claude-?-5", "openai/*"],
        "allowed_patterns": ["support-*"],
        "expires_at": expires.isoformat(),
        "team": "payments",
    }
    created = await _ok(await http.post("/v1/keys", json=body), 201)
    expected = {
        "name": "support bot",
        "scope": "complete",
        "budgets": [{"usd": 10.0, "window": "day"}, {"usd": 200.0, "window": "month"}],
        "rpm": 60,
        "tpm": 100_000,
        "allowed_models": ["openai/*", "anthropic/claude-?-5"],  # duplicates dropped
        "allowed_patterns": ["support-*"],
        "expires_at": _iso(expires.astimezone(dt.UTC)),  # stored and shown as UTC
        "team": "payments",
        "revoked_at": None,
    }
    assert {name: created[name] for name in expected} == expected
    read = await _ok(await http.get(f"/v1/keys/{created['id']}"))
    assert read == {name: value for name, value in created.items() if name != "key"}
    listed = (await _ok(await http.get("/v1/keys")))["keys"]
    assert next(key for key in listed if key["id"] == created["id"]) == read


async def test_a_key_with_no_limits_is_unlimited(http: httpx.AsyncClient) -> None:
    created = await _ok(await http.post("/v1/keys", json={"scope": "admin"}), 201)
    assert created["name"] == "unnamed"
    unset = ("rpm", "tpm", "allowed_models", "allowed_patterns", "expires_at", "team")
    assert created["budgets"] == [] and all(created[name] is None for name in unset)


async def test_getting_an_unknown_key_is_404(http: httpx.AsyncClient) -> None:
    resp = await http.get("/v1/keys/" + "0" * 16)
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "api_key_not_found"


# --- PATCH -----------------------------------------------------------------------------------

LATER = _iso(NOW + dt.timedelta(days=90))
CHANGES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"name": "renamed"}, {"name": "renamed"}),
    ({"budget_usd": 5}, {"budgets": [{"usd": 5.0, "window": "month"}]}),
    ({"budget_usd": 1, "budget_window": "total"}, {"budgets": [{"usd": 1.0, "window": "total"}]}),
    (
        {"budgets": [{"usd": 3, "window": "month"}, {"usd": 2, "window": "day"}]},
        {"budgets": [{"usd": 2.0, "window": "day"}, {"usd": 3.0, "window": "month"}]},
    ),
    ({"rpm": 7}, {"rpm": 7}),
    ({"tpm": 7000}, {"tpm": 7000}),
    ({"allowed_models": ["ollama/*"]}, {"allowed_models": ["ollama/*"]}),
    ({"allowed_patterns": ["summarize"]}, {"allowed_patterns": ["summarize"]}),
    ({"expires_at": LATER}, {"expires_at": LATER}),
    ({"team": "ops"}, {"team": "ops"}),
]


async def test_each_patch_changes_only_the_fields_it_names(http: httpx.AsyncClient) -> None:
    await _team(http, "ops")
    created = await _ok(
        await http.post("/v1/keys", json={"scope": "complete", "name": "k", "rpm": 1}), 201
    )
    current = {name: value for name, value in created.items() if name != "key"}
    for change, effect in CHANGES:
        updated = await _ok(await http.patch(f"/v1/keys/{created['id']}", json=change))
        current = {**current, **effect}
        assert updated == current, change
    assert await _ok(await http.get(f"/v1/keys/{created['id']}")) == current


async def test_a_patch_of_nulls_removes_every_limit(http: httpx.AsyncClient) -> None:
    await _team(http, "ops")
    full = {
        "scope": "complete",
        "budget_usd": 9,
        "rpm": 9,
        "tpm": 9,
        "allowed_models": ["openai/*"],
        "allowed_patterns": ["x*"],
        "expires_at": LATER,
        "team": "ops",
    }
    created = await _ok(await http.post("/v1/keys", json=full), 201)
    nulls = {name: None for name in full if name != "scope"}
    cleared = await _ok(await http.patch(f"/v1/keys/{created['id']}", json=nulls))
    assert cleared["budgets"] == []
    assert all(cleared[name] is None for name in nulls if name != "budget_usd")
    assert cleared["name"] == created["name"] and cleared["scope"] == "complete"


async def test_a_patch_reaches_the_principal_of_a_key_already_in_use(
    http: httpx.AsyncClient, authenticator: Authenticator
) -> None:
    """The cached principal is forgotten at once: the next request carries the new limits, the
    key's own and, after a team change, its team's."""
    await _team(http, "ops", rpm=100)
    created = await _ok(
        await http.post("/v1/keys", json={"scope": "complete", "rpm": 5, "team": "ops"}), 201
    )
    header = f"Bearer {created['key']}"
    before = await authenticator.authenticate(header)
    assert before.limits.rpm == 5 and before.team_limits.rpm == 100
    await _ok(await http.patch(f"/v1/keys/{created['id']}", json={"rpm": 50}))
    assert (await authenticator.authenticate(header)).limits.rpm == 50
    await _ok(await http.patch("/v1/teams/ops", json={"rpm": 1000}))
    assert (await authenticator.authenticate(header)).team_limits.rpm == 1000


async def test_patching_an_unknown_key_is_404(http: httpx.AsyncClient) -> None:
    resp = await http.patch("/v1/keys/" + "0" * 16, json={"rpm": 1})
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "api_key_not_found"


# --- expiry ----------------------------------------------------------------------------------


async def test_an_expired_key_is_refused_until_a_patch_extends_it(
    http: httpx.AsyncClient, authenticator: Authenticator
) -> None:
    expires = NOW + dt.timedelta(days=1)
    created = await _ok(
        await http.post("/v1/keys", json={"scope": "complete", "expires_at": _iso(expires)}), 201
    )
    use = _bearer(created["key"])
    assert (await http.get("/v1/patterns", headers=use)).status_code == 200

    authenticator.clock = lambda: expires + dt.timedelta(seconds=1)
    refused = await http.get("/v1/patterns", headers=use)
    assert refused.status_code == 401
    error = refused.json()["error"]
    assert error["type"] == "unauthenticated"
    assert f"expired at {expires:%Y-%m-%dT%H:%M:%SZ}" in error["message"]
    assert "PATCH /v1/keys" in error["message"]

    later = _iso(expires + dt.timedelta(days=30))
    await _ok(await http.patch(f"/v1/keys/{created['id']}", json={"expires_at": later}))
    assert (await http.get("/v1/patterns", headers=use)).status_code == 200


async def test_an_expiry_already_past_is_refused_on_create_and_patch(
    http: httpx.AsyncClient,
) -> None:
    past = _iso(NOW - dt.timedelta(minutes=1))
    before = await _key_ids(http)
    resp = await http.post("/v1/keys", json={"scope": "complete", "expires_at": past})
    assert _field_problem(resp) == ["body", "expires_at"]
    assert await _key_ids(http) == before
    key = await _ok(await http.post("/v1/keys", json={"scope": "complete"}), 201)
    resp = await http.patch(f"/v1/keys/{key['id']}", json={"expires_at": past})
    assert _field_problem(resp) == ["body", "expires_at"]
    assert (await _ok(await http.get(f"/v1/keys/{key['id']}")))["expires_at"] is None


# --- bad input -------------------------------------------------------------------------------


def _field_problem(resp: httpx.Response) -> list[str | int]:
    """The loc of the single field problem of a 422 `invalid_request`."""
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request", error
    (problem,) = error["errors"]
    return list(problem["loc"])


BAD_KEYS: list[tuple[dict[str, Any], str]] = [
    ({"budget_usd": -1}, "budget_usd"),
    ({"budget_usd": 0}, "budget_usd"),
    ({"budget_usd": 1_000_001}, "budget_usd"),
    ({"budget_usd": "NaN"}, "budget_usd"),
    ({"budget_usd": "Infinity"}, "budget_usd"),
    ({"budget_usd": 5, "budget_window": "week"}, "budget_window"),
    ({"budget_window": "day"}, "budget_window"),  # without budget_usd
    ({"budgets": [{"usd": 1, "window": "day"}, {"usd": 2, "window": "day"}]}, "window"),
    ({"budget_usd": 1, "budget_window": "day", "budgets": [{"usd": 2, "window": "day"}]}, "window"),
    ({"budgets": [{"usd": -2, "window": "day"}]}, "usd"),
    ({"rpm": 0}, "rpm"),
    ({"tpm": -5}, "tpm"),
    ({"allowed_models": ["openai"]}, "allowed_models"),
    ({"allowed_models": ["/gpt"]}, "allowed_models"),
    ({"allowed_models": ["a b/c"]}, "allowed_models"),
    ({"allowed_models": ["[x]/y"]}, "allowed_models"),
    ({"allowed_patterns": ["support *"]}, "allowed_patterns"),
    ({"team": "nope"}, "team"),  # a well-formed name, but no such team
    ({"team": "Not A Team"}, "team"),
    ({"expires_at": f"{utc_now().year + 1}-01-01T00:00:00"}, "expires_at"),  # no time zone
]


async def test_bad_key_input_is_refused_naming_the_field_and_stores_nothing(
    http: httpx.AsyncClient,
) -> None:
    before = await _key_ids(http)
    for bad, field in BAD_KEYS:
        resp = await http.post("/v1/keys", json={"scope": "complete", **bad})
        assert resp.status_code == 422, (bad, resp.text)
        error = resp.json()["error"]
        assert error["type"] == "invalid_request", bad
        named = [str(part) for problem in error["errors"] for part in problem["loc"]]
        assert field in named or field in error["message"], (bad, error)
    assert await _key_ids(http) == before


async def test_a_json_nan_budget_is_refused(http: httpx.AsyncClient) -> None:
    before = await _key_ids(http)
    resp = await http.post(
        "/v1/keys",
        content=b'{"scope": "complete", "budget_usd": NaN}',
        headers={"content-type": "application/json"},
    )
    # Refused by the input guard every body passes (no non-finite number anywhere), by name.
    assert _field_problem(resp) == ["body"]
    assert "budget_usd: must be a finite number" in resp.json()["error"]["message"]
    assert await _key_ids(http) == before


async def test_a_bad_patch_changes_nothing(http: httpx.AsyncClient) -> None:
    created = await _ok(await http.post("/v1/keys", json={"scope": "complete", "rpm": 3}), 201)
    stored = {name: value for name, value in created.items() if name != "key"}
    for bad, field in [*BAD_KEYS, ({"name": None}, "name")]:
        resp = await http.patch(f"/v1/keys/{created['id']}", json={"rpm": 99, **bad})
        assert resp.status_code == 422, (bad, resp.text)
        assert field in resp.text, bad
    assert await _ok(await http.get(f"/v1/keys/{created['id']}")) == stored


async def test_a_missing_team_is_a_field_problem_at_team(http: httpx.AsyncClient) -> None:
    resp = await http.post("/v1/keys", json={"scope": "complete", "team": "ghosts"})
    assert _field_problem(resp) == ["body", "team"]
    assert "ghosts" in resp.json()["error"]["message"]


# --- teams -----------------------------------------------------------------------------------


async def test_team_crud_and_its_refusals(http: httpx.AsyncClient) -> None:
    made = await _team(http, "payments", budget_usd=100, budget_window="month", rpm=60)
    assert made["budgets"] == [{"usd": 100.0, "window": "month"}] and made["rpm"] == 60
    assert made["tpm"] is None

    again = await http.post("/v1/teams", json={"name": "payments"})
    assert again.status_code == 409 and again.json()["error"]["type"] == "team_exists"
    await _team(http, "alpha")
    listed = (await _ok(await http.get("/v1/teams")))["teams"]
    assert [team["name"] for team in listed] == ["alpha", "payments"]
    assert await _ok(await http.get("/v1/teams/payments")) == made

    changed = await _ok(await http.patch("/v1/teams/payments", json={"tpm": 5000}))
    assert changed["tpm"] == 5000 and changed["rpm"] == 60 and changed["budgets"] == made["budgets"]
    cleared = await _ok(await http.patch("/v1/teams/payments", json={"budget_usd": None}))
    assert cleared["budgets"] == [] and cleared["updated_at"] >= made["updated_at"]

    member = {"scope": "complete", "team": "payments"}
    key = await _ok(await http.post("/v1/keys", json=member), 201)
    in_use = await http.delete("/v1/teams/payments")
    assert in_use.status_code == 409
    assert in_use.json()["error"] | {"team": "payments", "keys": 1} == in_use.json()["error"]
    assert in_use.json()["error"]["type"] == "team_in_use"

    await _ok(await http.delete(f"/v1/keys/{key['id']}"))
    await _ok(await http.delete("/v1/teams/payments"))
    assert (await _ok(await http.get(f"/v1/keys/{key['id']}")))["team"] is None
    for method in ("GET", "PATCH", "DELETE"):
        gone = await http.request(method, "/v1/teams/payments", json={"rpm": 1})
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "team_not_found"


async def test_bad_team_input_names_the_field(http: httpx.AsyncClient) -> None:
    for bad, field in [
        ({"name": "Payments!"}, "name"),
        ({"name": "t", "budget_usd": 0}, "budget_usd"),
        ({"name": "t", "budget_window": "day"}, "budget_window"),
        ({"name": "t", "rpm": 0}, "rpm"),
    ]:
        resp = await http.post("/v1/teams", json=bad)
        assert resp.status_code == 422 and field in resp.text, (bad, resp.text)
    assert (await _ok(await http.get("/v1/teams")))["teams"] == []


# --- who may manage --------------------------------------------------------------------------


async def test_a_complete_key_cannot_manage_keys_or_teams(http: httpx.AsyncClient) -> None:
    await _team(http, "ops")
    own = await _ok(await http.post("/v1/keys", json={"scope": "complete"}), 201)
    for method, path, body in (
        ("POST", "/v1/keys", {"scope": "complete"}),
        ("GET", "/v1/keys", None),
        ("GET", f"/v1/keys/{own['id']}", None),
        ("PATCH", f"/v1/keys/{own['id']}", {"rpm": 1_000_000}),
        ("DELETE", f"/v1/keys/{own['id']}", None),
        ("POST", "/v1/teams", {"name": "mine"}),
        ("GET", "/v1/teams", None),
        ("GET", "/v1/teams/ops", None),
        ("PATCH", "/v1/teams/ops", {"rpm": 1}),
        ("DELETE", "/v1/teams/ops", None),
    ):
        resp = await http.request(method, path, json=body, headers=_bearer(own["key"]))
        assert resp.status_code == 403, (method, path, resp.text)
        assert resp.json()["error"]["type"] == "forbidden"
    assert (await _ok(await http.get(f"/v1/keys/{own['id']}")))["rpm"] is None
