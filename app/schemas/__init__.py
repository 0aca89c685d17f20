"""Every data shape that crosses a boundary, defined once and imported everywhere else.

One module per audience, all re-exported here (`from app.schemas import X`):

    base.py          safe-input rules, strict integers, frozen models: the ground of the others
    conversation.py  messages, parts, tool calls, tools and output formats
    requests.py      what a caller sends: RenderRequest, TemplateRef, ModelParams
    envelope.py      what a completion answers: CompletionEnvelope, Provenance, ModelChoice,
                     Usage, CallAttempt, the structured-output outcome
    jobs.py          the audit trail as read back: JobRecord, ReplayResult, DriftReport
    resources.py     what operators manage: patterns, templates, snippets, API keys
    errors.py        the one error body: ErrorBody, ErrorInfo, FieldProblem
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
    JobRecord,
    RecordedParams,
    RecordedPrompt,
    ReplayResult,
    StoredParams,
    StructuredAttempt,
)
from app.schemas.requests import (
    ModelParams,
    ReasoningEffort,
    RenderRequest,
    TemplateRef,
)
from app.schemas.resources import (
    ApiKeyCreate,
    ApiKeyCreated,
    ApiKeyInfo,
    KeyScope,
    PatternDetail,
    PatternSummary,
    Snippet,
    SnippetIn,
    TemplateCreate,
    TemplateVersion,
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
    "ApiKeyCreate",
    "ApiKeyCreated",
    "ApiKeyInfo",
    "CacheControl",
    "CallAttempt",
    "CompletionEnvelope",
    "CompletionResponse",
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
    "JobRecord",
    "KeyScope",
    "Message",
    "MissingValue",
    "ModelChoice",
    "ModelParams",
    "ModelSource",
    "Part",
    "PatternDetail",
    "PatternSummary",
    "Provenance",
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
    "StoredParams",
    "StructuredAttempt",
    "StructuredOutcome",
    "TemplateCreate",
    "TemplateRef",
    "TemplateVersion",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolSet",
    "Usage",
    "ValidationIssues",
    "current_limits",
    "is_snippet_label",
    "unsafe_input",
]
