"""OpenAI Chat Completions ⇄ the gateway's conversation (`app/schemas/conversation.py`).

Requests carry `messages` (content as text or parts, `tool_calls`, `role: "tool"` results),
`tools` as `{"type": "function", "function": {…}}`, `tool_choice`, `parallel_tool_calls` and
`response_format`. Anthropic's reasoning blocks have no OpenAI field: an assistant message carries
them as `thinking_blocks` (LiteLLM's name for the same thing), which OpenAI-style clients keep in
the message they send back, and which is never sent to OpenAI itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from app.schemas import (
    ImagePart,
    Message,
    Part,
    ReasoningBlock,
    ResponseFormat,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
    ToolSet,
)

Wire = dict[str, Any]


# --- gateway → OpenAI ------------------------------------------------------------------------


def content_to_wire(content: str | Sequence[Part]) -> str | list[Wire]:
    if isinstance(content, str):
        return content
    parts: list[Wire] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            image: Wire = {"url": part.url}
            if part.detail is not None:
                image["detail"] = part.detail
            parts.append({"type": "image_url", "image_url": image})
    return parts


def tool_call_to_wire(call: ToolCall) -> Wire:
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": call.arguments},
    }


def message_to_wire(message: Message, *, with_reasoning: bool = False) -> Wire:
    """One message; `with_reasoning` adds `thinking_blocks` (for the door's answers, never for
    OpenAI, which refuses fields it does not know)."""
    wire: Wire = {"role": message.role}
    content = content_to_wire(message.content)
    if message.role == "assistant" and message.tool_calls:
        wire["content"] = content or None  # OpenAI writes null beside tool calls
        wire["tool_calls"] = [tool_call_to_wire(call) for call in message.tool_calls]
    else:
        wire["content"] = content
    if message.tool_call_id is not None:
        wire["tool_call_id"] = message.tool_call_id
    if with_reasoning and message.reasoning:
        wire["thinking_blocks"] = [block.model_dump(mode="json") for block in message.reasoning]
    return wire


def messages_to_wire(system: str, messages: Iterable[Message]) -> list[Wire]:
    """The system prompt, when there is one, first; then every turn in order."""
    head = [{"role": "system", "content": system}] if system else []
    return head + [message_to_wire(message) for message in messages]


def tool_to_wire(tool: Tool) -> Wire:
    function: Wire = {"name": tool.name}
    if tool.description is not None:
        function["description"] = tool.description
    function["parameters"] = tool.parameters
    if tool.strict is not None:
        function["strict"] = tool.strict
    return {"type": "function", "function": function}


def tool_choice_to_wire(choice: ToolChoice) -> str | Wire:
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.type


def toolset_to_wire(tools: ToolSet) -> Wire:
    """The request fields that offer the tools."""
    wire: Wire = {"tools": [tool_to_wire(tool) for tool in tools.tools]}
    if tools.choice is not None:
        wire["tool_choice"] = tool_choice_to_wire(tools.choice)
    if tools.parallel is not None:
        wire["parallel_tool_calls"] = tools.parallel
    return wire


def response_format_to_wire(response_format: ResponseFormat) -> Wire:
    if response_format.type == "json_object":
        return {"type": "json_object"}
    schema: Wire = {"name": response_format.name, "schema": response_format.json_schema}
    if response_format.description is not None:
        schema["description"] = response_format.description
    if response_format.strict is not None:
        schema["strict"] = response_format.strict
    return {"type": "json_schema", "json_schema": schema}


# --- OpenAI → gateway ------------------------------------------------------------------------
# These read JSON that has already been checked for shape (the door's request models, the
# adapter's reply models), so they only rename.


def content_from_wire(content: str | Sequence[Mapping[str, Any]] | None) -> str | list[Part]:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[Part] = []
    for part in content:
        if part["type"] == "image_url":
            image = part["image_url"]
            parts.append(ImagePart(url=image["url"], detail=image.get("detail")))
        else:  # text, or an assistant's refusal part
            parts.append(TextPart(text=part.get("text", part.get("refusal", ""))))
    return parts


def tool_call_from_wire(call: Mapping[str, Any]) -> ToolCall:
    function = call["function"]
    return ToolCall(id=call["id"], name=function["name"], arguments=function["arguments"])


def message_from_wire(wire: Mapping[str, Any]) -> Message:
    """One OpenAI message; `developer` is a system message."""
    role = wire["role"]
    return Message(
        role="system" if role == "developer" else role,
        content=content_from_wire(wire.get("content")),
        tool_calls=[tool_call_from_wire(call) for call in wire.get("tool_calls") or ()],
        tool_call_id=wire.get("tool_call_id"),
        reasoning=[ReasoningBlock.model_validate(b) for b in wire.get("thinking_blocks") or ()],
    )


def tool_from_wire(tool: Mapping[str, Any]) -> Tool:
    function = tool["function"]
    return Tool(
        name=function["name"],
        description=function.get("description"),
        parameters=function.get("parameters") or {"type": "object", "properties": {}},
        strict=function.get("strict"),
    )


def tool_choice_from_wire(choice: str | Mapping[str, Any] | None) -> ToolChoice | None:
    if choice is None:
        return None
    if isinstance(choice, str):
        return ToolChoice.model_validate({"type": choice})  # auto | none | required
    return ToolChoice(type="tool", name=choice["function"]["name"])


def toolset_from_wire(
    tools: Sequence[Mapping[str, Any]] | None,
    choice: str | Mapping[str, Any] | None,
    parallel: bool | None,
) -> ToolSet | None:
    """The tools offered, or None when there are none (a lone `tool_choice` offers nothing)."""
    if not tools:
        return None
    return ToolSet(
        tools=[tool_from_wire(tool) for tool in tools],
        choice=tool_choice_from_wire(choice),
        parallel=parallel,
    )


def response_format_from_wire(wire: Mapping[str, Any] | None) -> ResponseFormat | None:
    """`{"type": "text"}` (or nothing) asks for no format."""
    if wire is None or wire["type"] == "text":
        return None
    if wire["type"] == "json_object":
        return ResponseFormat(type="json_object")
    schema = wire["json_schema"]
    return ResponseFormat(
        type="json_schema",
        name=schema["name"],
        json_schema=schema.get("schema") or {},
        description=schema.get("description"),
        strict=schema.get("strict"),
    )
