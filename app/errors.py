"""The one error hierarchy of the service; each class knows its HTTP status and `error.type`.

    GenAIError                         500 internal_error
    ├── RequestProblem                 4xx: the caller (or a pattern author) can fix it
    │   │                              (400 bad_request itself: a body that cannot be parsed)
    │   ├── InvalidRequest             422 invalid_request      (body or parameters fail validation)
    │   ├── RouteNotFound              404 not_found            (no such path)
    │   ├── MethodNotAllowed           405 method_not_allowed   (with Allow)
    │   ├── Unauthenticated            401 unauthenticated      (no valid `Authorization: Bearer`)
    │   ├── Forbidden                  403 forbidden            (the key lacks the route's scope)
    │   │   ├── ModelNotAllowed        403 model_not_allowed    (outside the key's allowed_models)
    │   │   └── PatternNotAllowed      403 pattern_not_allowed  (not in allowed_patterns)
    │   ├── QuotaRefusal               429 quota_exceeded       (a limit of the key or its team)
    │   │   ├── BudgetExceeded         429 budget_exceeded      (a budget window is spent)
    │   │   └── KeyRateLimited         429 rate_limited         (rpm or tpm; with Retry-After)
    │   ├── PayloadTooLarge            413 payload_too_large    (body over GENAI_MAX_BODY_BYTES)
    │   ├── PatternNotFound            404 pattern_not_found
    │   ├── InvalidPattern             422 invalid_pattern      (front-matter or Jinja syntax)
    │   ├── PatternRenderError         422 pattern_render_error (also a ValueError)
    │   │   ├── MissingVariables       422 missing_variables    (names every missing key)
    │   │   ├── SandboxViolation       422 sandbox_violation
    │   │   ├── VariableContractViolation 422 variable_contract_violation (missing or extra keys)
    │   │   └── RenderLimitExceeded    422 render_limit_exceeded (a template outgrew its budget)
    │   │       ├── RenderTimeout      422 render_timeout       (GENAI_RENDER_TIMEOUT_SECONDS)
    │   │       ├── RenderTooLarge     422 render_too_large     (over GENAI_RENDER_MAX_CHARS)
    │   │       └── RenderTooDeep      422 render_too_deep      (runaway recursion)
    │   ├── InvalidModel               422 invalid_model        (not provider/model, or unknown)
    │   ├── TemplateNotFound           404 template_not_found
    │   ├── InvalidTemplate            422 invalid_template     (body and declared variables differ)
    │   ├── TemplateConflict           409 template_conflict    (a concurrent change won)
    │   ├── LabelNotFound              404 label_not_found      (no such label on the template)
    │   ├── LabelConflict              409 label_conflict       (a concurrent label move won)
    │   ├── LabelProtected             409 label_protected      (e.g. deleting `production`)
    │   ├── TestsFailed                422 tests_failed         (names the failing pattern tests)
    │   ├── JobNotFound                404 job_not_found
    │   ├── ApiKeyNotFound             404 api_key_not_found
    │   ├── TeamNotFound               404 team_not_found       (a key naming one: 422 at `team`)
    │   ├── TeamExists                 409 team_exists
    │   ├── TeamInUse                  409 team_in_use          (unrevoked keys still belong to it)
    │   ├── ReplayUnavailable          409 replay_unavailable   (inputs not kept, or unreadable)
    │   ├── SnippetNotFound            404 snippet_not_found
    │   ├── SnippetExists              409 snippet_exists
    │   ├── SnippetConflict            409 snippet_conflict     (a concurrent edit won; retry)
    │   ├── MissingSnippets            422 missing_snippets     (labels the pattern expects)
    │   ├── InvalidSnippetLabels       422 invalid_snippet_labels (labels must be UPPER_SNAKE)
    │   ├── DeliveryNotFound           404 delivery_not_found   (no webhook delivery with that id)
    │   ├── DeliveryNotRetriable       409 delivery_not_retriable (only a failed one is retried)
    │   ├── WebhooksNotConfigured      409 webhooks_not_configured (GENAI_WEBHOOKS__URLS is empty)
    │   ├── InvalidCursor              422 invalid_cursor       (not a next_cursor the service gave)
    │   ├── AuditChainDisabled         409 audit_chain_disabled (GENAI_AUDIT__CHAIN_ENABLED=false)
    │   ├── InvalidConversation        422 invalid_conversation (parts that do not fit together)
    │   ├── UnsupportedParameter       422 unsupported_parameter (would change the answer; cannot)
    │   ├── CapabilityMissing          422 capability_missing   (the model cannot do what is asked)
    │   └── InvalidPatternTests        422 invalid_pattern_tests (a test file: `FILE:LINE: problem`)
    ├── StoreUnavailable               503 store_unavailable    (no audit record can be written)
    │   └── QuotaStoreUnavailable      503 quota_store_unavailable (counters unreachable)
    ├── Overloaded                     503 overloaded           (limits and queue full)
    ├── DeadlineExceeded               504 deadline_exceeded    (the request's deadline passed)
    └── ProviderError                  carries provider, upstream status and request id
        ├── ProviderUnavailable        503 provider_unavailable (no API key configured)
        ├── UpstreamRateLimited        429 rate_limited         (with Retry-After)
        ├── UpstreamRejected           422 upstream_rejected    (upstream 400/404/422)
        ├── UpstreamAuthFailed         502 upstream_auth_failed (our key was refused)
        ├── UpstreamError              502 upstream_error       (5xx or connection failure)
        ├── UpstreamTimeout            504 upstream_timeout     (an attempt or a stream stalled)
        ├── StreamInterrupted          502 stream_interrupted   (a stream ended without its finish)
        ├── AnswerTooLarge             502 answer_too_large     (past the answer size cap)
        └── StructuredOutputInvalid    502 structured_output_invalid (after bounded repairs)

SDK exceptions become these inside the provider adapters; these become HTTP in `app/api/errors.py`.
Their `{"error": …}` body, for the API and the CLI alike, is built in `app/api/error_body.py`.
Storage exceptions become StoreUnavailable at the repository seam (`app/store/db.py`).
A completion that fails once its audit record exists raises `error.with_job(job_id)`: a new error
of the same type whose body also names the job.

    ConfigurationError                 not HTTP: a bad setting or unreachable store at start;
                                       the CLI prints its one line and exits 2
    └── ConfigurationProblems          several at once (the config file): one line each
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar, Self

from app.schemas import FieldProblem


class GenAIError(Exception):
    """Base of every error the service raises on purpose."""

    status_code: ClassVar[int] = 500
    error_type: ClassVar[str] = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    #: The audit record of the failed job; only `with_job` makes an error that names one.
    _job_id: str | None = None

    @property
    def job_id(self) -> str | None:
        return self._job_id

    def with_job(self, job_id: str) -> Self:
        """This error as the answer of job `job_id`: the same type, body and cause, plus the job.

        Errors from a provider are made before anyone knows the job, so the failure path raises
        this new error rather than stamping the id onto the one it caught.
        """
        made = type(self).__new__(type(self), *self.args)
        made.__dict__.update(self.__dict__)
        made._job_id = job_id
        made.__cause__, made.__suppress_context__ = self.__cause__, self.__suppress_context__
        return made.with_traceback(self.__traceback__)

    def details(self) -> dict[str, Any]:
        """Extra, safe-to-publish fields for the error body."""
        return {}

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer needs (Retry-After, WWW-Authenticate)."""
        return {}


class RequestProblem(GenAIError):
    """Something in the request or the pattern it names needs fixing."""

    status_code = 400
    error_type = "bad_request"


class InvalidRequest(RequestProblem):
    """The body, query or path failed validation; every failing field is listed, its input not."""

    status_code = 422
    error_type = "invalid_request"

    def __init__(self, problems: Sequence[FieldProblem]) -> None:
        summary = "; ".join(f"{'.'.join(map(str, p.loc))}: {p.msg}" for p in problems[:5])
        super().__init__(f"The request is invalid: {summary}")
        self.problems = list(problems)

    def details(self) -> dict[str, Any]:
        return {"errors": [problem.model_dump(mode="json") for problem in self.problems]}


class RouteNotFound(RequestProblem):
    status_code = 404
    error_type = "not_found"


class MethodNotAllowed(RequestProblem):
    status_code = 405
    error_type = "method_not_allowed"

    def __init__(self, message: str, *, allow: str | None) -> None:
        super().__init__(message)
        self.allow = allow

    def headers(self) -> dict[str, str]:
        return {"Allow": self.allow} if self.allow else {}


class PatternNotFound(RequestProblem):
    status_code = 404
    error_type = "pattern_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"No pattern named {name!r}. GET /v1/patterns lists the available ones.")
        self.name = name

    def details(self) -> dict[str, Any]:
        return {"pattern": self.name}


class InvalidPattern(RequestProblem):
    status_code = 422
    error_type = "invalid_pattern"

    def __init__(self, name: str, problems: Sequence[str]) -> None:
        super().__init__(f"Pattern {name!r} is invalid: " + "; ".join(problems))
        self.name = name
        self.problems = list(problems)

    def details(self) -> dict[str, Any]:
        return {"pattern": self.name, "problems": self.problems}


class PatternRenderError(RequestProblem, ValueError):
    status_code = 422
    error_type = "pattern_render_error"


class MissingVariables(PatternRenderError):
    error_type = "missing_variables"

    def __init__(self, name: str, missing: Sequence[str]) -> None:
        names = sorted(set(missing))
        super().__init__(f"Pattern {name!r} needs these variables: {', '.join(names)}")
        self.name = name
        self.missing = names

    def details(self) -> dict[str, Any]:
        return {"pattern": self.name, "missing": self.missing}


class SandboxViolation(PatternRenderError):
    error_type = "sandbox_violation"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"Pattern {name!r} tried an operation the template sandbox forbids "
            "(attribute or method access outside the safe set)."
        )
        self.name = name


class RenderLimitExceeded(PatternRenderError):
    """A template (file, database or snippet-driven) went past a render budget; the process is
    unharmed and the template's author must change it."""

    error_type = "render_limit_exceeded"

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"Template {name!r} was stopped: {problem}")
        self.name = name

    def details(self) -> dict[str, Any]:
        return {"template": self.name}


class RenderTimeout(RenderLimitExceeded):
    error_type = "render_timeout"


class RenderTooLarge(RenderLimitExceeded):
    error_type = "render_too_large"


class RenderTooDeep(RenderLimitExceeded):
    error_type = "render_too_deep"


class Unauthenticated(RequestProblem):
    status_code = 401
    error_type = "unauthenticated"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Bearer"}


class Forbidden(RequestProblem):
    status_code = 403
    error_type = "forbidden"


class ModelNotAllowed(Forbidden):
    error_type = "model_not_allowed"

    def __init__(self, model: str) -> None:
        super().__init__(
            f"This key may not use {model!r} (it is outside the key's allowed_models). Ask for "
            "another model, or ask an admin to widen the allowlist (PATCH /v1/keys/{id})."
        )


class PatternNotAllowed(Forbidden):
    error_type = "pattern_not_allowed"

    def __init__(self, pattern: str) -> None:
        super().__init__(
            f"This key may not use pattern {pattern!r} (it is outside the key's "
            "allowed_patterns). Ask an admin to widen the allowlist (PATCH /v1/keys/{id})."
        )


class QuotaRefusal(RequestProblem):
    """A limit of the key or its team refused the request before anything was called."""

    status_code = 429
    error_type = "quota_exceeded"

    def __init__(self, message: str, *, owner: str, limit: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.owner = owner  # "key" or "team"
        self.limit = limit  # "rpm", "tpm", or the budget window
        self.retry_after = retry_after  # seconds until the window starts over; None: never

    def details(self) -> dict[str, Any]:
        found: dict[str, Any] = {"limit_owner": self.owner, "limit": self.limit}
        if self.retry_after is not None:
            found["retry_after"] = math.ceil(self.retry_after)
        return found

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            # The OpenAI and Anthropic SDKs retry a 429 unless told it is pointless.
            return {"x-should-retry": "false"}
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class BudgetExceeded(QuotaRefusal):
    error_type = "budget_exceeded"

    def headers(self) -> dict[str, str]:
        # A budget starts over in hours or days: an SDK's automatic retry cannot help.
        return {**super().headers(), "x-should-retry": "false"}


class KeyRateLimited(QuotaRefusal):
    error_type = "rate_limited"


class PayloadTooLarge(RequestProblem):
    status_code = 413
    error_type = "payload_too_large"


class InvalidModel(RequestProblem):
    status_code = 422
    error_type = "invalid_model"


class TemplateNotFound(RequestProblem):
    status_code = 404
    error_type = "template_not_found"


class InvalidTemplate(RequestProblem):
    status_code = 422
    error_type = "invalid_template"

    def __init__(self, message: str, problems: Sequence[str]) -> None:
        super().__init__(f"{message}: " + "; ".join(problems))
        self.problems = list(problems)

    def details(self) -> dict[str, Any]:
        return {"problems": self.problems}


class VariableContractViolation(PatternRenderError):
    """The supplied variables must equal the template's declared set, no more and no less."""

    error_type = "variable_contract_violation"

    def __init__(self, name: str, *, missing: Sequence[str], unexpected: Sequence[str]) -> None:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(sorted(missing))}")
        if unexpected:
            parts.append(f"not declared {', '.join(sorted(unexpected))}")
        super().__init__(
            f"Variables for template {name!r} do not match its contract: " + "; ".join(parts)
        )
        self.name = name
        self.missing = sorted(missing)
        self.unexpected = sorted(unexpected)

    def details(self) -> dict[str, Any]:
        return {"template": self.name, "missing": self.missing, "unexpected": self.unexpected}


class TemplateConflict(RequestProblem):
    status_code = 409
    error_type = "template_conflict"


# --- template labels (release flow) ---


class LabelNotFound(RequestProblem):
    status_code = 404
    error_type = "label_not_found"


class LabelConflict(RequestProblem):
    """Another move of the same label committed first; read the label again and retry."""

    status_code = 409
    error_type = "label_conflict"


class LabelProtected(RequestProblem):
    """The label cannot take this action (deleting `production`, a reserved name)."""

    status_code = 409
    error_type = "label_protected"


class TestsFailed(RequestProblem):
    """A protected label may only point at versions whose pattern tests pass."""

    __test__ = False  # not a pytest class
    status_code = 422
    error_type = "tests_failed"

    def __init__(self, message: str, failures: Sequence[str]) -> None:
        super().__init__(message)
        self.failures = list(failures)

    def details(self) -> dict[str, Any]:
        return {"failures": self.failures}


class JobNotFound(RequestProblem):
    status_code = 404
    error_type = "job_not_found"

    def __init__(self, job_id: str) -> None:
        super().__init__(f"No job with id {job_id!r}.")


class ApiKeyNotFound(RequestProblem):
    status_code = 404
    error_type = "api_key_not_found"

    def __init__(self, key_id: str) -> None:
        super().__init__(f"No API key with id {key_id!r}. GET /v1/keys lists them.")


class TeamNotFound(RequestProblem):
    """No such team at /v1/teams/{name}. A key that names a missing team is a field problem
    instead (`no_such_team`: 422 at `team`), since the key's own path exists."""

    status_code = 404
    error_type = "team_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"No team named {name!r}. GET /v1/teams lists them.")
        self.name = name

    def details(self) -> dict[str, Any]:
        return {"team": self.name}


def no_such_team(name: str) -> InvalidRequest:
    """A key's `team` names a team that does not exist (nothing is stored)."""
    return InvalidRequest(
        [
            FieldProblem(
                loc=["body", "team"],
                msg=f"no team named {name!r}; create it first (POST /v1/teams)",
                type="team_not_found",
            )
        ]
    )


class TeamExists(RequestProblem):
    status_code = 409
    error_type = "team_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"A team named {name!r} exists; PATCH /v1/teams/{name} changes it.")
        self.name = name

    def details(self) -> dict[str, Any]:
        return {"team": self.name}


class TeamInUse(RequestProblem):
    """A team is deleted only once none of its keys works any more: deleting it under live keys
    would silently lift the limits those keys were given to share."""

    status_code = 409
    error_type = "team_in_use"

    def __init__(self, name: str, keys: int) -> None:
        super().__init__(
            f"Team {name!r} still has {keys} unrevoked key(s); revoke them or move them to "
            "another team (PATCH /v1/keys/{id}) first."
        )
        self.name = name
        self.keys = keys

    def details(self) -> dict[str, Any]:
        return {"team": self.name, "keys": self.keys}


class ReplayUnavailable(RequestProblem):
    status_code = 409
    error_type = "replay_unavailable"


class SnippetNotFound(RequestProblem):
    status_code = 404
    error_type = "snippet_not_found"

    def __init__(self, identifier: str, message: str | None = None) -> None:
        super().__init__(
            message or f"No active snippet {identifier!r}. GET /v1/snippets lists them."
        )
        self.identifier = identifier

    def details(self) -> dict[str, Any]:
        return {"snippet": self.identifier}


class SnippetExists(RequestProblem):
    status_code = 409
    error_type = "snippet_exists"


class SnippetConflict(RequestProblem):
    """Another edit or activation of the same snippet committed first; sending again is safe."""

    status_code = 409
    error_type = "snippet_conflict"


class MissingSnippets(RequestProblem):
    status_code = 422
    error_type = "missing_snippets"

    def __init__(self, name: str, labels: Sequence[str]) -> None:
        super().__init__(f"Pattern {name!r} expects snippets for: {', '.join(labels)}")
        self.labels = list(labels)

    def details(self) -> dict[str, Any]:
        return {"labels": self.labels}


class InvalidSnippetLabels(RequestProblem):
    status_code = 422
    error_type = "invalid_snippet_labels"

    def __init__(self, labels: Sequence[str]) -> None:
        super().__init__(
            "Snippet labels must be upper-case names such as PERSONA or TONE_OF_VOICE "
            f"(^[A-Z][A-Z0-9_]*$); not: {', '.join(repr(label) for label in labels)}"
        )
        self.labels = list(labels)

    def details(self) -> dict[str, Any]:
        return {"labels": self.labels}


class InvalidConversation(RequestProblem):
    """A conversation whose parts are each well formed but do not fit together (a tool result
    answering no call, arguments that are not JSON, a tool schema that is not one); `param`
    names the field, as the chat doors' clients expect."""

    status_code = 422
    error_type = "invalid_conversation"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param

    def details(self) -> dict[str, Any]:
        return {"param": self.param} if self.param else {}


class UnsupportedParameter(RequestProblem):
    """A parameter that would change the answer and that the gateway or the chosen provider
    cannot honour: refused, never dropped."""

    status_code = 422
    error_type = "unsupported_parameter"

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"`{param}`: {message}")
        self.param = param

    def details(self) -> dict[str, Any]:
        return {"param": self.param}


class Shortfall(str):
    """One thing a model lacks, in words for a person; `kind` says which (a capability such as
    `tools`, `context`, `output_limit`, `param`) and `param` the request field behind it, so a
    door can name the field as its clients expect."""

    kind: str
    param: str | None

    def __new__(cls, text: str, *, kind: str, param: str | None = None) -> Self:
        made = super().__new__(cls, text)
        made.kind, made.param = kind, param
        return made


class CapabilityMissing(RequestProblem):
    status_code = 422
    error_type = "capability_missing"

    def __init__(self, model: str, missing: Sequence[str]) -> None:
        super().__init__(
            f"Model {model!r} cannot serve this request: {'; '.join(missing)}. "
            "Choose a capable model or configure GENAI_CAPABLE_FALLBACK_MODELS."
        )
        self.model = model
        self.missing = [str(item) for item in missing]
        self.shortfalls = [item for item in missing if isinstance(item, Shortfall)]

    def details(self) -> dict[str, Any]:
        return {"model": self.model, "missing": self.missing}


class InvalidPatternTests(RequestProblem):
    """A pattern's test cases cannot be read: each problem is `FILE:LINE: problem`, so an author
    goes straight to the line (a YAML syntax error, an unknown key, a bad regex or schema)."""

    status_code = 422
    error_type = "invalid_pattern_tests"

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)

    def details(self) -> dict[str, Any]:
        return {"problems": self.problems}


class StoreUnavailable(GenAIError):
    status_code = 503
    error_type = "store_unavailable"


class QuotaStoreUnavailable(StoreUnavailable):
    """The budget and rate counters cannot be reached and GENAI_QUOTAS__ON_STORE_ERROR is
    `closed`: a limited key is refused rather than allowed to spend unchecked."""

    error_type = "quota_store_unavailable"


class Overloaded(GenAIError):
    """Every slot is busy and the wait queue is full: shed at once rather than pile up."""

    status_code = 503
    error_type = "overloaded"

    def __init__(self, message: str, *, retry_after: float = 1.0, limit: str = "global") -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit

    def details(self) -> dict[str, Any]:
        return {"limit": self.limit, "retry_after": self.retry_after}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, math.ceil(self.retry_after)))}


class DeadlineExceeded(GenAIError):
    """The request's total deadline (configured, or shortened by `x-genai-deadline-ms`) passed."""

    status_code = 504
    error_type = "deadline_exceeded"

    def __init__(self, message: str, *, deadline_ms: float) -> None:
        super().__init__(message)
        self.deadline_ms = deadline_ms

    def details(self) -> dict[str, Any]:
        return {"deadline_ms": self.deadline_ms}


class ProviderError(GenAIError):
    """A failure at or on the way to the upstream provider."""

    status_code = 502
    error_type = "upstream_error"

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        upstream_status: int | None = None,
        upstream_request_id: str | None = None,
        upstream_code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.upstream_status = upstream_status
        self.upstream_request_id = upstream_request_id
        # The provider's own machine-readable code (OpenAI's `error.code`), when it gave one.
        self.upstream_code = upstream_code

    def details(self) -> dict[str, Any]:
        found = {
            "provider": self.provider,
            "upstream_status": self.upstream_status,
            "upstream_request_id": self.upstream_request_id,
            "upstream_code": self.upstream_code,
        }
        return {key: value for key, value in found.items() if value is not None}


class ProviderUnavailable(ProviderError):
    status_code = 503
    error_type = "provider_unavailable"


class UpstreamRateLimited(ProviderError):
    status_code = 429
    error_type = "rate_limited"

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None,
        provider: str,
        upstream_status: int | None = None,
        upstream_request_id: str | None = None,
    ) -> None:
        super().__init__(
            message,
            provider=provider,
            upstream_status=upstream_status,
            upstream_request_id=upstream_request_id,
        )
        self.retry_after = retry_after

    def details(self) -> dict[str, Any]:
        found = super().details()
        if self.retry_after is not None:
            found["retry_after"] = self.retry_after
        return found

    def headers(self) -> dict[str, str]:
        if self.retry_after is None:
            return {}
        return {"Retry-After": str(math.ceil(self.retry_after))}


class UpstreamRejected(ProviderError):
    status_code = 422
    error_type = "upstream_rejected"


class UpstreamAuthFailed(ProviderError):
    status_code = 502
    error_type = "upstream_auth_failed"


class UpstreamError(ProviderError):
    status_code = 502
    error_type = "upstream_error"


class UpstreamTimeout(ProviderError):
    status_code = 504
    error_type = "upstream_timeout"


class StreamInterrupted(ProviderError):
    """A stream that stopped without the provider's finish marker: a cut answer, not a short one."""

    status_code = 502
    error_type = "stream_interrupted"


class AnswerTooLarge(ProviderError):
    """The provider sent more than GENAI_UPSTREAM__MAX_ANSWER_BYTES: the read stopped there, so
    no provider (or something posing as one) can fill the process's memory. Not retried."""

    status_code = 502
    error_type = "answer_too_large"

    def __init__(
        self, provider: str, *, limit: int, upstream_request_id: str | None = None
    ) -> None:
        super().__init__(
            f"{provider} sent an answer over {limit} bytes "
            "(GENAI_UPSTREAM__MAX_ANSWER_BYTES); it was cut off and not returned",
            provider=provider,
            upstream_request_id=upstream_request_id,
        )
        self.limit = limit

    def details(self) -> dict[str, Any]:
        return {**super().details(), "max_answer_bytes": self.limit}


class StructuredOutputInvalid(ProviderError):
    """The model's answers never satisfied the output schema within the repair budget."""

    status_code = 502
    error_type = "structured_output_invalid"

    def __init__(
        self, message: str, *, provider: str, attempts: int, issues: dict[str, Any]
    ) -> None:
        super().__init__(message, provider=provider)
        self.attempts = attempts
        self.issues = issues

    def details(self) -> dict[str, Any]:
        return {**super().details(), "attempts": self.attempts, "issues": self.issues}


# Webhooks: the delivery log (app/api/webhooks.py).
class DeliveryNotFound(RequestProblem):
    status_code = 404
    error_type = "delivery_not_found"

    def __init__(self, delivery_id: int) -> None:
        super().__init__(
            f"No webhook delivery with id {delivery_id}. GET /v1/webhooks/deliveries lists them."
        )
        self.delivery_id = delivery_id

    def details(self) -> dict[str, Any]:
        return {"delivery_id": self.delivery_id}


class InvalidCursor(RequestProblem):
    """A page cursor is opaque: only a `next_cursor` the service gave, passed back unchanged,
    says where the next page starts."""

    status_code = 422
    error_type = "invalid_cursor"

    def __init__(self) -> None:
        super().__init__(
            "The cursor is not one this service gave; pass `next_cursor` from the previous page "
            "unchanged, or leave `cursor` out for the newest page."
        )


class DeliveryNotRetriable(RequestProblem):
    """Only a failed delivery is retried: a pending one is still being tried, a delivered one
    arrived (emit the event again to send it anew)."""

    status_code = 409
    error_type = "delivery_not_retriable"

    def __init__(self, delivery_id: int, status: str) -> None:
        super().__init__(
            f"Webhook delivery {delivery_id} is {status}; only a failed delivery can be retried."
        )
        self.delivery_id = delivery_id
        self.status = status

    def details(self) -> dict[str, Any]:
        return {"delivery_id": self.delivery_id, "status": self.status}


class WebhooksNotConfigured(RequestProblem):
    status_code = 409
    error_type = "webhooks_not_configured"

    def __init__(self) -> None:
        super().__init__(
            "No webhook receiver is configured: set GENAI_WEBHOOKS__URLS and "
            "GENAI_WEBHOOKS__SECRET."
        )


class AuditChainDisabled(RequestProblem):
    status_code = 409
    error_type = "audit_chain_disabled"

    def __init__(self) -> None:
        super().__init__(
            "The audit chain is off (GENAI_AUDIT__CHAIN_ENABLED=false): there is nothing to "
            "verify; turn it on to chain every finished job."
        )


class ConfigurationError(Exception):
    """A setting is wrong or a required service is unreachable at start: one line for operators."""

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(f"{setting}: {problem}")
        self.setting = setting
        self.problem = problem


class ConfigurationProblems(ConfigurationError):
    """Several settings wrong at once (a config file is checked whole): one line per problem."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        if not problems:
            raise ValueError("ConfigurationProblems needs at least one problem")
        super().__init__(*problems[0])
        self.problems = list(problems)

    def __str__(self) -> str:
        return "\n".join(f"{setting}: {problem}" for setting, problem in self.problems)


def error_types() -> list[str]:
    """Every `error.type` the service can answer with, sorted: the OpenAPI document's enum.

    Walks the hierarchy rather than listing names, so a new error class cannot be left out;
    classes defined outside the service (a test's own subclass) are not part of the contract.
    """
    found: set[str] = set()
    pending: list[type[GenAIError]] = [GenAIError]
    while pending:
        cls = pending.pop()
        if cls.__module__.split(".", 1)[0] == "app":
            found.add(cls.error_type)
        pending.extend(cls.__subclasses__())
    return sorted(found)
