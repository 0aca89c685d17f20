"""The OpenAI Chat Completions wire format: what `POST /v1/chat/completions` reads and writes.

Requests are read by these models (so the OpenAPI document states every shape) and then turned
into the gateway's conversation by `app.dialects.openai`. Unknown top-level fields are accepted
and ignored, and named in the `x-genai-ignored-params` response header: a new OpenAI field must
not break a client just because the gateway is older than its SDK. Inside messages and tools,
where an unknown field would change what the model is shown, they are refused. Known fields are
honoured, ignored (`IGNORED`: they label the request or tune delivery, never the answer) or
refused when they would change the answer and cannot be honoured (`app.api.conversation`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat

from app.schemas import INT32_MAX, INT32_MIN, JSON_INTEGER, Provenance, ReasoningEffort, Signature
from app.schemas.base import SafeInput
from app.schemas.conversation import FORMAT_NAME, MAX_TOOLS, TOOL_CALL_ID, TOOL_NAME
from app.schemas.envelope import DoorParsed, DoorSignature

# Accepted, never sent upstream: they identify the caller to OpenAI, tune its caching or billing
# (the gateway's account, the gateway's choice) or its delivery, not the answer.
IGNORED = (
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "prompt_cache_options",
    "metadata",
    "store",
    "service_tier",
    "prediction",
)

# `provider/model`, `pattern/<name>`, or a bare model id the alias map resolves (`gpt-4o-mini`).
CHAT_MODEL = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,254}$"


def _is_none(value: Any) -> bool:
    return value is None


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatTextPart(_Wire):
    type: Literal["text"]
    text: str


class ChatImageURL(_Wire):
    url: str = Field(
        pattern=r"^(https?://|data:image/[A-Za-z0-9.+-]+;base64,)",
        description="An http(s) URL the provider fetches, or a data:image/…;base64 URI. The "
        "gateway never fetches a URL itself.",
    )
    detail: Literal["auto", "low", "high"] | None = None


class ChatImagePart(_Wire):
    type: Literal["image_url"]
    image_url: ChatImageURL


class ChatRefusalPart(_Wire):
    type: Literal["refusal"]
    refusal: str


ChatContentPart = Annotated[
    ChatTextPart | ChatImagePart | ChatRefusalPart, Field(discriminator="type")
]


class ChatFunctionCall(_Wire):
    name: str = Field(pattern=TOOL_NAME)
    arguments: str = Field(description="The arguments, a JSON object as text.")


class ChatToolCall(_Wire):
    id: str = Field(pattern=TOOL_CALL_ID)
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class ChatThinkingBlock(_Wire):
    """Anthropic reasoning carried through an OpenAI-shaped conversation (LiteLLM's name)."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: str | None = Field(default=None, exclude_if=_is_none)
    signature: str | None = Field(default=None, exclude_if=_is_none)
    data: str | None = Field(default=None, exclude_if=_is_none)


class ChatMessage(_Wire):
    """One message. `developer` is a system message; `name` is accepted and ignored."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ChatContentPart] | None = Field(
        default=None,
        description="Text, or parts: text and image_url (user), text and refusal (assistant).",
    )
    name: str | None = Field(default=None, description="Accepted and ignored.")
    tool_calls: list[ChatToolCall] | None = Field(default=None, description="Assistant only.")
    tool_call_id: str | None = Field(
        default=None, pattern=TOOL_CALL_ID, description="Tool only: the call answered."
    )
    refusal: str | None = Field(default=None, description="Accepted and ignored.")
    thinking_blocks: list[ChatThinkingBlock] | None = Field(
        default=None,
        description="Assistant only: reasoning blocks returned by the gateway, sent back as-is.",
    )


class ChatFunctionDefinition(_Wire):
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = Field(default=None, max_length=100_000)
    parameters: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema of an object (default: no arguments)."
    )
    strict: StrictBool | None = None


class ChatFunctionTool(_Wire):
    type: Literal["function"]
    function: ChatFunctionDefinition


class ChatNamedFunction(_Wire):
    name: str = Field(pattern=TOOL_NAME)


class ChatNamedToolChoice(_Wire):
    type: Literal["function"]
    function: ChatNamedFunction


class ChatJSONSchema(_Wire):
    name: str = Field(pattern=FORMAT_NAME)
    description: str | None = Field(default=None, max_length=10_000)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ChatTextFormat(_Wire):
    type: Literal["text"]


class ChatJSONObjectFormat(_Wire):
    type: Literal["json_object"]


class ChatJSONSchemaFormat(_Wire):
    type: Literal["json_schema"]
    json_schema: ChatJSONSchema


ChatResponseFormat = Annotated[
    ChatTextFormat | ChatJSONObjectFormat | ChatJSONSchemaFormat, Field(discriminator="type")
]


class StreamOptions(_Wire):
    include_usage: StrictBool = False
    include_obfuscation: StrictBool | None = Field(default=None, description="Ignored.")


Bounded = Annotated[int, Field(ge=1, le=1_000_000), JSON_INTEGER]


class ChatCompletionRequest(SafeInput):
    """`POST /v1/chat/completions`; `variables` and `cache` are the gateway's own (the SDK's
    `extra_body`). Unknown fields are ignored and named in `x-genai-ignored-params`."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            # `variables` belong to a pattern: with any other model they must be empty.
            "if": {"properties": {"model": {"pattern": "^pattern/"}}},
            "else": {"properties": {"variables": {"maxProperties": 0}}},
            "examples": [
                {
                    "model": "openai/gpt-4o-mini",
                    "messages": [
                        {"role": "system", "content": "Answer in one sentence."},
                        {"role": "user", "content": "What is provenance?"},
                    ],
                },
                {
                    "model": "pattern/summarize",
                    "messages": [{"role": "user", "content": "Quarterly revenue rose 12%..."}],
                    "variables": {"max_words": 60, "audience": "executives"},
                },
            ],
        },
    )

    model: str = Field(
        pattern=CHAT_MODEL,
        description="`provider/model`, a bare model id the alias map resolves (`gpt-4o-mini`), "
        "or `pattern/<name>` (that pattern, with `variables`).",
    )
    messages: list[ChatMessage] = Field(min_length=1, max_length=10_000)
    variables: dict[str, Any] = Field(
        default_factory=dict, description="A pattern's variables (only with `pattern/<name>`)."
    )
    cache: StrictBool | None = Field(
        default=None,
        description="true: use the response cache; false: bypass it; unset: the pattern decides "
        "(a direct call is not cached).",
    )
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    tools: list[ChatFunctionTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | ChatNamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    response_format: ChatResponseFormat | None = None
    # Strict: a JSON boolean is not a number here (`"max_tokens": true` is refused, not 1). The
    # bounds are ModelParams' (app/schemas), so the document states what the pipeline takes.
    temperature: StrictFloat | None = Field(default=None, ge=0, le=2)
    top_p: StrictFloat | None = Field(default=None, gt=0, le=1)
    max_tokens: Bounded | None = None
    max_completion_tokens: Bounded | None = Field(
        default=None, description="Wins over `max_tokens` when both are sent."
    )
    stop: (
        Annotated[str, Field(max_length=1000)]
        | Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=8)]
        | None
    ) = None
    seed: Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX), JSON_INTEGER] | None = None
    presence_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: StrictFloat | None = Field(default=None, ge=-2, le=2)
    logit_bias: dict[str, Annotated[int, Field(ge=-100, le=100), JSON_INTEGER]] | None = Field(
        default=None, max_length=1024, description="OpenAI models only."
    )
    reasoning_effort: ReasoningEffort | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    n: Annotated[int, Field(ge=1, le=128), JSON_INTEGER] | None = Field(
        default=None, description="One choice per request: more is refused."
    )
    logprobs: StrictBool | None = Field(default=None, description="Refused when true.")
    top_logprobs: Annotated[int, Field(ge=0, le=20), JSON_INTEGER] | None = Field(
        default=None, description="Refused above 0."
    )
    modalities: list[Literal["text", "audio"]] | None = Field(
        default=None, description='Only ["text"] is served.'
    )
    # Accepted and ignored (IGNORED); typed loosely, as OpenAI keeps extending them.
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    store: StrictBool | None = None
    service_tier: str | None = None
    prediction: dict[str, Any] | None = None


class ChatResponseToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: ChatFunctionCall


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: None = None
    tool_calls: list[ChatResponseToolCall] | None = None
    thinking_blocks: list[ChatThinkingBlock] | None = None


OpenAIFinish = Literal["stop", "length", "content_filter", "tool_calls"]


class Choice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: OpenAIFinish
    logprobs: None = None


class PromptTokensDetails(BaseModel):
    cached_tokens: int | None = None
    cache_write_tokens: int | None = None


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int | None = None


class ChatUsage(BaseModel):
    """Token counts; 0 where the provider reported none (the OpenAI shape has no null)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: CompletionTokensDetails | None = None


class ChatCompletion(BaseModel):
    """OpenAI's `chat.completion`, plus the gateway's `provenance` and `job_id`."""

    id: str = Field(description="`chatcmpl-` + the request id.")
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str = Field(description="The `model` as requested; what answered is in provenance.")
    choices: list[Choice]
    usage: ChatUsage
    system_fingerprint: None = None
    provenance: Provenance
    job_id: str = Field(description="The audit record: GET /v1/jobs/{job_id}.")
    signature: DoorSignature = None
    parsed: DoorParsed = None


class ChatToolCallChunk(BaseModel):
    """A piece of a streamed tool call: the first names it (`id`, `function.name`)."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: dict[str, str]


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ChatToolCallChunk] | None = None
    reasoning_content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: ChunkDelta
    finish_reason: OpenAIFinish | None = None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of a streamed answer; the one with `finish_reason` carries
    `provenance` and `job_id`."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: ChatUsage | None = None
    provenance: Provenance | None = None
    job_id: str | None = None
    signature: Signature | None = None
    parsed: Any | None = None


class ModelEntry(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="0: a configured model has no creation time here.")
    owned_by: str = Field(description="The provider, or `gateway` for a pattern.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelEntry]
