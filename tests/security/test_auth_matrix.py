"""Every /v1 route against every kind of caller, over real HTTP to `genai serve`.

The routes come from the app's own OpenAPI document, so a route added without a scope fails
here rather than shipping open.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.protected import is_protected
from app.main import create_app
from tests.fakes.provider_server import FakeProviderServer
from tests.security.live import LiveService, live_service, service_env
from tests.support import settings_for

PATH_VALUES = {
    "job_id": "0" * 32,
    "key_id": "0" * 16,
    "identifier": "no-such-snippet",
    "name": "summarize",
    "role": "writer",
    "version": "1",
}
OPEN_ROUTES = ("/healthz", "/readyz", "/metrics", "/v1/provenance/keys")  # + signing keys


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    scopes: tuple[str, ...]

    @property
    def url(self) -> str:
        return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: PATH_VALUES.get(m[1], "x"), self.path)

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"


def _operations() -> list[Operation]:
    spec = create_app(settings_for(None)).openapi()  # no lifespan: only the route table
    found = []
    for path, methods in spec["paths"].items():
        for method, op in methods.items():
            requirements = op.get("security") or []
            scopes = tuple(s for req in requirements for s in req.get("HTTPBearer", []))
            found.append(Operation(method, path, scopes))
    return found


OPERATIONS = _operations()
PROTECTED = [op for op in OPERATIONS if is_protected(op.path)]  # /v1 but the signing keys


@dataclass(frozen=True)
class Callers:
    service: LiveService
    admin: str
    complete: str
    revoked: str


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("auth-matrix")


@pytest.fixture(scope="module")
def service(fake_server: FakeProviderServer, workdir: Path) -> Iterator[LiveService]:
    with live_service(service_env(fake_server, workdir / "data"), workdir) as running:
        yield running


@pytest.fixture(scope="module")
def callers(service: LiveService) -> Callers:
    admin = service.first_admin_key()
    headers = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=service.base_url, headers=headers, timeout=30) as http:
        made = {}
        for name, scope in (("complete", "complete"), ("revoked", "admin")):
            resp = http.post("/v1/keys", json={"scope": scope, "name": name})
            assert resp.status_code == 201, resp.text
            made[name] = resp.json()
        revoked = http.delete(f"/v1/keys/{made['revoked']['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    return Callers(service, admin, made["complete"]["key"], made["revoked"]["key"])


async def _call(callers: Callers, op: Operation, key: str | None) -> httpx.Response:
    body: dict[str, Any] | None = {} if op.method in ("post", "put", "patch") else None
    async with callers.service.client(key) as http:
        return await http.request(op.method, op.url, json=body)


def gateway_type(body: Any) -> str:
    """The gateway's error type; the Anthropic door keeps it beside Anthropic's own."""
    error = body["error"]
    return str(error.get("gateway_type", error["type"]))


def test_every_v1_route_declares_exactly_one_scope() -> None:
    assert PROTECTED, "no /v1 routes found"
    undeclared = [str(op) for op in PROTECTED if len(op.scopes) != 1]
    assert not undeclared, f"routes without exactly one scope: {undeclared}"
    assert {s for op in PROTECTED for s in op.scopes} == {"complete", "admin"}


def test_probes_stay_open_and_undeclared() -> None:
    open_ops = [op for op in OPERATIONS if op.path in OPEN_ROUTES]
    assert {op.path for op in open_ops} == set(OPEN_ROUTES)
    assert all(not op.scopes for op in open_ops)


@pytest.mark.parametrize("op", PROTECTED, ids=str)
async def test_route_refuses_callers_without_a_valid_key(callers: Callers, op: Operation) -> None:
    for key in (None, "not-a-key", "gsk_0000000000000000_" + "A" * 43, callers.revoked):
        resp = await _call(callers, op, key)
        assert resp.status_code == 401, (key, resp.text)
        assert gateway_type(resp.json()) == "unauthenticated"
        assert resp.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("op", PROTECTED, ids=str)
async def test_route_admits_exactly_the_scopes_that_allow_it(
    callers: Callers, op: Operation
) -> None:
    as_complete = await _call(callers, op, callers.complete)
    if op.scopes == ("admin",):
        assert as_complete.status_code == 403, as_complete.text
        assert gateway_type(as_complete.json()) == "forbidden"
    else:
        assert as_complete.status_code not in (401, 403), as_complete.text
    as_admin = await _call(callers, op, callers.admin)
    assert as_admin.status_code not in (401, 403), as_admin.text
    assert as_admin.status_code < 500, as_admin.text


@pytest.mark.parametrize("path", OPEN_ROUTES)
async def test_probes_answer_without_a_key(callers: Callers, path: str) -> None:
    async with callers.service.client(None) as http:
        resp = await http.get(path)
    assert resp.status_code in (200, 503), resp.text  # readiness may be 503, never 401


async def test_an_unauthenticated_body_is_refused_before_it_is_parsed(callers: Callers) -> None:
    async with callers.service.client(None) as http:
        resp = await http.post(
            "/v1/completions", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert resp.status_code == 401
    assert gateway_type(resp.json()) == "unauthenticated"


async def test_no_key_reaches_the_log_stream(callers: Callers) -> None:
    log = (
        callers.service.log()
    )  # stdout and stderr: not a terminal, so the first key went to a file
    assert callers.admin not in log
    assert callers.complete not in log
