"""Ollama's /api/chat ⇄ the gateway's conversation (`app/schemas/conversation.py`).

Ollama's messages are flatter: `content` is one string (text parts are joined by newlines),
images are bare base64 strings in `images` (only `data:` URIs can be sent: the capabilities file
says Ollama takes no image URLs, and the gateway never fetches one), tool calls carry an object of
arguments and no id, and a tool result names the tool (`tool_name`) rather than the call. So ids
are made up on the way in (`new_id`) and looked up on the way out; reasoning blocks, which only
Anthropic can read back, are not sent.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from app.schemas import ImagePart, Message, ResponseFormat, Tool, ToolCall, ToolSet
from app.schemas.conversation import arguments_text

Wire = dict[str, Any]


def image_payload(part: ImagePart) -> str:
    """The base64 data of a `data:` URI (the preparer refuses URLs for Ollama beforehand)."""
    return part.url.partition(";base64,")[2]


def message_to_wire(message: Message, names: Mapping[str, str]) -> Wire:
    """One message; `names` maps each earlier tool call id to its tool's name."""
    wire: Wire = {"role": message.role, "content": message.text}
    images = [image_payload(p) for p in message.parts if isinstance(p, ImagePart)]
    if images:
        wire["images"] = images
    if message.tool_calls:
        wire["tool_calls"] = [
            {"function": {"name": call.name, "arguments": json.loads(call.arguments)}}
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        wire["tool_name"] = names.get(message.tool_call_id, "")
    return wire


def messages_to_wire(system: str, messages: Iterable[Message]) -> list[Wire]:
    wire = [{"role": "system", "content": system}] if system else []
    names: dict[str, str] = {}
    for message in messages:
        names.update((call.id, call.name) for call in message.tool_calls)
        wire.append(message_to_wire(message, names))
    return wire


def toolset_to_wire(tools: ToolSet) -> Wire:
    """Ollama has no `tool_choice`: with `none` no tool is offered, otherwise all are (a forced
    choice cannot be enforced there; the model decides, as with `auto`)."""
    if tools.choice is not None and tools.choice.type == "none":
        return {}
    return {
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    **({"description": tool.description} if tool.description else {}),
                    "parameters": tool.parameters,
                },
            }
            for tool in tools.tools
        ]
    }


def format_to_wire(response_format: ResponseFormat) -> str | dict[str, Any]:
    """Ollama's `format`: "json" for any JSON, else the schema it constrains decoding to."""
    if response_format.type == "json_object":
        return "json"
    return dict(response_format.schema_to_check)


def tool_calls_from_wire(
    calls: Sequence[Mapping[str, Any]] | None, new_id: Callable[[], str]
) -> list[ToolCall]:
    return [
        ToolCall(
            id=new_id(),
            name=call["function"]["name"],
            arguments=arguments_text(call["function"].get("arguments") or {}),
        )
        for call in calls or ()
    ]


def messages_from_wire(
    messages: Sequence[Mapping[str, Any]], new_id: Callable[[], str]
) -> list[Message]:
    """Ollama messages as the gateway's; each tool result answers the earliest unanswered call
    of its tool."""
    found: list[Message] = []
    unanswered: list[ToolCall] = []
    for wire in messages:
        role = wire["role"]
        if role == "tool":
            call = next((c for c in unanswered if c.name == wire.get("tool_name")), None)
            if call is not None:
                unanswered.remove(call)
            found.append(
                Message(
                    role="tool",
                    content=wire.get("content") or "",
                    tool_call_id=call.id if call else new_id(),
                )
            )
            continue
        images = [
            ImagePart(url=f"data:image/png;base64,{data}") for data in wire.get("images") or ()
        ]
        text = wire.get("content") or ""
        content: Any = [{"type": "text", "text": text}, *images] if images else text
        calls = tool_calls_from_wire(wire.get("tool_calls"), new_id)
        unanswered += calls
        found.append(Message(role=role, content=content, tool_calls=calls))
    return found


def tool_from_wire(tool: Mapping[str, Any]) -> Tool:
    function = tool["function"]
    return Tool(
        name=function["name"],
        description=function.get("description"),
        parameters=function.get("parameters") or {"type": "object", "properties": {}},
    )
