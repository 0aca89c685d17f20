"""The built-in pass-through source `builtin:chat`: a conversation sent as the caller wrote it.

A call through one of the chat doors (`POST /v1/chat/completions`, `POST /v1/messages`) with a
`provider/model` names no pattern, yet it must go through the same pipeline as every completion
(audit record, provenance, cache, fallbacks, limits, cost). So the conversation travels as an
ordinary request for this source. Two versions of the mapping exist, each hashed as the source's
content hash; the variables say which one they use (`"version": 2`), so a record of either replays.

    v1  variables = {"system": "<text>", "messages": [<earlier user/assistant text turns>]}
        system prompt = variables.system; messages = variables.messages, then the user prompt.
    v2  variables = {"version": 2, "messages": [<turns>], "tools": {…}, "response_format": {…}}
        no system prompt of its own: system turns stay where the caller put them; messages =
        variables.messages (any role; text and image parts, tool calls, tool results), then the
        user prompt when it is not empty, then the request's continuation. Tools and the output
        format are offered as given.

Provenance proves what was sent: `variables_hash` covers every turn before the user prompt and the
tools and format offered, `user_prompt_hash` the user prompt, `continuation_hash` (prov-2) the
turns after it. The name holds a `:` like the `template:` and `fallback:` provenance names, so it
reads as built in; it is answered before the pattern catalog is searched, so no file shadows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.catalog.source import RenderedSource
from app.errors import InvalidRequest
from app.schemas import FieldProblem, Message, ResponseFormat, ToolSet
from app.tracking import sha256_hex

CHAT_SOURCE = "builtin:chat"
CHAT_BASE_PATH = "builtin"
# Each describes how the inputs become the prompt; a change to that mapping is a new version.
_V1 = (
    "builtin:chat v1: system prompt = variables.system; messages = variables.messages "
    "(user/assistant turns, in order), then the user prompt verbatim"
)
_V2 = (
    "builtin:chat v2: no system prompt of its own; messages = variables.messages (every turn "
    "before the user prompt, in order, any role, with their parts, tool calls and tool results), "
    "then the user prompt verbatim unless it is empty, then the continuation; tools = "
    "variables.tools; output format = variables.response_format"
)
CHAT_SHA256 = sha256_hex(_V1.encode("utf-8"))
CHAT_V2_SHA256 = sha256_hex(_V2.encode("utf-8"))
CHAT_HASHES = frozenset({CHAT_SHA256, CHAT_V2_SHA256})
"""Every version's content hash: all of them ship with the code, so none ever drifts."""


def _is_none(value: Any) -> bool:
    return value is None


class _Turn(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    role: Literal["user", "assistant"]
    content: str


class _ConversationV1(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    system: str = ""
    messages: list[_Turn] = []


class ConversationV2(BaseModel):
    """What a chat door puts in the variables; `chat_variables` builds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[2] = 2
    messages: list[Message] = Field(default_factory=list)
    tools: ToolSet | None = Field(default=None, exclude_if=_is_none)
    response_format: ResponseFormat | None = Field(default=None, exclude_if=_is_none)


def chat_variables(
    messages: list[Message], *, tools: ToolSet | None, response_format: ResponseFormat | None
) -> dict[str, Any]:
    """The v2 variables for a conversation: keys without a value are left out of the hash."""
    conversation = ConversationV2(messages=messages, tools=tools, response_format=response_format)
    return conversation.model_dump(mode="json")


def _invalid(exc: ValidationError, shape: str) -> InvalidRequest:
    return InvalidRequest(
        [
            FieldProblem(
                loc=["body", "variables", *err["loc"]],
                msg=f"{err['msg']} ({CHAT_SOURCE} takes {shape})",
                type=err["type"],
            )
            for err in exc.errors(include_input=False)
        ]
    )


def chat_source(variables: Mapping[str, Any], user_prompt: str) -> RenderedSource:
    """The pass-through source for a conversation; its variables are checked here, once, since
    `POST /v1/completions` may name `builtin:chat` directly."""
    if variables.get("version") == 2:
        return _v2(variables, user_prompt)
    try:
        conversation = _ConversationV1.model_validate(dict(variables))
    except ValidationError as exc:
        raise _invalid(
            exc,
            "`system`: a string and `messages`: a list of {role: user|assistant, content: "
            'string}, or `"version": 2` with OpenAI-style turns',
        ) from None
    turns = tuple(Message(role=turn.role, content=turn.content) for turn in conversation.messages)
    return RenderedSource(
        kind="pattern",
        name=CHAT_SOURCE,
        base_path=CHAT_BASE_PATH,
        content_hash=CHAT_SHA256,
        system=conversation.system,
        variables=conversation.model_dump(),
        user=user_prompt,
        examples=turns,
    )


def _v2(variables: Mapping[str, Any], user_prompt: str) -> RenderedSource:
    try:
        conversation = ConversationV2.model_validate(dict(variables))
    except ValidationError as exc:
        raise _invalid(exc, "`messages`, `tools` and `response_format` in version 2") from None
    response_format = conversation.response_format
    return RenderedSource(
        kind="pattern",
        name=CHAT_SOURCE,
        base_path=CHAT_BASE_PATH,
        content_hash=CHAT_V2_SHA256,
        system="",
        variables=conversation.model_dump(mode="json"),
        user=user_prompt or None,
        examples=tuple(conversation.messages),
        output_schema=response_format.schema_to_check if response_format else None,
        response_format=response_format,
        tools=conversation.tools,
    )
