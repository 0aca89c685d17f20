"""OpenAI-compatible routes: POST /v1/chat/completions and GET /v1/models.

An OpenAI SDK pointed at the gateway (base_url `…/v1`, a gateway API key as its api_key) gets
completions that went through the same pipeline as POST /v1/completions: this module only
translates. `provider/model` sends the conversation through the built-in `builtin:chat` source
(app/catalog/chat.py); `pattern/<name>` renders that pattern with the body's `variables` and the
last user message as the user prompt.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeVar

import orjson
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ValidationError

from app.api.chat_schemas import (
    UNSUPPORTED,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatMessage,
    ChatUsage,
    Choice,
    ChunkChoice,
    ChunkDelta,
    CompletionTokensDetails,
    ModelEntry,
    ModelList,
    PromptTokensDetails,
    unsupported_message,
)
from app.api.deps import (
    CallerKeyDep,
    CanComplete,
    CatalogDep,
    DeadlineDep,
    ProvidersDep,
    RequestIdDep,
    ServiceDep,
    SettingsDep,
)
from app.api.disconnect import cancel_on_disconnect
from app.api.errors import error_responses
from app.api.sse import EventStreamResponse
from app.catalog.chat import CHAT_SOURCE
from app.config import Settings
from app.error_body import error_body, error_json
from app.errors import InvalidConversation, InvalidRequest
from app.schemas import (
    CompletionEnvelope,
    FieldProblem,
    FinishReason,
    ModelParams,
    RenderRequest,
    Usage,
)
from app.service import StreamDelta, StreamFailed, StreamOutput

router = APIRouter(prefix="/v1", tags=["openai-compatible"], dependencies=[CanComplete])

PATTERN_PREFIX = "pattern/"
OpenAIFinish = Literal["stop", "length", "content_filter", "tool_calls"]
M = TypeVar("M", bound=BaseModel)


def _problem(loc: Sequence[str | int], msg: str, kind: str) -> FieldProblem:
    return FieldProblem(loc=["body", *loc], msg=msg, type=kind)


def _validated(model: type[M], values: Mapping[str, Any], **loc_names: str) -> M:
    """`model` built from `values`; a failure is a 422 naming the OpenAI field, never a 500."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise InvalidRequest(
            [
                _problem(
                    [loc_names.get(str(err["loc"][0]), str(err["loc"][0])), *err["loc"][1:]]
                    if err["loc"]
                    else [],
                    err["msg"],
                    err["type"],
                )
                for err in exc.errors(include_input=False)
            ]
        ) from None


def _refuse_unsupported(body: ChatCompletionRequest) -> None:
    problems = [
        _problem([name], unsupported_message(name), "unsupported_parameter")
        for name, (neutral, _) in UNSUPPORTED.items()
        if getattr(body, name) not in neutral
    ]
    for index, message in enumerate(body.messages):
        if message.role in ("tool", "function"):
            problems.append(
                _problem(
                    ["messages", index, "role"],
                    "tool calling is not supported, so there are no tool results to send",
                    "unsupported_parameter",
                )
            )
        for name in ("tool_calls", "function_call", "tool_call_id", "audio"):
            if getattr(message, name) is not None:
                problems.append(
                    _problem(
                        ["messages", index, name],
                        "only text messages are supported",
                        "unsupported_parameter",
                    )
                )
    if problems:
        raise InvalidRequest(problems)


def _last_user_index(messages: Sequence[ChatMessage]) -> int:
    """Where the user prompt is: the conversation must end with a user message."""
    if messages[-1].role != "user":
        # Each message is valid on its own (the schema cannot say which comes last), so this
        # is not `invalid_request`.
        raise InvalidConversation(
            f"The last message (messages[{len(messages) - 1}]) comes from "
            f"{messages[-1].role!r}; it must come from the user: it is the prompt answered."
        )
    return len(messages) - 1


def _params(body: ChatCompletionRequest) -> ModelParams | None:
    tokens_field = "max_tokens" if body.max_completion_tokens is None else "max_completion_tokens"
    values = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": getattr(body, tokens_field),
        "stop": [body.stop] if isinstance(body.stop, str) else body.stop,
        "seed": body.seed,
    }
    given = {name: value for name, value in values.items() if value is not None}
    return _validated(ModelParams, given, max_tokens=tokens_field) if given else None


def to_render_request(body: ChatCompletionRequest) -> RenderRequest:
    """The chat request as the service's own request: a pattern, or the built-in chat source."""
    _refuse_unsupported(body)
    last = _last_user_index(body.messages)
    request: dict[str, Any] = {
        "user_prompt": body.messages[last].text,
        "params": _params(body),
        "stream": body.stream,
        "cache": body.cache,
    }
    if body.model.startswith(PATTERN_PREFIX):
        # The pattern owns the system prompt and examples; earlier messages are not sent.
        request |= {"pattern_key": body.model.removeprefix(PATTERN_PREFIX)}
        request |= {"variables": body.variables}
    else:
        if body.variables:
            raise InvalidRequest(
                [
                    _problem(
                        ["variables"],
                        "variables belong to a pattern: use model `pattern/<name>`",
                        "variables_without_pattern",
                    )
                ]
            )
        earlier = body.messages[:last]
        system = "\n\n".join(m.text for m in earlier if m.role in ("system", "developer"))
        turns = [
            {"role": m.role, "content": m.text} for m in earlier if m.role in ("user", "assistant")
        ]
        request |= {"pattern_key": CHAT_SOURCE, "model": body.model}
        request |= {"variables": {"system": system, "messages": turns}}
    return _validated(RenderRequest, request, user_prompt="messages", pattern_key="model")


def _finish(reason: FinishReason) -> OpenAIFinish:
    # `other` (a provider's reason with no OpenAI name) reads as a normal stop to OpenAI clients.
    return "stop" if reason == "other" else reason


def _usage(usage: Usage) -> ChatUsage:
    prompt, completion = usage.input_tokens or 0, usage.output_tokens or 0
    return ChatUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=usage.total_tokens or prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=usage.cached_input_tokens)
        if usage.cached_input_tokens is not None
        else None,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=usage.reasoning_tokens)
        if usage.reasoning_tokens is not None
        else None,
    )


class _Chunks:
    """The service's stream events as OpenAI `chat.completion.chunk` SSE frames."""

    def __init__(self, *, request_id: str, created: int, model: str, usage: bool) -> None:
        self._head = {"id": f"chatcmpl-{request_id}", "created": created, "model": model}
        self._request_id = request_id
        self._usage = usage
        self._opened = False

    def _frame(self, chunk: ChatCompletionChunk) -> bytes:
        data = chunk.model_dump(mode="json", exclude_none=False)
        for name in ("provenance", "job_id"):
            if data[name] is None:
                del data[name]
        if not self._usage:
            del data["usage"]  # OpenAI sends `usage` only when include_usage asks for it
        return b"data: " + orjson.dumps(data) + b"\n\n"

    def _chunk(self, **fields: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate({**self._head, **fields})

    def frames(self, event: StreamOutput) -> list[bytes]:
        frames = []
        if not self._opened and not isinstance(event, StreamFailed):
            self._opened = True  # OpenAI's first chunk names the role
            opening = ChunkChoice(delta=ChunkDelta(role="assistant", content=""))
            frames.append(self._frame(self._chunk(choices=[opening])))
        if isinstance(event, StreamDelta):
            delta = ChunkChoice(delta=ChunkDelta(content=event.text))
            frames.append(self._frame(self._chunk(choices=[delta])))
        elif isinstance(event, CompletionEnvelope):
            finish = ChunkChoice(
                delta=ChunkDelta(), finish_reason=_finish(event.response.finish_reason)
            )
            final = self._chunk(choices=[finish], provenance=event.provenance, job_id=event.job_id)
            frames.append(self._frame(final))
            if self._usage:
                frames.append(
                    self._frame(self._chunk(choices=[], usage=_usage(event.response.usage)))
                )
            frames.append(b"data: [DONE]\n\n")
        else:  # OpenAI reports a failure mid-stream as an `error` object in a data event
            body = error_json(error_body(event.error, request_id=self._request_id))
            frames.append(b"data: " + orjson.dumps(body) + b"\n\n")
        return frames


@router.post(
    "/chat/completions",
    operation_id="createChatCompletion",
    summary="OpenAI Chat Completions: `provider/model` or `pattern/<name>`, with provenance",
    response_model=ChatCompletion,
    responses={
        200: {
            "description": 'The `chat.completion`; with `"stream": true`, Server-Sent Events of '
            "`chat.completion.chunk` objects (the one with `finish_reason` carries `provenance` "
            'and `job_id`), then `data: [DONE]`; a failure mid-stream is a `data: {"error": …}` '
            "event.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **error_responses(404, 422, 429, 502, 503, 504),
    },
)
async def create_chat_completion(
    body: ChatCompletionRequest,
    request: Request,
    service: ServiceDep,
    request_id: RequestIdDep,
    caller_key: CallerKeyDep,
    deadline_ms: DeadlineDep = None,
) -> ChatCompletion | Response:
    render = to_render_request(body)
    request_id = request_id or uuid.uuid4().hex
    created = int(time.time())
    if body.stream:
        events = await cancel_on_disconnect(
            request,
            service.stream(
                render, request_id=request_id, deadline_ms=deadline_ms, caller_key=caller_key
            ),
        )
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        chunks = _Chunks(
            request_id=request_id, created=created, model=body.model, usage=include_usage
        )
        return EventStreamResponse(events, request_id=request_id, frames=chunks.frames)
    envelope = await cancel_on_disconnect(
        request,
        service.complete(
            render, request_id=request_id, deadline_ms=deadline_ms, caller_key=caller_key
        ),
    )
    answer = envelope.response
    return ChatCompletion(
        id=f"chatcmpl-{request_id}",
        created=created,
        model=body.model,
        choices=[
            Choice(
                message=AssistantMessage(content=answer.text),
                finish_reason=_finish(answer.finish_reason),
            )
        ],
        usage=_usage(answer.usage),
        provenance=envelope.provenance,
        job_id=envelope.job_id,
    )


def configured_models(settings: Settings, patterns_named: Sequence[str]) -> list[str]:
    """Every `provider/model` the configuration names, first mention first: the model chain
    (GENAI_MODEL, --model, default_model), per-task models, capable fallbacks, fallback chains
    and the models the patterns name (`model_hint`, `fallbacks`)."""
    named = [
        settings.model,
        settings.cli_model,
        settings.default_model,
        *settings.cli_task_models.values(),
        *settings.env_task_models.values(),
        *settings.task_models.values(),
        *settings.capable_fallback_models,
        *(model for key, chain in settings.fallbacks.items() for model in (key, *chain)),
        *patterns_named,
    ]
    return list(dict.fromkeys(m for m in named if m and "/" in m))


@router.get(
    "/models",
    operation_id="listModels",
    summary="OpenAI model list: the configured models of configured providers, and patterns",
    response_model=ModelList,
)
async def list_models(
    settings: SettingsDep, providers: ProvidersDep, catalog: CatalogDep
) -> ModelList:
    usable = {name for name, configured in providers.status().items() if configured}
    patterns = catalog.loadable()
    pattern_models = [
        model
        for info in patterns
        for model in (info.meta.model_hint, *info.meta.fallbacks)
        if model is not None
    ]
    models = [
        ModelEntry(id=model, created=0, owned_by=model.split("/", 1)[0])
        for model in configured_models(settings, pattern_models)
        if model.split("/", 1)[0] in usable
    ]
    models += [
        ModelEntry(id=f"{PATTERN_PREFIX}{info.name}", created=0, owned_by="gateway")
        for info in patterns
    ]
    return ModelList(data=models)
