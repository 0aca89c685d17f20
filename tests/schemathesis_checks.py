"""Schemathesis checks for this service, loaded by `st run` as its hooks module.

They replace two built-in checks that are too coarse for a gateway:
- `not_a_server_error` fails every 5xx, yet a caller that asks for a 2 ms deadline
  (`x-genai-deadline-ms`) is rightly answered 504 deadline_exceeded;
- `positive_data_acceptance` fails every 4xx, yet the service has rules no schema can state
  (a template must use exactly the variables it declares, a pattern needs its variables, a key's
  team must exist and its expiry lie ahead, a canary's weights sum to 100).
What must never happen is a 500 or a schema-valid request refused by validation itself.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import schemathesis
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

# Checks take a case of any operation.
Case = schemathesis.Case[schemathesis.APIOperation[Any, Any, Any, Any]]

DEADLINE_HEADER = "x-genai-deadline-ms"
# The error types that mean "the body or parameters do not fit the shape": only the document
# can be wrong when a request it calls valid gets one of them.
SHAPE_REFUSALS = frozenset({"invalid_request", "bad_request"})


def _error_type(response: schemathesis.Response) -> str | None:
    try:
        body: Any = response.json()
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    # The Anthropic door keeps the gateway's own type beside Anthropic's (app/api/error_dialects).
    kind = error.get("gateway_type", error.get("type"))
    return kind if isinstance(kind, str) else None


def _breaks_identifier_rule(case: Case) -> bool:
    """PUT /v1/snippets/{identifier} wants the body's identifier to equal the path's: a rule
    across two locations that no schema states, so a case breaking it is rightly refused."""
    operation = case.operation
    if (operation.method.upper(), operation.path) != ("PUT", "/v1/snippets/{identifier}"):
        return False
    body = case.body if isinstance(case.body, dict) else {}
    return bool(body.get("identifier") != case.path_parameters.get("identifier"))


_LIMIT_BODIES = frozenset(
    {
        ("POST", "/v1/keys"),
        ("PATCH", "/v1/keys/{key_id}"),
        ("POST", "/v1/teams"),
        ("PATCH", "/v1/teams/{name}"),
    }
)


def _breaks_limit_rule(case: Case) -> bool:
    """Key and team bodies have rules no schema states: across fields (`budget_window` needs
    `budget_usd`; one budget per window, `budget_usd` counting as its window, `month` by
    default), against the clock (`expires_at` ahead) and against the store (`team` exists)."""
    operation = case.operation
    if (operation.method.upper(), operation.path) not in _LIMIT_BODIES:
        return False
    body: dict[str, Any] = case.body if isinstance(case.body, dict) else {}
    usd, window = body.get("budget_usd"), body.get("budget_window")
    budgets = body.get("budgets")
    windows = [b.get("window") for b in budgets if isinstance(b, dict)] if budgets else []
    if usd is not None:
        windows.append(window or "month")
    expires = body.get("expires_at")
    past = isinstance(expires, str) and _instant(expires) <= dt.datetime.now(dt.UTC)
    return (
        (window is not None and usd is None)
        or len(set(windows)) != len(windows)
        or past
        or body.get("team") is not None
    )


def _breaks_usage_window(case: Case) -> bool:
    """`GET /v1/usage` wants `from` before `to` and at most 400 days between them (30 days
    before `to` by default): a rule across two parameters, which no schema states."""
    operation = case.operation
    if (operation.method.upper(), operation.path) != ("GET", "/v1/usage"):
        return False
    query = case.query if isinstance(case.query, dict) else {}
    try:
        end = _instant(str(query["to"])) if "to" in query else dt.datetime.now(dt.UTC)
        start = _instant(str(query["from"])) if "from" in query else end - dt.timedelta(days=30)
    except ValueError:
        return False
    return not start < end or end - start > dt.timedelta(days=400)


def _breaks_release_rule(case: Case) -> bool:
    """Release bodies have rules no schema states: a split's two versions differ and their
    weights sum to 100; a template version's test cases have unique names, regular expressions
    that compile and an `answer_schema` that is a JSON Schema."""
    operation = case.operation
    body: dict[str, Any] = case.body if isinstance(case.body, dict) else {}
    route = (operation.method.upper(), operation.path)
    if route == ("PUT", "/v1/templates/{name}/{role}/labels/{label}"):
        shares = [s for s in body.get("split") or [] if isinstance(s, dict)]
        versions = {s.get("version") for s in shares}
        weights = [s.get("weight") for s in shares]
        return len(shares) == 2 and (
            len(versions) != 2 or sum(w for w in weights if isinstance(w, int)) != 100
        )
    if route != ("POST", "/v1/templates"):
        return False
    cases = [c for c in body.get("tests") or [] if isinstance(c, dict)]
    names = [c.get("name") for c in cases]
    return len(set(names)) != len(names) or any(_bad_expectations(c.get("expect")) for c in cases)


def _bad_expectations(expect: Any) -> bool:
    if not isinstance(expect, dict):
        return False
    patterns: list[Any] = []
    for key in ("prompt_matches", "answer_matches"):
        value = expect.get(key)
        patterns += value if isinstance(value, list) else [value] if value is not None else []
    for pattern in patterns:
        try:
            re.compile(pattern)
        except (re.error, TypeError):
            return True
    schema = expect.get("answer_schema")
    if isinstance(schema, dict):
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError:
            return True
    return False


def _instant(text: str) -> dt.datetime:
    when = dt.datetime.fromisoformat(text)
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


@schemathesis.check
def no_server_error(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Case
) -> bool | None:
    """No 5xx, except the 504 a caller's own deadline header asked for."""
    if response.status_code < 500:
        return None
    headers = {name.lower() for name in (case.headers or {})}
    asked_deadline = DEADLINE_HEADER in headers
    if (
        response.status_code == 504
        and asked_deadline
        and _error_type(response) == "deadline_exceeded"
    ):
        return None
    raise AssertionError(
        f"Server error {response.status_code} ({_error_type(response)}): {response.text[:500]}"
    )


@schemathesis.check
def schema_valid_passes_validation(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: Case
) -> bool | None:
    """A request the document calls valid is never refused as malformed (422 invalid_request,
    400 bad_request): the document and the validators state the same rules."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return None
    if (
        _breaks_identifier_rule(case)
        or _breaks_limit_rule(case)
        or _breaks_usage_window(case)
        or _breaks_release_rule(case)
    ):
        return None
    kind = _error_type(response)
    if response.status_code in (400, 422) and kind in SHAPE_REFUSALS:
        raise AssertionError(f"A schema-valid request was refused as {kind}: {response.text[:500]}")
    return None
