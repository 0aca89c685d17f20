"""The OpenAPI document tells the truth about errors: every refusal is documented as the
`ErrorBody` the service really sends, never FastAPI's `HTTPValidationError`.

Routes declare the errors of their own work (`error_responses(404, 409)`); the refusals that
come from the layers around every route are added here, where those layers are known:
authentication (401, 403, 503 when the key store cannot be read), the body (400 unreadable,
413 too large), validation (422 for any operation with parameters or a body) and the last-resort
handler (500 for any operation). `error.type` is documented as the enum of every type the error
hierarchy holds; the main response shapes carry examples (app/api/openapi_examples.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.api.error_dialects import Dialect, dialect_for
from app.api.messages_schemas import AnthropicErrorBody
from app.api.openapi_examples import add_examples
from app.auth.keys import Scope
from app.auth.protected import is_protected
from app.errors import error_types
from app.schemas import ErrorBody

ERROR_SCHEMA = ErrorBody.__name__
ANTHROPIC_ERROR_SCHEMA = AnthropicErrorBody.__name__
ERROR_TYPE_SCHEMA = "ErrorType"
_COMPONENTS = "#/components/schemas/"
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")
_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")

# Why each status is sent; `error.type` names the exact case.
_WHY: dict[int, str] = {
    400: "bad_request: the body cannot be read (not UTF-8, not JSON, nested too deeply).",
    401: "unauthenticated: no valid `Authorization: Bearer` API key.",
    403: "forbidden: the key's scope does not allow this operation.",
    404: "The named thing does not exist (error.type says which).",
    409: "A conflict with the stored state (error.type says which).",
    413: "payload_too_large: the body is over GENAI_MAX_BODY_BYTES.",
    422: "invalid_request (error.errors lists each field), or a rule the request breaks.",
    429: "rate_limited: the provider asks to wait (Retry-After).",
    502: "The provider failed, refused our key, or never gave valid structured output.",
    503: "A dependency is unavailable: the store, the key store or the provider.",
    500: "internal_error: an unexpected failure; error.request_id finds its log line.",
    504: "upstream_timeout: the provider did not answer in time.",
}


def sse_event(name: str | None, data: dict[str, Any]) -> dict[str, Any]:
    """One Server-Sent Event as a text/event-stream `schema` describes it (OpenAPI 3.1: the
    schema is of each event): its `event:` name (None: a data-only event) and its `data:` line,
    JSON of the given schema."""
    properties: dict[str, Any] = {
        "data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data}
    }
    if name is None:
        return {"type": "object", "required": ["data"], "properties": properties}
    properties["event"] = {"const": name}
    return {"type": "object", "required": ["event", "data"], "properties": properties}


# A streamed completion, one event at a time (OpenAPI 3.1 has `schema` describe each event).
COMPLETION_EVENTS: dict[str, Any] = {
    "oneOf": [
        sse_event(
            "delta",
            {
                "type": "object",
                "required": ["text"],
                "properties": {"text": {"type": "string"}},
            },
        ),
        sse_event("envelope", {"$ref": _COMPONENTS + "CompletionEnvelope"}),
        sse_event("error", {"$ref": _COMPONENTS + ERROR_SCHEMA}),
    ]
}


def _forbidden_possible(operation: dict[str, Any]) -> bool:
    """403 is possible only when some key scope lacks what the operation needs."""
    needed = {
        scope
        for requirement in operation.get("security", [])
        for scopes in requirement.values()
        for scope in scopes
    }
    return any(not held.allows(Scope(scope)) for scope in needed for held in Scope)


def _refusals(path: str, operation: dict[str, Any], *, auth: bool) -> set[int]:
    """The statuses the layers around the route can answer this operation with."""
    statuses = {500}  # any operation, should something unexpected fail
    if auth and is_protected(path):
        statuses |= {401, 503}
        if _forbidden_possible(operation):
            statuses.add(403)
    if "requestBody" in operation:
        statuses |= {400, 413, 422}
    if operation.get("parameters"):
        statuses.add(422)
    return statuses


# At the OpenAI and Anthropic doors a request problem is 400, as at those providers
# (app/api/error_dialects.py); the reasons of their 400s and 404s are the dialects'.
_DOOR_WHY: dict[int, str] = {
    400: "The request cannot be served: invalid_request, invalid_conversation, "
    "unsupported_parameter, capability_missing (code context_length_exceeded for a prompt over "
    "the context window) or bad_request; `param` names the field, `code` is OpenAI's.",
    404: "model_not_found: no such model, pattern, or provider model.",
}


def _error_response(status: int, dialect: Dialect = "gateway") -> dict[str, Any]:
    schema = ANTHROPIC_ERROR_SCHEMA if dialect == "anthropic" else ERROR_SCHEMA
    why = _DOOR_WHY.get(status) if dialect != "gateway" else None
    return {
        "description": why or _WHY.get(status, "Error"),
        "content": {"application/json": {"schema": {"$ref": _COMPONENTS + schema}}},
    }


def _without_null(parameter: dict[str, Any]) -> None:
    """An optional header or query parameter is absent, never null: HTTP has no null, and a
    generator (or fuzzer) reading `anyOf [integer, null]` sends the text `null`."""
    schema = parameter.get("schema", {})
    choices = schema.get("anyOf")
    if not isinstance(choices, list):
        return
    kept = [choice for choice in choices if choice != {"type": "null"}]
    if len(kept) == 1 and len(kept) < len(choices):
        del schema["anyOf"]
        schema.update(kept[0])


def _enumerate_error_types(schemas: dict[str, Any]) -> None:
    """`error.type` as an enum of every type the error hierarchy can answer with."""
    schemas[ERROR_TYPE_SCHEMA] = {
        "type": "string",
        "enum": error_types(),
        "title": ERROR_TYPE_SCHEMA,
        "description": "Stable code to branch on; one per error class in app/errors.py.",
    }
    info = schemas["ErrorInfo"]["properties"]
    info["type"] = {"$ref": _COMPONENTS + ERROR_TYPE_SCHEMA}


def document_errors(spec: dict[str, Any], *, auth: bool) -> dict[str, Any]:
    """Rewrite a generated document in place so that each operation lists every error it can
    answer, each as ErrorBody; a status a route documents with its own model (the readiness
    report of /readyz) is left as the route declared it."""
    for path, item in spec.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            for parameter in operation.get("parameters", []):
                _without_null(parameter)
            dialect = dialect_for(path)
            responses: dict[str, Any] = operation.setdefault("responses", {})
            for added in _refusals(path, operation, auth=auth):
                responses.setdefault(str(added), _error_response(added, dialect))
            if not auth:  # a route's own 403 is about the calling key (GET /v1/usage): none
                responses.pop("403", None)
            for status, response in list(responses.items()):
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                ref = schema.get("$ref", "") if isinstance(schema, dict) else ""
                if ref.removeprefix(_COMPONENTS) in (*_FASTAPI_VALIDATION_SCHEMAS, ERROR_SCHEMA):
                    responses[status] = _error_response(int(status), dialect)
            if dialect != "gateway" and "422" in responses:  # a door's 422 is its 400
                del responses["422"]
                responses["400"] = _error_response(400, dialect)
            operation["responses"] = dict(sorted(responses.items()))
    schemas: dict[str, Any] = spec.setdefault("components", {}).setdefault("schemas", {})
    for name in _FASTAPI_VALIDATION_SCHEMAS:
        schemas.pop(name, None)
    body = ErrorBody.model_json_schema(ref_template=_COMPONENTS + "{model}")
    schemas.update(body.pop("$defs", {}))
    schemas[ERROR_SCHEMA] = body
    anthropic = AnthropicErrorBody.model_json_schema(ref_template=_COMPONENTS + "{model}")
    schemas.update(anthropic.pop("$defs", {}))
    schemas[ANTHROPIC_ERROR_SCHEMA] = anthropic
    _enumerate_error_types(schemas)
    schemas["AnthropicErrorInfo"]["properties"]["gateway_type"] = {
        "$ref": _COMPONENTS + ERROR_TYPE_SCHEMA
    }
    add_examples(schemas)
    return spec


class GatewayAPI(FastAPI):
    """FastAPI whose OpenAPI document lists every error as the ErrorBody the service sends."""

    #: Whether /v1 operations can be refused for their key (off under GENAI_AUTH_DISABLED).
    auth_enabled: bool = True

    def openapi(self) -> dict[str, Any]:
        if self.openapi_schema is None:  # built once, on the first request for it
            self.openapi_schema = document_errors(super().openapi(), auth=self.auth_enabled)
        return self.openapi_schema
