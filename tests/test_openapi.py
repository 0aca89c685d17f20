"""The OpenAPI document promises the error body the service really sends, for every refusal."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import jsonschema
import pytest

from app.api.openapi import ERROR_SCHEMA
from app.main import create_app
from tests.fakes.provider_server import FakeProviderServer
from tests.support import serve_app, settings_for

LIMIT = 4096
ERROR_REF = f"#/components/schemas/{ERROR_SCHEMA}"
# The one error status documented with another body, on purpose: /readyz explains itself.
OWN_BODY = {("/readyz", "get", "503"): "#/components/schemas/ReadinessReport"}
Operation = tuple[str, str, dict[str, Any]]


@pytest.fixture
async def http(fake: FakeProviderServer) -> AsyncIterator[httpx.AsyncClient]:
    async with serve_app(settings_for(fake, max_body_bytes=LIMIT)) as client:
        yield client


@pytest.fixture
async def spec(http: httpx.AsyncClient) -> dict[str, Any]:
    resp = await http.get("/openapi.json")
    assert resp.status_code == 200
    document: dict[str, Any] = resp.json()
    return document


def operations(spec: dict[str, Any]) -> Iterator[Operation]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def schema_ref(response: dict[str, Any]) -> str | None:
    schema = response.get("content", {}).get("application/json", {}).get("schema", {})
    ref = schema.get("$ref")
    return ref if isinstance(ref, str) else None


def error_validator(spec: dict[str, Any]) -> jsonschema.protocols.Validator:
    """Validates against the document's own ErrorBody component, its references resolved."""
    schema = {"$ref": ERROR_REF, "components": spec["components"]}
    return jsonschema.Draft202012Validator(schema)


async def test_fastapis_validation_body_is_nowhere_in_the_document(
    http: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    assert "HTTPValidationError" not in (await http.get("/openapi.json")).text
    assert "ValidationError" not in spec["components"]["schemas"]


async def test_every_error_status_of_every_operation_is_the_error_body(
    spec: dict[str, Any],
) -> None:
    checked = 0
    for path, method, operation in operations(spec):
        for status, response in operation["responses"].items():
            if int(status) < 400:
                continue
            expected = OWN_BODY.get((path, method, status), ERROR_REF)
            assert schema_ref(response) == expected, (method, path, status)
            checked += 1
    assert checked > 50  # every /v1 operation has several


async def test_the_refusals_around_every_route_are_documented(spec: dict[str, Any]) -> None:
    """Authentication, the body limit and validation answer before or around the route."""
    for path, method, operation in operations(spec):
        statuses = set(operation["responses"])
        assert "500" in statuses, (method, path)  # the last-resort handler answers anywhere
        needs = {s for r in operation.get("security", []) for scopes in r.values() for s in scopes}
        if path.startswith("/v1/"):
            assert {"401", "503"} <= statuses, (method, path)
            assert ("403" in statuses) == ("admin" in needs), (method, path)
        else:
            assert "401" not in statuses, (method, path)
        if "requestBody" in operation:
            assert {"400", "413", "422"} <= statuses, (method, path)
        if operation.get("parameters"):
            assert "422" in statuses, (method, path)
        if not operation.get("parameters") and "requestBody" not in operation:
            assert "422" not in statuses, (method, path)


def test_with_auth_disabled_no_operation_promises_401() -> None:
    spec = create_app(settings_for(None, auth_disabled=True)).openapi()
    for method, path, operation in operations(spec):
        assert "401" not in operation["responses"], (method, path)
        assert "403" not in operation["responses"], (method, path)


def test_the_error_schema_rejects_fastapis_default_body() -> None:
    """The check below means something: FastAPI's own shape does not pass it."""
    validator = error_validator(create_app(settings_for(None)).openapi())
    assert not validator.is_valid({"detail": [{"loc": ["body"], "msg": "x", "type": "y"}]})
    assert not validator.is_valid({"error": {"type": "x"}})  # a message is required
    assert validator.is_valid({"error": {"type": "x", "message": "m", "pattern": "p"}})


async def test_real_error_answers_validate_and_are_documented_for_their_operation(
    http: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    validator = error_validator(spec)
    answers = {
        ("post", "/v1/completions", "invalid_request"): await http.post(
            "/v1/completions", json={"pattern_key": "summarize", "user_prompt": 5}
        ),
        ("get", "/v1/patterns/{name}", "pattern_not_found"): await http.get("/v1/patterns/nope"),
        ("get", "/v1/patterns", "unauthenticated"): await http.get(
            "/v1/patterns", headers={"Authorization": "Bearer not-a-key"}
        ),
        ("post", "/v1/render", "payload_too_large"): await http.post(
            "/v1/render", content=b"x" * (LIMIT + 1), headers={"content-type": "application/json"}
        ),
        ("post", "/v1/render", "bad_request"): await http.post(
            "/v1/render", content=b'{"a": "\xff"}', headers={"content-type": "application/json"}
        ),
        ("get", "/v1/jobs/{job_id}", "job_not_found"): await http.get(f"/v1/jobs/{'0' * 32}"),
        # Starlette's own refusals, which no operation documents, carry the same body.
        ("", "", "not_found"): await http.get("/v1/no-such-thing"),
        ("", "", "method_not_allowed"): await http.delete("/v1/patterns"),
    }
    for (method, path, error_type), resp in answers.items():
        body = resp.json()
        validator.validate(body)
        assert body["error"]["type"] == error_type, body
        assert body["error"]["request_id"] == resp.headers["x-request-id"]
        if path:
            documented = spec["paths"][path][method]["responses"]
            assert str(resp.status_code) in documented, (method, path, resp.status_code)
    invalid = answers[("post", "/v1/completions", "invalid_request")].json()["error"]
    assert invalid["errors"] == [
        {
            "loc": ["body", "user_prompt"],
            "msg": "Input should be a valid string",
            "type": "string_type",
        }
    ]
    assert "allow" in answers[("", "", "method_not_allowed")].headers
