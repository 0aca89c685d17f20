"""How an error is answered at each door: the gateway's own body everywhere, with the status
and the fields that OpenAI's and Anthropic's clients branch on at their doors.

- The gateway's routes keep their contract: `{"error": {"type", "message", …}}`, 422 for a
  request problem.
- The OpenAI door (`/v1/chat/completions`, `/v1/models…`) keeps that body and the gateway's
  `type`, and adds OpenAI's `param` and `code` (null when none applies). A request problem is
  400, as at OpenAI; an unknown model is 404 `model_not_found`; a prompt over the context window
  is 400 `context_length_exceeded`. So `openai.BadRequestError` and `NotFoundError`, and the
  clients that read `code`, behave as they do against OpenAI.
- The Anthropic door (`/v1/messages…`) answers in Anthropic's shape, `{"type": "error", "error":
  {"type", "message"}, "request_id"}`, with Anthropic's vocabulary in `error.type` (what its
  clients switch on) and the gateway's own in `error.gateway_type`, the details beside it.

Only the mapping lives here; `app.api.errors` is still the one place errors become HTTP.
"""

from __future__ import annotations

from typing import Any, Literal

from app.api.paths import CHAT_COMPLETIONS, MESSAGES, MODELS, V1
from app.errors import (
    CapabilityMissing,
    GenAIError,
    InvalidConversation,
    InvalidModel,
    InvalidRequest,
    Overloaded,
    PatternNotFound,
    RequestProblem,
    Unauthenticated,
    UnsupportedParameter,
    UpstreamRateLimited,
    UpstreamRejected,
)

Dialect = Literal["gateway", "openai", "anthropic"]


def _under(path: str, route: str) -> bool:
    return path == route or path.startswith(route + "/")


def dialect_for(path: str) -> Dialect:
    if path == V1 + CHAT_COMPLETIONS or _under(path, V1 + MODELS):
        return "openai"
    if _under(path, V1 + MESSAGES):
        return "anthropic"
    return "gateway"


def _model_not_found(exc: GenAIError) -> bool:
    if isinstance(exc, InvalidModel | PatternNotFound):
        return True
    return isinstance(exc, UpstreamRejected) and exc.upstream_status == 404


def _path(loc: list[str | int]) -> str:
    """A validation location as the OpenAI field it names: `messages[2].tool_call_id`."""
    text = ""
    for part in loc[1:] if loc and loc[0] in ("body", "query", "path", "header") else loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _code_and_param(exc: GenAIError) -> tuple[str | None, str | None]:
    if isinstance(exc, InvalidRequest) and exc.problems:
        first = exc.problems[0]
        code = "missing_required_parameter" if first.type == "missing" else "invalid_value"
        return code, _path(first.loc) or None
    if isinstance(exc, InvalidConversation):
        return "invalid_value", exc.param
    if isinstance(exc, UnsupportedParameter):
        return "unsupported_parameter", exc.param
    if isinstance(exc, CapabilityMissing) and exc.shortfalls:
        lack = next((s for s in exc.shortfalls if s.kind == "context"), exc.shortfalls[0])
        codes = {"context": "context_length_exceeded", "param": "unsupported_parameter"}
        return codes.get(lack.kind, "unsupported_value"), lack.param
    if isinstance(exc, UpstreamRejected):
        return exc.upstream_code, None
    if isinstance(exc, Unauthenticated):
        return "invalid_api_key", None
    if isinstance(exc, UpstreamRateLimited | Overloaded):
        return "rate_limit_exceeded" if isinstance(exc, UpstreamRateLimited) else "overloaded", None
    return None, None


def openai_error(exc: GenAIError, body: dict[str, Any], status: int) -> tuple[int, dict[str, Any]]:
    """(status, body) at the OpenAI door; `status` is the gateway's own."""
    info = body["error"]
    code, param = _code_and_param(exc)
    if _model_not_found(exc):
        status, code, param = 404, "model_not_found", "model"
    elif isinstance(exc, UpstreamRejected):
        status = exc.upstream_status if exc.upstream_status in (400, 413, 422) else 400
        status = 400 if status == 422 else status
    elif isinstance(exc, RequestProblem) and status == 422:
        status = 400
    info["param"] = info.get("param", param)
    info["code"] = code
    return status, body


# The gateway's errors in Anthropic's vocabulary, by the status the door answers with.
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def anthropic_error(
    exc: GenAIError, body: dict[str, Any], status: int
) -> tuple[int, dict[str, Any]]:
    """(status, body) at the Anthropic door: its statuses are OpenAI's (400 for a request
    problem, 404 for an unknown model), its shape and vocabulary its own."""
    status, _ = openai_error(exc, {"error": {}}, status)
    info = dict(body["error"])
    gateway_type = info.pop("type")
    request_id = info.pop("request_id", None)
    kind = _ANTHROPIC_TYPES.get(status, "api_error")
    answer: dict[str, Any] = {
        "type": "error",
        "error": {"type": kind, "gateway_type": gateway_type, **info},
    }
    if request_id is not None:
        answer["request_id"] = request_id
    return status, answer
