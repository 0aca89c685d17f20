"""The OpenAPI document promises the error body the service really sends, for every refusal."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from app.api.error_dialects import dialect_for
from app.api.openapi import ANTHROPIC_ERROR_SCHEMA, ERROR_SCHEMA
from app.auth.protected import is_protected
from app.errors import GenAIError
from app.main import create_app
from app.tracking import user_prompt_hash
from tests.fakes.provider_server import FakeProviderServer, Reply
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
            if dialect_for(path) == "anthropic":  # Anthropic's shape at its door
                expected = f"#/components/schemas/{ANTHROPIC_ERROR_SCHEMA}"
            assert schema_ref(response) == expected, (method, path, status)
            checked += 1
    assert checked > 50  # every /v1 operation has several


# Routes that answer 403 themselves, beyond the scope check around them: a `complete` key asking
# for another key's usage.
ROUTES_THAT_FORBID = {("get", "/v1/usage")}


async def test_the_refusals_around_every_route_are_documented(spec: dict[str, Any]) -> None:
    """Authentication, the body limit and validation answer before or around the route."""
    for path, method, operation in operations(spec):
        statuses = set(operation["responses"])
        assert "500" in statuses, (method, path)  # the last-resort handler answers anywhere
        needs = {s for r in operation.get("security", []) for scopes in r.values() for s in scopes}
        if is_protected(path):  # every /v1 route but the open signing keys (issue 20)
            assert {"401", "503"} <= statuses, (method, path)
            own = (method, path) in ROUTES_THAT_FORBID  # besides the scope check
            assert ("403" in statuses) == ("admin" in needs or own), (method, path)
        else:
            assert "401" not in statuses, (method, path)
        # At the OpenAI and Anthropic doors a request problem is 400, as at those providers.
        invalid = "422" if dialect_for(path) == "gateway" else "400"
        if "requestBody" in operation:
            assert {"400", "413", invalid} <= statuses, (method, path)
        if operation.get("parameters"):
            assert invalid in statuses, (method, path)
        if not operation.get("parameters") and "requestBody" not in operation:
            assert "422" not in statuses, (method, path)
        if invalid == "400":
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
    assert not validator.is_valid({"error": {"type": "pattern_not_found"}})  # needs a message
    assert not validator.is_valid({"error": {"type": "x", "message": "m"}})  # not an error type
    assert validator.is_valid(
        {"error": {"type": "pattern_not_found", "message": "m", "pattern": "p"}}
    )


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


def component_validator(spec: dict[str, Any], name: str) -> jsonschema.protocols.Validator:
    schema = {"$ref": f"#/components/schemas/{name}", "components": spec["components"]}
    return jsonschema.Draft202012Validator(schema)


def _error_classes() -> Iterator[type[GenAIError]]:
    """Every error class of the service, found independently of `app.errors.error_types`."""
    pending: list[type[GenAIError]] = [GenAIError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if cls.__module__.startswith("app."):
            yield cls


def test_error_type_is_an_enum_holding_every_error_class_type() -> None:
    spec = create_app(settings_for(None)).openapi()
    schemas = spec["components"]["schemas"]
    assert schemas["ErrorInfo"]["properties"]["type"] == {"$ref": "#/components/schemas/ErrorType"}
    enum = set(schemas["ErrorType"]["enum"])
    classes = list(_error_classes())
    assert len(classes) > 30
    for cls in classes:
        assert cls.error_type in enum, cls
    assert enum == {cls.error_type for cls in classes}  # and nothing that no class answers


async def test_every_response_example_is_valid_for_its_schema(
    http: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    schemas = spec["components"]["schemas"]
    for name in ("CompletionEnvelope", "RenderResult", "ErrorBody", "JobRecord", "AdminEventPage"):
        examples = schemas[name].get("examples")
        assert examples, name
        validator = component_validator(spec, name)
        for example in examples:
            validator.validate(example)
    # The examples tell one story: the envelope's fingerprints are those of the request example.
    envelope = schemas["CompletionEnvelope"]["examples"][0]
    request = schemas["RenderRequest"]["examples"][0]
    assert envelope["prompt"]["messages"][-1]["content"] == request["user_prompt"]
    assert envelope["provenance"]["user_prompt_hash"] == user_prompt_hash(request["user_prompt"])
    rendered = (await http.post("/v1/render", json=request)).json()
    for name in ("variables_hash", "user_prompt_hash"):
        assert envelope["provenance"][name] == rendered["provenance"][name], name


async def test_readyz_documents_its_report_for_200_and_503_and_sends_it(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    settings = settings_for(fake, pattern_dir=[tmp_path / "no-patterns-here"])
    async with serve_app(settings) as http:
        spec = (await http.get("/openapi.json")).json()
        resp = await http.get("/readyz")
    responses = spec["paths"]["/readyz"]["get"]["responses"]
    for status in ("200", "503"):
        assert schema_ref(responses[status]) == "#/components/schemas/ReadinessReport"
    assert resp.status_code == 503
    component_validator(spec, "ReadinessReport").validate(resp.json())
    assert resp.json()["patterns"]["missing_roots"]


async def test_optional_header_and_query_parameters_are_never_documented_as_null(
    spec: dict[str, Any],
) -> None:
    """HTTP has no null: `anyOf [integer, null]` made generators and fuzzers send `null`."""
    checked = 0
    for path, method, operation in operations(spec):
        for parameter in operation.get("parameters", []):
            assert "null" not in json.dumps(parameter["schema"]), (method, path, parameter)
            checked += 1
    deadline = next(
        parameter
        for parameter in spec["paths"]["/v1/completions"]["post"]["parameters"]
        if parameter["name"] == "x-genai-deadline-ms"
    )
    assert deadline["schema"]["type"] == "integer"
    assert checked > 10


async def test_a_request_without_a_pattern_or_template_is_invalid_in_the_document_too(
    http: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    """`{"user_prompt": ""}` used to pass the schema and be refused by the service."""
    validator = component_validator(spec, "RenderRequest")
    cases: list[tuple[dict[str, Any], bool]] = [
        ({"user_prompt": ""}, False),
        ({"user_prompt": "", "pattern_key": None, "template": None}, False),
        ({"user_prompt": "", "pattern_key": "summarize"}, True),
        ({"user_prompt": "", "pattern_key": "summarize", "template": None}, True),
        ({"user_prompt": "", "template": {"name": "t", "role": "r"}}, True),
        (
            {"user_prompt": "", "pattern_key": "summarize", "template": {"name": "t", "role": "r"}},
            False,
        ),
    ]
    for body, valid in cases:
        assert validator.is_valid(body) is valid, body
        resp = await http.post("/v1/render", json=body)
        refused = resp.status_code == 422 and resp.json()["error"]["type"] == "invalid_request"
        assert refused is not valid, (body, resp.text)


async def test_booleans_and_numeric_strings_are_refused_where_the_document_says_number(
    http: httpx.AsyncClient,
) -> None:
    """`"max_tokens": true` was read as 1; every numeric and boolean input is strict now."""
    base = {"pattern_key": "summarize", "user_prompt": "Some text."}
    refused = {
        ("params", "max_tokens"): {**base, "params": {"max_tokens": True}},
        ("params", "seed"): {**base, "params": {"seed": False}},
        ("params", "temperature"): {**base, "params": {"temperature": True}},
        ("params", "top_p"): {**base, "params": {"top_p": "0.5"}},
        ("params", "max_tokens", "str"): {**base, "params": {"max_tokens": "5"}},
        ("template", "version"): {
            "user_prompt": "x",
            "template": {"name": "t", "role": "r", "version": True},
        },
    }
    for where, body in refused.items():
        resp = await http.post("/v1/render", json=body)
        assert resp.status_code == 422, (where, resp.text)
        error = resp.json()["error"]
        assert error["type"] == "invalid_request", (where, error)
        assert error["errors"][0]["loc"][1:3] == list(where[:2]), (where, error)
    snippet = {"identifier": "strict-one", "name": "n", "text": "t", "active": 0}
    resp = await http.post("/v1/snippets", json=snippet)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["errors"][0]["loc"] == ["body", "active"]
    template = {"name": "strict", "role": "writer", "template": "Hello.", "activate": 1}
    resp = await http.post("/v1/templates", json=template)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["errors"][0]["loc"] == ["body", "activate"]


async def test_json_numbers_are_still_accepted_as_numbers(http: httpx.AsyncClient) -> None:
    """An integer is a number (temperature 1), and 200.0 is an integer, as JSON Schema has it."""
    params = {"temperature": 1, "top_p": 1, "max_tokens": 200.0, "seed": -7}
    resp = await http.post(
        "/v1/render", json={"pattern_key": "summarize", "user_prompt": "Text.", "params": params}
    )
    assert resp.status_code == 200, resp.text
    sent = resp.json()["params"]
    assert (sent["temperature"], sent["top_p"], sent["max_tokens"], sent["seed"]) == (
        1.0,
        1.0,
        200,
        -7,
    )


async def test_a_wrong_method_answers_405_allowing_every_documented_method_of_the_path(
    http: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    """Starlette named only the first route's methods (OPTIONS /v1/keys said `Allow: POST`)."""
    for path, item in spec["paths"].items():
        documented = sorted(method.upper() for method in item)
        concrete = path.replace("{job_id}", "0" * 32).replace("{version}", "1")
        concrete = concrete.replace("{key_id}", "0" * 16)  # a key id is 16 hex digits
        concrete = concrete.replace("{", "").replace("}", "")
        wrong = next(method for method in ("PATCH", "PUT") if method not in documented)
        resp = await http.request(wrong, concrete)
        assert resp.status_code == 405, (path, wrong, resp.status_code)
        assert resp.headers["allow"] == ", ".join(documented), path


def _sse_events(text: str) -> list[dict[str, str]]:
    events = []
    for frame in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append(fields)
    return events


async def test_a_streamed_completion_sends_the_events_the_document_describes(
    http: httpx.AsyncClient, spec: dict[str, Any], fake: FakeProviderServer
) -> None:
    """The text/event-stream schema describes each event; each data line holds the JSON of the
    schema named for its event (delta text, the envelope, or the error body)."""
    documented = spec["paths"]["/v1/completions"]["post"]["responses"]["200"]["content"]
    event_schema = {**documented["text/event-stream"]["schema"], "components": spec["components"]}
    events_validator = jsonschema.Draft202012Validator(event_schema)
    body = {"pattern_key": "summarize", "user_prompt": "Revenue rose.", "stream": True}
    streamed = await http.post("/v1/completions", json=body)
    # After one delta, the provider fails inside its stream: the answer ends in an error event.
    fake.script("openai", Reply.stream_error(after=1, status=500, chunks=("Revenue ", "rose.")))
    failed = await http.post("/v1/completions", json=body)
    seen = []
    for resp in (streamed, failed):
        assert resp.headers["content-type"].startswith("text/event-stream"), resp.text
        for event in _sse_events(resp.text):
            events_validator.validate(event)
            (branch,) = [
                option["properties"]["data"]["contentSchema"]
                for option in event_schema["oneOf"]
                if option["properties"]["event"]["const"] == event["event"]
            ]
            data_schema = {**branch, "components": spec["components"]}
            jsonschema.Draft202012Validator(data_schema).validate(json.loads(event["data"]))
            seen.append(event["event"])
    assert seen[0] == "delta" and seen.count("envelope") == 1 and seen[-1] == "error", seen


async def test_job_records_are_typed_in_the_document_and_real_ones_conform(
    http: httpx.AsyncClient, spec: dict[str, Any]
) -> None:
    """params, prompt_redacted, attempts and output_attempts name their models, not `object`."""
    record_schema = spec["components"]["schemas"]["JobRecord"]["properties"]
    refs = json.dumps(
        {name: record_schema[name] for name in ("params", "prompt_redacted", "output_attempts")}
    )
    for model in ("RecordedParams", "RecordedPrompt", "StructuredAttempt"):
        assert f"#/components/schemas/{model}" in refs, model
    issues = spec["components"]["schemas"]["ValidationIssues"]["properties"]
    assert issues["invalid"]["items"] == {"$ref": "#/components/schemas/InvalidValue"}
    assert issues["missing"]["items"] == {"$ref": "#/components/schemas/MissingValue"}
    request = {
        "pattern_key": "summarize",
        "user_prompt": "Mail jane.doe@example.com about revenue.",
        "params": {"max_tokens": 64, "stop": ["END"]},
    }
    envelope = (await http.post("/v1/completions", json=request)).json()
    resp = await http.get(f"/v1/jobs/{envelope['job_id']}")
    assert resp.status_code == 200, resp.text
    record = resp.json()
    component_validator(spec, "JobRecord").validate(record)
    # Only the parameters that were set, as stored; the prompt's texts redacted.
    assert record["params"] == {k: v for k, v in envelope["params"].items() if v is not None}
    assert "jane.doe@example.com" not in json.dumps(record["prompt_redacted"])
    assert record["prompt_redacted"]["messages"][-1]["role"] == "user"
