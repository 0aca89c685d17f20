"""Anthropic-compatible routes: POST /v1/messages and /v1/messages/count_tokens.

The official `anthropic` SDK (and tools built on it) pointed at the gateway as its base URL gets
completions through the same pipeline as every other door: this module reads Anthropic's wire
format (`app.dialects.anthropic`), hands the conversation to `app.api.conversation`, and writes
the envelope back as a `message`, or as Anthropic's exact event sequence when streamed. The
model may be any provider's: an Anthropic-shaped request to an OpenAI model is translated both
ways. The key may come as `x-api-key`, as the SDK sends it.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Response
from pydantic import ValidationError

from app.api.body import OffLoopBodyRoute
from app.api.conversation import (
    DROPPED_HEADER,
    IGNORED_HEADER,
    DoorRequest,
    dropped_params,
    to_render_request,
)
from app.api.deps import CallerDep, CanComplete, CompleterDep, ServiceDep
from app.api.error_body import error_body, error_json
from app.api.error_dialects import anthropic_error
from app.api.errors import error_responses
from app.api.messages_schemas import (
    IGNORED,
    AnthropicCacheCreation,
    AnthropicCountTokensRequest,
    AnthropicMessage,
    AnthropicMessagesRequest,
    AnthropicStopReason,
    AnthropicTokenCount,
    AnthropicUsage,
)
from app.api.paths import MESSAGES, V1
from app.api.responses import GatewayJSONResponse, json_bytes
from app.concurrency.offload import off_loop
from app.dialects import anthropic as dialect
from app.errors import InvalidConversation, UnsupportedParameter
from app.providers.base import ReasoningDelta, ToolCallDelta
from app.schemas import (
    CompletionEnvelope,
    CompletionResponse,
    FinishReason,
    ModelParams,
    ResponseFormat,
    ToolSet,
)
from app.schemas import Usage as GatewayUsage
from app.schemas.conversation import conversation_problems
from app.service import StreamDelta, StreamFailed, StreamOutput

router = APIRouter(
    prefix=V1,
    tags=["anthropic-compatible"],
    dependencies=[CanComplete],
    route_class=OffLoopBodyRoute,
)


# Anthropic's effort levels → the gateway's reasoning_effort (its `max` is our top level).
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
_STOP: dict[FinishReason, AnthropicStopReason] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "other": "end_turn",
}


# --- the request -----------------------------------------------------------------------------


def _problem(exc: ValidationError) -> str:
    first = exc.errors(include_url=False, include_input=False)[0]
    return str(first["msg"]).removeprefix("Value error, ")


def _conversation(body: AnthropicMessagesRequest) -> list[Any]:
    system = body.system
    wire_system: Any = (
        [block.model_dump(exclude_none=True) for block in system]
        if isinstance(system, list)
        else system
    )
    wire = [message.model_dump(exclude_none=True, by_alias=True) for message in body.messages]
    try:
        messages = dialect.messages_from_wire(wire_system, wire)
    except ValidationError as exc:
        raise InvalidConversation(f"messages: {_problem(exc)}", param="messages") from None
    except ValueError as exc:  # a block kind the gateway cannot carry
        raise UnsupportedParameter("messages", str(exc)) from None
    for found in conversation_problems(messages):
        where = found.where.replace("tool_calls", "tool_use").replace(".function.arguments", "")
        said = found.problem if where == "role" else f"a {where} {found.problem}"
        raise InvalidConversation(f"messages: {said}", param="messages")
    return messages


def _tools(body: AnthropicMessagesRequest) -> ToolSet | None:
    if body.tool_choice is not None and not body.tools and body.tool_choice.type != "none":
        raise InvalidConversation(
            "tool_choice asks for a tool, but no tools are given", param="tools"
        )
    try:
        return dialect.toolset_from_wire(
            [tool.model_dump(exclude_none=True) for tool in body.tools or ()],
            body.tool_choice.model_dump(exclude_none=True) if body.tool_choice else None,
        )
    except ValidationError as exc:
        raise InvalidConversation(f"tools: {_problem(exc)}", param="tools") from None


def _response_format(body: AnthropicMessagesRequest) -> ResponseFormat | None:
    wanted = body.output_config.format if body.output_config else None
    if wanted is None:
        return None
    try:
        return ResponseFormat(type="json_schema", json_schema=wanted.schema_)
    except ValidationError as exc:
        raise InvalidConversation(
            f"output_config.format: {_problem(exc)}", param="output_config"
        ) from None


def _params(body: AnthropicMessagesRequest) -> ModelParams:
    effort = body.output_config.effort if body.output_config else None
    thinking = body.thinking
    values = {
        "max_tokens": body.max_tokens,
        "stop": body.stop_sequences,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "reasoning_effort": _EFFORT[effort] if effort else None,
        "thinking": thinking.type if thinking else None,
        "thinking_budget": thinking.budget_tokens if thinking else None,
    }
    return ModelParams.model_validate({k: v for k, v in values.items() if v is not None})


def door_request(body: AnthropicMessagesRequest, *, stream: bool) -> DoorRequest:
    return DoorRequest(
        model=body.model,
        messages=_conversation(body),
        params=_params(body),
        tools=_tools(body),
        response_format=_response_format(body),
        variables=body.variables,
        stream=stream,
        cache=body.cache,
    )


def _ignored(body: AnthropicMessagesRequest) -> dict[str, str]:
    known = [name for name in IGNORED if getattr(body, name) is not None]
    names = known + sorted(body.model_extra or {})
    return {IGNORED_HEADER: ",".join(names)} if names else {}


# --- the answer ------------------------------------------------------------------------------


def _tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as Anthropic's `input` object; text that is not one (a model
    of another provider can write that) is kept whole rather than lost."""
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _signed(envelope: CompletionEnvelope) -> dict[str, Any]:
    """The final event's `signature` (and `parsed`, part of the signed response), when set."""
    fields: dict[str, Any] = {}
    if envelope.signature is not None:
        fields["signature"] = envelope.signature.model_dump(mode="json")
    if envelope.parsed is not None:
        fields["parsed"] = envelope.parsed
    return fields


def content_blocks(response: CompletionResponse) -> list[dict[str, Any]]:
    blocks = [block.model_dump(mode="json") for block in response.reasoning]
    if response.text:
        blocks.append({"type": "text", "text": response.text})
    blocks += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)}
        for c in response.tool_calls
    ]
    return blocks


def _usage(usage: GatewayUsage) -> AnthropicUsage:
    """Anthropic counts cache reads and writes beside `input_tokens`; the gateway counts them in
    it. The writes' split by lifetime goes with them when the provider reported it."""
    cached, writes, writes_1h = (
        usage.cached_input_tokens,
        usage.cache_write_tokens,
        usage.cache_write_1h_tokens,
    )
    split = None
    if writes is not None and writes_1h is not None:
        split = AnthropicCacheCreation(
            ephemeral_5m_input_tokens=writes - writes_1h, ephemeral_1h_input_tokens=writes_1h
        )
    return AnthropicUsage(
        input_tokens=max((usage.input_tokens or 0) - (cached or 0) - (writes or 0), 0),
        output_tokens=usage.output_tokens or 0,
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=writes,
        cache_creation=split,
    )


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return b"event: " + event.encode() + b"\ndata: " + json_bytes(data) + b"\n\n"


class _Events:
    """The service's stream as Anthropic's events: message_start, then per block
    content_block_start / _delta… / _stop, then message_delta and message_stop."""

    def __init__(self, *, request_id: str, model: str) -> None:
        self._request_id = request_id
        self._model = model
        self._started = False
        self._index = -1  # the open block's index, -1 before the first
        self._open: tuple[str, int] | None = None  # (kind, its own number) of the open block

    def _start(self) -> list[bytes]:
        self._started = True
        message: dict[str, Any] = {
            "id": f"msg_{self._request_id}",
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [_sse("message_start", {"type": "message_start", "message": message})]

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open = None
        return [_sse("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _block(self, kind: str, number: int, block: dict[str, Any]) -> list[bytes]:
        """Open a block unless it is the one open already."""
        if self._open == (kind, number):
            return []
        frames = self._close()
        self._index += 1
        self._open = (kind, number)
        start = {"type": "content_block_start", "index": self._index, "content_block": block}
        frames.append(_sse("content_block_start", start))
        if self._index == 0:
            frames.append(_sse("ping", {"type": "ping"}))
        return frames

    def _delta(self, delta: dict[str, Any]) -> bytes:
        data = {"type": "content_block_delta", "index": self._index, "delta": delta}
        return _sse("content_block_delta", data)

    def frames(self, event: StreamOutput) -> list[bytes]:
        if isinstance(event, StreamFailed):
            body = error_json(error_body(event.error, request_id=self._request_id))
            return [_sse("error", anthropic_error(event.error, body, event.error.status_code)[1])]
        frames = [] if self._started else self._start()
        if isinstance(event, StreamDelta):
            frames += self._block("text", 0, {"type": "text", "text": ""})
            frames.append(self._delta({"type": "text_delta", "text": event.text}))
        elif isinstance(event, ToolCallDelta):
            opened: dict[str, Any] = {"type": "tool_use", "id": event.id, "name": event.name}
            opened["input"] = {}
            frames += self._block("tool_use", event.index, opened)
            if event.arguments:
                piece = {"type": "input_json_delta", "partial_json": event.arguments}
                frames.append(self._delta(piece))
        elif isinstance(event, ReasoningDelta):
            frames += self._reasoning(event)
        else:
            frames += self._finish(event)
        return frames

    def _reasoning(self, event: ReasoningDelta) -> list[bytes]:
        if event.redacted is not None:
            block = {"type": "redacted_thinking", "data": event.redacted}
            return self._block("redacted", event.index, block) + self._close()
        frames = self._block("thinking", event.index, {"type": "thinking", "thinking": ""})
        if event.text:
            frames.append(self._delta({"type": "thinking_delta", "thinking": event.text}))
        if event.signature:
            frames.append(self._delta({"type": "signature_delta", "signature": event.signature}))
        return frames

    def _finish(self, envelope: CompletionEnvelope) -> list[bytes]:
        response = envelope.response
        frames = self._close()
        usage = _usage(response.usage).model_dump(exclude_none=True)
        delta = {"stop_reason": _STOP[response.finish_reason], "stop_sequence": None}
        frames.append(
            _sse(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": delta,
                    "usage": usage,
                    "provenance": envelope.provenance.model_dump(mode="json"),
                    "job_id": envelope.job_id,
                    **_signed(envelope),
                },
            )
        )
        frames.append(_sse("message_stop", {"type": "message_stop"}))
        return frames


@router.post(
    MESSAGES,
    operation_id="createMessage",
    summary="Anthropic Messages: any model, `pattern/<name>`, tools, images, streaming",
    response_model=AnthropicMessage,
    responses={
        200: {
            "description": 'The `message`; with `"stream": true`, Anthropic\'s Server-Sent '
            "Events (message_start, content_block_start/_delta/_stop, message_delta with "
            "`provenance` and `job_id`, message_stop), or an `error` event.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **error_responses(400, 404, 429, 502, 503, 504),
    },
)
async def create_message(
    body: AnthropicMessagesRequest, completer: CompleterDep
) -> AnthropicMessage | Response:
    render = await off_loop(lambda: to_render_request(door_request(body, stream=body.stream)))
    request_id = completer.request_id
    # `request-id` is where the anthropic SDK reads it (the gateway's own is x-request-id).
    headers = {**_ignored(body), "request-id": request_id}
    if body.stream:
        frames = _Events(request_id=request_id, model=body.model).frames
        return await completer.stream(render, frames=frames, headers=headers)
    envelope = await completer.complete(render)
    if dropped := dropped_params(render.params, envelope.params):
        headers[DROPPED_HEADER] = ",".join(dropped)
    answer = envelope.response
    message = AnthropicMessage(
        id=f"msg_{request_id}",
        model=body.model,
        content=content_blocks(answer),
        stop_reason=_STOP[answer.finish_reason],
        usage=_usage(answer.usage),
        provenance=envelope.provenance,
        job_id=envelope.job_id,
        signature=envelope.signature,
        parsed=envelope.parsed,
    )
    # Serialised once, here (FastAPI would validate and dump the response model again).
    return GatewayJSONResponse(message, headers=headers)


@router.post(
    MESSAGES + "/count_tokens",
    operation_id="countMessageTokens",
    summary="Anthropic token counting, for models whose provider offers it (Anthropic)",
    response_model=AnthropicTokenCount,
    responses=error_responses(400, 404, 502, 503, 504),
)
async def count_tokens(
    body: AnthropicCountTokensRequest, response: Response, service: ServiceDep, caller: CallerDep
) -> AnthropicTokenCount:
    render = await off_loop(lambda: to_render_request(door_request(body, stream=False)))
    count = await service.count_tokens(render, caller)
    response.headers.update(_ignored(body))
    return AnthropicTokenCount(input_tokens=count)
