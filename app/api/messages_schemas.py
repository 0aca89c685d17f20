"""The Anthropic Messages wire format: what `POST /v1/messages` reads and writes.

Requests are read by these models (so the OpenAPI document states every shape) and turned into
the gateway's conversation by `app.dialects.anthropic`. Blocks the gateway cannot carry to every
provider (documents, search results, server tools and their results) are refused by name. Fields
that tune delivery or label the request (`metadata`, `service_tier`, `container`, `speed`,
`inference_geo`, `diagnostics`…) are accepted and ignored; unknown top-level fields too, named in
the `x-genai-ignored-params` header, as at the OpenAI door.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat

from app.api.chat_schemas import CHAT_MODEL
from app.schemas import JSON_INTEGER, Provenance
from app.schemas.base import SafeInput
from app.schemas.conversation import MAX_TOOLS, TOOL_CALL_ID, TOOL_NAME
from app.schemas.envelope import DoorParsed, DoorSignature

IGNORED = (
    "metadata",
    "service_tier",
    "container",
    "speed",
    "inference_geo",
    "diagnostics",
    "top_k",
    "cache_control",
    "user_profile_id",
    "workspace_id",
)


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AnthropicCacheControl(_Wire):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | None = None


class AnthropicTextBlock(_Wire):
    type: Literal["text"]
    text: str
    cache_control: AnthropicCacheControl | None = None
    citations: list[dict[str, Any]] | None = Field(default=None, description="Ignored.")


class AnthropicBase64Source(_Wire):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class AnthropicURLSource(_Wire):
    type: Literal["url"]
    url: str = Field(pattern=r"^https?://")


class AnthropicImageBlock(_Wire):
    type: Literal["image"]
    source: Annotated[AnthropicBase64Source | AnthropicURLSource, Field(discriminator="type")]
    cache_control: AnthropicCacheControl | None = None


class AnthropicToolUseBlock(_Wire):
    type: Literal["tool_use"]
    id: str = Field(pattern=TOOL_CALL_ID)
    name: str = Field(pattern=TOOL_NAME)
    input: dict[str, Any]
    cache_control: AnthropicCacheControl | None = None


class AnthropicToolResultBlock(_Wire):
    type: Literal["tool_result"]
    tool_use_id: str = Field(pattern=TOOL_CALL_ID)
    content: str | list[AnthropicTextBlock] | None = None
    is_error: StrictBool | None = None
    cache_control: AnthropicCacheControl | None = None


class AnthropicThinkingBlock(_Wire):
    type: Literal["thinking"]
    thinking: str
    signature: str


class AnthropicRedactedThinkingBlock(_Wire):
    type: Literal["redacted_thinking"]
    data: str


AnthropicContentBlock = Annotated[
    AnthropicTextBlock
    | AnthropicImageBlock
    | AnthropicToolUseBlock
    | AnthropicToolResultBlock
    | AnthropicThinkingBlock
    | AnthropicRedactedThinkingBlock,
    Field(discriminator="type"),
]


class AnthropicInputMessage(_Wire):
    role: Literal["user", "assistant", "system"]
    content: str | list[AnthropicContentBlock]


class AnthropicInputSchema(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["object"]


class AnthropicTool(_Wire):
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = Field(default=None, max_length=100_000)
    input_schema: AnthropicInputSchema
    type: Literal["custom"] | None = Field(
        default=None, description="Custom tools only: server tools are not served."
    )
    strict: StrictBool | None = None
    cache_control: AnthropicCacheControl | None = None


class AnthropicToolChoice(_Wire):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(default=None, pattern=TOOL_NAME)
    disable_parallel_tool_use: StrictBool | None = None


class AnthropicThinking(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] | None = None


class AnthropicJSONOutputFormat(_Wire):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class AnthropicOutputConfig(_Wire):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: AnthropicJSONOutputFormat | None = None


class AnthropicMessagesRequest(SafeInput):
    """`POST /v1/messages` (and `/v1/messages/count_tokens`, without `max_tokens`)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "model": "anthropic/claude-sonnet-4-5",
                    "max_tokens": 512,
                    "system": "Answer in one sentence.",
                    "messages": [{"role": "user", "content": "What is provenance?"}],
                }
            ]
        },
    )

    model: str = Field(
        pattern=CHAT_MODEL,
        description="`provider/model`, a bare model id the alias map resolves "
        "(`claude-sonnet-4-5`), or `pattern/<name>`.",
    )
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER]
    messages: list[AnthropicInputMessage] = Field(min_length=1, max_length=10_000)
    system: str | list[AnthropicTextBlock] | None = None
    tools: list[AnthropicTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: AnthropicToolChoice | None = None
    stop_sequences: list[Annotated[str, Field(max_length=1000)]] | None = Field(
        default=None, max_length=8
    )
    temperature: StrictFloat | None = Field(
        default=None, ge=0, le=2, description="Sent to providers that take it."
    )
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1)
    stream: StrictBool = False
    thinking: AnthropicThinking | None = Field(
        default=None,
        description="Forwarded to Anthropic models; to others, `disabled` turns reasoning off.",
    )
    output_config: AnthropicOutputConfig | None = None
    variables: dict[str, Any] = Field(
        default_factory=dict, description="A pattern's variables (only with `pattern/<name>`)."
    )
    cache: StrictBool | None = None
    # Accepted and ignored (IGNORED).
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    container: Any = None
    speed: str | None = None
    inference_geo: str | None = None
    diagnostics: dict[str, Any] | None = None
    top_k: Annotated[int, Field(ge=0), JSON_INTEGER] | None = None
    cache_control: AnthropicCacheControl | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None


class AnthropicCountTokensRequest(AnthropicMessagesRequest):
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER] = 1


class AnthropicCacheCreation(BaseModel):
    ephemeral_5m_input_tokens: int
    ephemeral_1h_input_tokens: int


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_creation: AnthropicCacheCreation | None = None


AnthropicStopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class AnthropicMessage(BaseModel):
    """Anthropic's `message`, plus the gateway's `provenance` and `job_id`."""

    id: str = Field(description="`msg_` + the request id.")
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str = Field(description="The `model` as requested; what answered is in provenance.")
    content: list[dict[str, Any]] = Field(
        description="text, tool_use, thinking and redacted_thinking blocks."
    )
    stop_reason: AnthropicStopReason
    stop_sequence: str | None = None
    usage: AnthropicUsage
    provenance: Provenance
    job_id: str = Field(description="The audit record: GET /v1/jobs/{job_id}.")
    signature: DoorSignature = None
    parsed: DoorParsed = None


class AnthropicTokenCount(BaseModel):
    input_tokens: int


AnthropicErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "overloaded_error",
    "timeout_error",
]


class AnthropicErrorInfo(BaseModel):
    """Anthropic's error, plus the gateway's own `gateway_type` and its details."""

    model_config = ConfigDict(extra="allow")
    type: AnthropicErrorType
    message: str
    gateway_type: str = Field(description="The gateway's own error type (ErrorType).")


class AnthropicErrorBody(BaseModel):
    """Every error at the Anthropic door, in Anthropic's shape."""

    type: Literal["error"] = "error"
    error: AnthropicErrorInfo
    request_id: str | None = None
