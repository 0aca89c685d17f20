"""Every data shape that crosses a boundary, defined once and imported everywhere else.

One module per audience, all re-exported here (`from app.schemas import X`):

    base.py          safe-input rules, strict integers, frozen models: the ground of the others
    conversation.py  messages, parts, tool calls, tools and output formats
    requests.py      what a caller sends: RenderRequest, TemplateRef, ModelParams
    envelope.py      what a completion answers: CompletionEnvelope, Provenance, ModelChoice,
                     Usage, CallAttempt, the structured-output outcome
    jobs.py          the audit trail as read back: JobRecord, ReplayResult, DriftReport
    resources.py     what operators manage: patterns, templates, snippets
    pattern_tests.py the test cases a pattern or template version carries
    keys.py          API keys and teams: scopes, budgets, rate limits, allowlists, spend
    usage.py         usage and cost over a window, grouped: UsageQuery, UsageReport
    errors.py        the one error body: ErrorBody, ErrorInfo, FieldProblem
    chain.py         the audit chain as verified: ChainReport, ChainProblem
"""

from __future__ import annotations

from app.schemas.base import (
    INT32_MAX,
    INT32_MIN,
    JOB_ID,
    JSON_INTEGER,
    MAX_JSON_DEPTH,
    MODEL,
    SLUG,
    SNIPPET_LABEL,
    FrozenModel,
    InputModel,
    current_limits,
    is_snippet_label,
    unsafe_input,
)
from app.schemas.chain import (
    AuditCounters,
    AuditStatus,
    ChainProblem,
    ChainProblemKind,
    ChainReport,
    CheckpointSummary,
)
from app.schemas.conversation import (
    CacheControl,
    ImagePart,
    Message,
    Part,
    ReasoningBlock,
    ResponseFormat,
    Role,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    ToolSet,
)
from app.schemas.envelope import (
    CallAttempt,
    CompletionEnvelope,
    CompletionResponse,
    FinishReason,
    InvalidValue,
    MissingValue,
    ModelChoice,
    ModelSource,
    Provenance,
    RenderedPrompt,
    RenderResult,
    Signature,  # signed envelopes (issue 20)
    SigningKey,
    SigningKeys,
    SnippetUse,
    StructuredOutcome,
    Usage,
    ValidationIssues,
)
from app.schemas.errors import (
    ErrorBody,
    ErrorInfo,
    FieldProblem,
)
from app.schemas.jobs import (
    DriftFinding,
    DriftReport,
    HashCheck,
    JobPage,
    JobRecord,
    JobStatus,
    JobSummary,
    OutcomeStatus,
    RecordedParams,
    RecordedPrompt,
    ReplayResult,
    SourceKind,
    StoredParams,
    StructuredAttempt,
)
from app.schemas.keys import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    ApiKeyUpdate,
    Budget,
    BudgetWindow,
    KeyScope,
    KeyStatus,
    Limits,
    LimitStatus,
    RateUse,
    TeamCreate,
    TeamInfo,
    TeamUpdate,
    WindowSpend,
)
from app.schemas.pattern_tests import CaseExpectations, PatternTestCase
from app.schemas.requests import (
    ModelParams,
    ReasoningEffort,
    RenderRequest,
    TemplateRef,
)
from app.schemas.resources import (
    PatternDetail,
    PatternSummary,
    Snippet,
    SnippetIn,
    SnippetVersions,
    TemplateCreate,
    TemplateVersion,
)
from app.schemas.usage import (
    USAGE_DIMENSIONS,
    UsageDimension,
    UsageGroup,
    UsageQuery,
    UsageReport,
    UsageTotals,
    UsageWindow,
)
from app.schemas.webhooks import (  # webhooks
    DeliveryStatus,
    WebhookDeliveryInfo,
    WebhookDeliveryList,
    WebhookTestSent,
)

__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "JOB_ID",
    "JSON_INTEGER",
    "MAX_JSON_DEPTH",
    "MODEL",
    "SLUG",
    "SNIPPET_LABEL",
    "USAGE_DIMENSIONS",
    "ApiKeyCreate",
    "ApiKeyCreated",
    "ApiKeyInfo",
    "ApiKeyUpdate",
    "Budget",
    "BudgetWindow",
    "CacheControl",
    "CallAttempt",
    "CaseExpectations",
    "CompletionEnvelope",
    "CompletionResponse",
    "DeliveryStatus",
    "DriftFinding",
    "DriftReport",
    "ErrorBody",
    "ErrorInfo",
    "FieldProblem",
    "FinishReason",
    "FrozenModel",
    "HashCheck",
    "ImagePart",
    "InputModel",
    "InvalidValue",
    "JobPage",
    "JobRecord",
    "JobStatus",
    "JobSummary",
    "KeyScope",
    "KeyStatus",
    "LimitStatus",
    "Limits",
    "Message",
    "MissingValue",
    "ModelChoice",
    "ModelParams",
    "ModelSource",
    "OutcomeStatus",
    "Part",
    "PatternDetail",
    "PatternSummary",
    "PatternTestCase",
    "Provenance",
    "RateUse",
    "ReasoningBlock",
    "ReasoningEffort",
    "RecordedParams",
    "RecordedPrompt",
    "RenderRequest",
    "RenderResult",
    "RenderedPrompt",
    "ReplayResult",
    "ResponseFormat",
    "Role",
    "Snippet",
    "SnippetIn",
    "SnippetUse",
    "SnippetVersions",
    "SourceKind",
    "StoredParams",
    "StructuredAttempt",
    "StructuredOutcome",
    "TeamCreate",
    "TeamInfo",
    "TeamUpdate",
    "TemplateCreate",
    "TemplateRef",
    "TemplateVersion",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolSet",
    "Usage",
    "UsageDimension",
    "UsageGroup",
    "UsageQuery",
    "UsageReport",
    "UsageTotals",
    "UsageWindow",
    "ValidationIssues",
    "WebhookDeliveryInfo",
    "WebhookDeliveryList",
    "WebhookTestSent",
    "WindowSpend",
    "current_limits",
    "is_snippet_label",
    "unsafe_input",
]

# --- template labels (release flow) ---
from app.schemas.labels import (
    PRODUCTION,
    RESERVED_LABELS,
    LabelHistory,
    LabelMoveIn,
    LabelMoveRecord,
    SplitShare,
    TemplateLabelInfo,
    TemplateLabelList,
)

__all__ += [
    "PRODUCTION",
    "RESERVED_LABELS",
    "LabelHistory",
    "LabelMoveIn",
    "LabelMoveRecord",
    "SplitShare",
    "TemplateLabelInfo",
    "TemplateLabelList",
]

# --- signed envelopes (issue 20) ---
__all__ += ["Signature", "SigningKey", "SigningKeys"]

# --- the admin event log (issue 20) ---
from app.schemas.events import ActorKind, AdminEvent, AdminEventPage  # noqa: E402

__all__ += ["ActorKind", "AdminEvent", "AdminEventPage"]
__all__ += ["ChainProblem", "ChainProblemKind", "ChainReport"]
__all__ += ["AuditCounters", "AuditStatus", "CheckpointSummary"]
