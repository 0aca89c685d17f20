"""The conversation as the gateway carries it: messages of text and image parts, tool calls and
tool results, the tools offered and the output format asked for.

One shape for every door and every provider: the OpenAI and Anthropic doors parse their wire
formats into it, and each provider adapter writes it out in its own (`app/dialects/`). A field a
message does not use is left out when it is serialized, so a plain text message reads
`{"role", "content"}` exactly as it always has, in envelopes, audit records and cache keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import jsonschema_rs
from pydantic import ConfigDict, Field, StrictBool, field_validator, model_validator

from app.schemas.base import FrozenModel, is_empty, is_unset

# OpenAI's rule for function names widened to Anthropic's length; both refuse anything else.
TOOL_NAME = r"^[A-Za-z0-9_-]{1,128}$"
# What a tool call id may hold: the providers' own ids (`call_…`, `toolu_…`) and a client's.
TOOL_CALL_ID = r"^[A-Za-z0-9_.:-]{1,256}$"
FORMAT_NAME = r"^[A-Za-z0-9_-]{1,64}$"
# An image the provider fetches itself, or carried inline; never a URL the gateway would fetch.
IMAGE_URL = r"^(https?://|data:image/[A-Za-z0-9.+-]{1,40};base64,)"
MAX_TOOLS = 512
"""More tools than any provider accepts (OpenAI allows 128): a bigger list is a mistake."""
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def check_json_schema(schema: dict[str, Any], *, must_be_object: bool) -> dict[str, Any]:
    """`schema` itself when it is a valid JSON Schema (its `$schema` draft, else 2020-12); a
    ValueError naming the problem otherwise. Tool arguments are always an object, so their
    schema must say so. jsonschema-rs checks against the meta-schema in Rust: a request may
    carry hundreds of tool schemas, and the pure-Python check costs ~0.3 ms per property."""
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(part) for part in exc.instance_path) or "the schema"
        raise ValueError(f"not a valid JSON Schema at {where}: {exc.message[:200]}") from None
    except jsonschema_rs.ReferencingError:
        raise ValueError("its `$schema` names no JSON Schema draft the gateway knows") from None
    if must_be_object and schema.get("type", "object") != "object":
        raise ValueError('a tool\'s parameters must be an object schema ("type": "object")')
    return schema


class CacheControl(FrozenModel):
    """An Anthropic prompt-cache breakpoint; kept for Anthropic, left out for other providers."""

    type: Literal["ephemeral"] = "ephemeral"
    ttl: Literal["5m", "1h"] | None = Field(default=None, exclude_if=is_unset)


def _type_required(schema: dict[str, Any]) -> None:
    """A part's `type` has a default for code, but on the wire it picks the part (the union's
    discriminator), so the document says it is required."""
    schema["required"] = ["type", *schema.get("required", [])]


class TextPart(FrozenModel):
    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_type_required)

    type: Literal["text"] = "text"
    text: str
    cache_control: CacheControl | None = Field(default=None, exclude_if=is_unset)


class ImagePart(FrozenModel):
    """An image by reference: an https URL the provider fetches, or a `data:` URI. The gateway
    never fetches a URL itself."""

    model_config = ConfigDict(frozen=True, extra="forbid", json_schema_extra=_type_required)

    type: Literal["image"] = "image"
    url: str = Field(
        pattern=IMAGE_URL, description="An http(s) URL or a data:image/<type>;base64,… URI."
    )
    detail: Literal["auto", "low", "high"] | None = Field(default=None, exclude_if=is_unset)
    cache_control: CacheControl | None = Field(default=None, exclude_if=is_unset)


def is_data_image(url: str) -> bool:
    return url.startswith("data:image/")


Part = Annotated[TextPart | ImagePart, Field(discriminator="type")]


def arguments_text(value: Any) -> str:
    """A tool input object as the JSON text a ToolCall carries (compact, Unicode kept): how
    arguments that arrive as an object (Anthropic, Ollama) are written."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class ToolCall(FrozenModel):
    """A call the model asked for: `arguments` is the JSON text it wrote, kept byte for byte."""

    id: str = Field(pattern=TOOL_CALL_ID)
    name: str = Field(pattern=TOOL_NAME)
    arguments: str = Field(description="A JSON object, as text.")
    cache_control: CacheControl | None = Field(default=None, exclude_if=is_unset)


class ReasoningBlock(FrozenModel):
    """Provider-opaque reasoning that must go back unchanged with the next turn (Anthropic's
    `thinking` block with its signature, or its encrypted `redacted_thinking`)."""

    type: Literal["thinking", "redacted_thinking"]
    thinking: str | None = Field(default=None, exclude_if=is_unset)
    signature: str | None = Field(default=None, exclude_if=is_unset)
    data: str | None = Field(default=None, exclude_if=is_unset)


Role = Literal["system", "user", "assistant", "tool"]


class Message(FrozenModel):
    """One turn. `tool_calls` and `reasoning` belong to the assistant, `tool_call_id` and
    `is_error` to a tool result, images to the user."""

    role: Role
    content: str | list[Part] = ""
    tool_calls: list[ToolCall] = Field(default_factory=list, exclude_if=is_empty)
    tool_call_id: str | None = Field(default=None, pattern=TOOL_CALL_ID, exclude_if=is_unset)
    is_error: StrictBool | None = Field(default=None, exclude_if=is_unset)
    reasoning: list[ReasoningBlock] = Field(default_factory=list, exclude_if=is_empty)
    cache_control: CacheControl | None = Field(
        default=None,
        exclude_if=is_unset,
        description="A tool result's own cache breakpoint (Anthropic); parts carry their own.",
    )

    @field_validator("content")
    @classmethod
    def _canonical(cls, content: str | list[Part]) -> str | list[Part]:
        """One plain text part is the same as its text: written one way, so hashed one way."""
        if isinstance(content, list):
            if not content:
                return ""
            only = content[0]
            if len(content) == 1 and isinstance(only, TextPart) and only.cache_control is None:
                return only.text
        return content

    def role_problem(self) -> str | None:
        """Why this turn's fields do not fit its role, or None. A rule across fields, which a
        JSON Schema cannot state, so it is checked where a conversation is accepted (the doors,
        the preparer) and refused as `invalid_conversation` there."""
        if self.tool_calls and self.role != "assistant":
            return "only an assistant message has tool_calls"
        if self.reasoning and self.role != "assistant":
            return "only an assistant message has reasoning blocks"
        if (self.tool_call_id is None) == (self.role == "tool"):
            return "a tool message, and only a tool message, has a tool_call_id"
        if (self.is_error is not None or self.cache_control is not None) and self.role != "tool":
            return "only a tool message has is_error or its own cache_control"
        if self.role != "user" and any(isinstance(p, ImagePart) for p in self.parts):
            return "only a user message may hold images"
        return None

    @property
    def parts(self) -> list[TextPart | ImagePart]:
        if isinstance(self.content, str):
            return [TextPart(text=self.content)] if self.content else []
        return list(self.content)

    @property
    def text(self) -> str:
        """The text parts joined by newlines (images left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content if isinstance(part, TextPart))

    @property
    def plain(self) -> bool:
        """Text and nothing else: no image, no cache marker, no tool call or result."""
        if self.tool_calls or self.reasoning or self.role == "tool" or self.cache_control:
            return False
        return isinstance(self.content, str) or all(
            isinstance(part, TextPart) and part.cache_control is None for part in self.content
        )

    def with_text(self, text: str) -> Message:
        """The same turn with its text replaced (images and markers dropped): for folding."""
        return self.model_copy(update={"content": text})


class Tool(FrozenModel):
    """A function the model may call; `parameters` is the JSON Schema of its arguments."""

    name: str = Field(pattern=TOOL_NAME)
    description: str | None = Field(default=None, max_length=100_000, exclude_if=is_unset)
    parameters: dict[str, Any] = Field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    strict: StrictBool | None = Field(default=None, exclude_if=is_unset)
    cache_control: CacheControl | None = Field(default=None, exclude_if=is_unset)

    @field_validator("parameters")
    @classmethod
    def _schema(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        return check_json_schema(parameters, must_be_object=True)


class ToolChoice(FrozenModel):
    """auto: the model decides; none: no call; required: at least one call; tool: that one."""

    type: Literal["auto", "none", "required", "tool"]
    name: str | None = Field(default=None, pattern=TOOL_NAME, exclude_if=is_unset)

    @model_validator(mode="after")
    def _named_only_for_tool(self) -> ToolChoice:
        if (self.name is None) == (self.type == "tool"):
            raise ValueError("a tool choice names a tool exactly when its type is `tool`")
        return self


class ResponseFormat(FrozenModel):
    """JSON output: any object (`json_object`) or one that fits `json_schema`."""

    type: Literal["json_object", "json_schema"]
    name: str = Field(default="output", pattern=FORMAT_NAME)
    json_schema: dict[str, Any] | None = Field(default=None, exclude_if=is_unset)
    description: str | None = Field(default=None, max_length=10_000, exclude_if=is_unset)
    strict: StrictBool | None = Field(default=None, exclude_if=is_unset)

    @model_validator(mode="after")
    def _schema_for_json_schema(self) -> ResponseFormat:
        if (self.json_schema is None) == (self.type == "json_schema"):
            raise ValueError("a json_schema format, and only that one, carries a schema")
        if self.json_schema is not None:
            check_json_schema(self.json_schema, must_be_object=False)
        return self

    @property
    def schema_to_check(self) -> dict[str, Any]:
        """What an answer is validated against: the schema, or any JSON object."""
        return self.json_schema if self.json_schema is not None else {"type": "object"}


class ToolSet(FrozenModel):
    """The tools offered with one call, how the model may use them, and whether it may call
    several at once (None: the provider's default)."""

    tools: list[Tool] = Field(min_length=1, max_length=MAX_TOOLS)
    choice: ToolChoice | None = Field(default=None, exclude_if=is_unset)
    parallel: StrictBool | None = Field(default=None, exclude_if=is_unset)

    @model_validator(mode="after")
    def _consistent(self) -> ToolSet:
        names = [tool.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError("tool names must be unique")
        named = self.choice.name if self.choice is not None else None
        if named is not None and named not in names:
            raise ValueError(f"tool_choice names {named!r}, which is not among the tools")
        return self


@dataclass(frozen=True, slots=True)
class TurnProblem:
    """Where a conversation check failed: the turn, the field path inside it, and why."""

    index: int
    where: str
    problem: str


def conversation_problems(messages: Sequence[Message]) -> list[TurnProblem]:
    """Turns that do not fit together: fields a role does not have, a tool result for no
    earlier call, a call id used twice, arguments that are not a JSON object."""
    found: list[TurnProblem] = []
    called: set[str] = set()
    for index, message in enumerate(messages):
        role_problem = message.role_problem()
        if role_problem is not None:
            found.append(TurnProblem(index, "role", role_problem))
        for number, call in enumerate(message.tool_calls):
            if call.id in called:
                found.append(TurnProblem(index, f"tool_calls[{number}].id", "is used twice"))
            called.add(call.id)
            if not _json_object(call.arguments):
                found.append(
                    TurnProblem(
                        index,
                        f"tool_calls[{number}].function.arguments",
                        "is not a JSON object",
                    )
                )
        if message.tool_call_id is not None and message.tool_call_id not in called:
            found.append(
                TurnProblem(
                    index,
                    "tool_call_id",
                    f"answers {message.tool_call_id!r}, which no earlier assistant message called",
                )
            )
    return found


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
        return False
