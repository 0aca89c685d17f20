"""OpenAI-compatible routes: POST /v1/chat/completions, GET /v1/models and /v1/models/{id}.

An OpenAI SDK pointed at the gateway (base_url `…/v1`, a gateway API key as its api_key) gets
completions that went through the same pipeline as POST /v1/completions: this module only reads
the OpenAI wire format (`app.dialects.openai`), hands the conversation to `app.api.conversation`
and writes the envelope back as a `chat.completion` (or its chunks).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Path, Response
from pydantic import ValidationError

from app.api.body import OffLoopBodyRoute
from app.api.chat_schemas import (
    CHAT_MODEL,
    IGNORED,
    AssistantMessage,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatFunctionCall,
    ChatMessage,
    ChatResponseToolCall,
    ChatThinkingBlock,
    ChatToolCallChunk,
    ChatUsage,
    Choice,
    ChunkChoice,
    ChunkDelta,
    CompletionTokensDetails,
    ModelEntry,
    ModelList,
    OpenAIFinish,
    PromptTokensDetails,
)
from app.api.conversation import (
    DROPPED_HEADER,
    IGNORED_HEADER,
    PATTERN_PREFIX,
    DoorRequest,
    dropped_params,
    to_render_request,
)
from app.api.deps import (
    CanComplete,
    CatalogDep,
    CompleterDep,
    ProvidersDep,
    SettingsDep,
)
from app.api.error_body import error_body, error_json
from app.api.errors import error_responses
from app.api.paths import CHAT_COMPLETIONS, MODELS, V1
from app.api.responses import GatewayJSONResponse, json_bytes
from app.concurrency.offload import off_loop
from app.config import Settings
from app.dialects import openai as dialect
from app.errors import InvalidConversation, InvalidModel, UnsupportedParameter
from app.providers.base import ReasoningDelta, ToolCallDelta
from app.providers.registry import provider_names
from app.routing.aliases import ModelAliases
from app.routing.configured import configured_models
from app.routing.policy import split_model
from app.schemas import (
    CompletionEnvelope,
    CompletionResponse,
    FinishReason,
    Message,
    ModelParams,
    ResponseFormat,
    ToolSet,
    Usage,
)
from app.schemas.conversation import conversation_problems
from app.service import StreamDelta, StreamFailed, StreamOutput

router = APIRouter(
    prefix=V1,
    tags=["openai-compatible"],
    dependencies=[CanComplete],
    route_class=OffLoopBodyRoute,
)


# --- the request -----------------------------------------------------------------------------


def _refuse_unhonoured(body: ChatCompletionRequest) -> None:
    """Fields that would change the answer and that no provider is sent."""
    if body.n not in (None, 1):
        raise UnsupportedParameter("n", "one choice per request: send n=1 or leave it out")
    if body.logprobs:
        raise UnsupportedParameter("logprobs", "log probabilities are not returned")
    if body.top_logprobs:
        raise UnsupportedParameter("top_logprobs", "log probabilities are not returned")
    if body.modalities is not None and "audio" in body.modalities:
        raise UnsupportedParameter("modalities", 'only text is served: send ["text"]')
    extra = body.model_extra or {}
    for name, why in _NOT_SERVED.items():
        if extra.get(name) is not None:
            raise UnsupportedParameter(name, why)


# Known OpenAI fields that change the answer and that no provider is sent: refused, not ignored.
_NOT_SERVED = {
    "functions": "the legacy functions API is not served: send the same functions as `tools`",
    "function_call": "the legacy functions API is not served: send `tool_choice`",
    "audio": "audio output is not served",
    "web_search_options": "web search is not served",
    "moderation": "OpenAI's moderation policy is not served",
}


def _problem(exc: ValidationError) -> str:
    """The first reason a conversation model refused a value, without pydantic's prefix."""
    first = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def _messages(wire: Sequence[ChatMessage]) -> list[Message]:
    messages = []
    for index, message in enumerate(wire):
        try:
            values = message.model_dump(exclude_none=True)
            messages.append(dialect.message_from_wire(values))
        except ValidationError as exc:
            raise InvalidConversation(
                f"messages[{index}]: {_problem(exc)}", param=f"messages[{index}]"
            ) from None
    for found in conversation_problems(messages):
        where = f"messages[{found.index}].{found.where}"
        raise InvalidConversation(f"{where} {found.problem}", param=where)
    return messages


def _tools(body: ChatCompletionRequest) -> ToolSet | None:
    if body.tool_choice is not None and not body.tools and body.tool_choice != "none":
        raise InvalidConversation("tool_choice names a tool, but no tools are given", param="tools")
    try:
        return dialect.toolset_from_wire(
            [tool.model_dump(exclude_none=True) for tool in body.tools or ()],
            body.tool_choice
            if isinstance(body.tool_choice, str | None)
            else body.tool_choice.model_dump(),
            body.parallel_tool_calls,
        )
    except ValidationError as exc:
        raise InvalidConversation(f"tools: {_problem(exc)}", param="tools") from None


def _response_format(body: ChatCompletionRequest) -> ResponseFormat | None:
    if body.response_format is None:
        return None
    try:
        return dialect.response_format_from_wire(body.response_format.model_dump(by_alias=True))
    except ValidationError as exc:
        raise InvalidConversation(
            f"response_format: {_problem(exc)}", param="response_format"
        ) from None


def _params(body: ChatCompletionRequest) -> ModelParams | None:
    values = {
        "temperature": body.temperature,
        "top_p": body.top_p,
        "max_tokens": body.max_completion_tokens or body.max_tokens,
        "stop": [body.stop] if isinstance(body.stop, str) else body.stop,
        "seed": body.seed,
        "presence_penalty": body.presence_penalty,
        "frequency_penalty": body.frequency_penalty,
        "logit_bias": body.logit_bias,
        "reasoning_effort": body.reasoning_effort,
        "verbosity": body.verbosity,
    }
    given = {name: value for name, value in values.items() if value is not None}
    return ModelParams.model_validate(given) if given else None


def door_request(body: ChatCompletionRequest) -> DoorRequest:
    """The chat request in the gateway's terms; every refusal names the OpenAI field."""
    _refuse_unhonoured(body)
    return DoorRequest(
        model=body.model,
        messages=_messages(body.messages),
        params=_params(body),
        tools=_tools(body),
        response_format=_response_format(body),
        variables=body.variables,
        stream=body.stream,
        cache=body.cache,
    )


def _ignored(body: ChatCompletionRequest) -> list[str]:
    """Fields accepted without effect: the known labels, and every field this version of the
    gateway does not know (a newer SDK's)."""
    known = [name for name in IGNORED if getattr(body, name) is not None]
    return known + sorted(body.model_extra or {})


# --- the answer ------------------------------------------------------------------------------


def _finish(reason: FinishReason) -> OpenAIFinish:
    # `other` (a provider's reason with no OpenAI name) reads as a normal stop to OpenAI clients.
    return "stop" if reason == "other" else reason


def _usage(usage: Usage) -> ChatUsage:
    """OpenAI's prompt_tokens include cache reads and writes, as the gateway's input_tokens do;
    its details name both (whichever provider answered)."""
    prompt, completion = usage.input_tokens or 0, usage.output_tokens or 0
    cached, writes = usage.cached_input_tokens, usage.cache_write_tokens
    return ChatUsage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=usage.total_tokens or prompt + completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached, cache_write_tokens=writes)
        if cached is not None or writes is not None
        else None,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=usage.reasoning_tokens)
        if usage.reasoning_tokens is not None
        else None,
    )


def _assistant(response: CompletionResponse) -> AssistantMessage:
    calls = [
        ChatResponseToolCall(id=c.id, function=ChatFunctionCall(name=c.name, arguments=c.arguments))
        for c in response.tool_calls
    ]
    thinking = [ChatThinkingBlock.model_validate(b.model_dump()) for b in response.reasoning]
    return AssistantMessage(
        content=response.text if response.text or not calls else None,
        tool_calls=calls or None,
        thinking_blocks=thinking or None,
    )


class _Chunks:
    """The service's stream events as OpenAI `chat.completion.chunk` SSE frames."""

    def __init__(self, *, request_id: str, created: int, model: str, usage: bool) -> None:
        self._head = {"id": f"chatcmpl-{request_id}", "created": created, "model": model}
        self._request_id = request_id
        self._usage = usage
        self._opened = False
        self._named: set[int] = set()  # tool calls whose first piece has gone out

    def _frame(self, chunk: ChatCompletionChunk) -> bytes:
        data = chunk.model_dump(mode="json", exclude_none=False)
        for name in ("provenance", "job_id", "signature", "parsed"):
            if data[name] is None:
                del data[name]
        if not self._usage:
            del data["usage"]  # OpenAI sends `usage` only when include_usage asks for it
        for choice in data["choices"]:  # a delta names only what it carries, as OpenAI's do
            delta = {k: v for k, v in choice["delta"].items() if v is not None}
            if "tool_calls" in delta:  # a null id or type would overwrite the first piece's
                delta["tool_calls"] = [
                    {k: v for k, v in piece.items() if v is not None}
                    for piece in delta["tool_calls"]
                ]
            choice["delta"] = delta
        return b"data: " + json_bytes(data) + b"\n\n"

    def _chunk(self, **fields: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate({**self._head, **fields})

    def _delta(self, **delta: Any) -> bytes:
        return self._frame(self._chunk(choices=[ChunkChoice(delta=ChunkDelta(**delta))]))

    def _tool_piece(self, event: ToolCallDelta) -> ChatToolCallChunk:
        if event.index in self._named:
            return ChatToolCallChunk(index=event.index, function={"arguments": event.arguments})
        self._named.add(event.index)
        return ChatToolCallChunk(
            index=event.index,
            id=event.id,
            type="function",
            function={"name": event.name or "", "arguments": event.arguments},
        )

    def frames(self, event: StreamOutput) -> list[bytes]:
        frames = []
        if not self._opened and not isinstance(event, StreamFailed):
            self._opened = True  # OpenAI's first chunk names the role
            frames.append(self._delta(role="assistant", content=""))
        if isinstance(event, StreamDelta):
            frames.append(self._delta(content=event.text))
        elif isinstance(event, ToolCallDelta):
            frames.append(self._delta(tool_calls=[self._tool_piece(event)]))
        elif isinstance(event, ReasoningDelta):
            if event.text:  # OpenAI-style clients show reasoning text; signatures have no field
                frames.append(self._delta(reasoning_content=event.text))
        elif isinstance(event, CompletionEnvelope):
            finish = ChunkChoice(
                delta=ChunkDelta(), finish_reason=_finish(event.response.finish_reason)
            )
            final = self._chunk(
                choices=[finish],
                provenance=event.provenance,
                job_id=event.job_id,
                signature=event.signature,
                parsed=event.parsed,
            )
            frames.append(self._frame(final))
            if self._usage:
                frames.append(
                    self._frame(self._chunk(choices=[], usage=_usage(event.response.usage)))
                )
            frames.append(b"data: [DONE]\n\n")
        else:  # OpenAI reports a failure mid-stream as an `error` object in a data event
            body = error_json(error_body(event.error, request_id=self._request_id))
            frames.append(b"data: " + json_bytes(body) + b"\n\n")
        return frames


@router.post(
    CHAT_COMPLETIONS,
    operation_id="createChatCompletion",
    summary="OpenAI Chat Completions: any model, `pattern/<name>`, tools, structured output",
    response_model=ChatCompletion,
    responses={
        200: {
            "description": 'The `chat.completion`; with `"stream": true`, Server-Sent Events of '
            "`chat.completion.chunk` objects (the one with `finish_reason` carries `provenance` "
            'and `job_id`), then `data: [DONE]`; a failure mid-stream is a `data: {"error": …}` '
            "event.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        **error_responses(400, 404, 429, 502, 503, 504),
    },
)
async def create_chat_completion(
    body: ChatCompletionRequest, completer: CompleterDep
) -> ChatCompletion | Response:
    door = await off_loop(lambda: door_request(body))
    render = await off_loop(lambda: to_render_request(door))
    request_id, created = completer.request_id, int(time.time())
    ignored = _ignored(body)
    headers = {IGNORED_HEADER: ",".join(ignored)} if ignored else {}
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        chunks = _Chunks(
            request_id=request_id, created=created, model=body.model, usage=include_usage
        )
        return await completer.stream(render, frames=chunks.frames, headers=headers)
    envelope = await completer.complete(render)
    if dropped := dropped_params(door.params, envelope.params):
        headers[DROPPED_HEADER] = ",".join(dropped)
    answer = envelope.response
    completion = ChatCompletion(
        id=f"chatcmpl-{request_id}",
        created=created,
        model=body.model,
        choices=[Choice(message=_assistant(answer), finish_reason=_finish(answer.finish_reason))],
        usage=_usage(answer.usage),
        provenance=envelope.provenance,
        job_id=envelope.job_id,
        signature=envelope.signature,
        parsed=envelope.parsed,
    )
    # Serialised once, here (FastAPI would validate and dump the response model again).
    return GatewayJSONResponse(completion, headers=headers)


# --- models ----------------------------------------------------------------------------------


def _model_list(settings: Settings, providers: ProvidersDep, catalog: CatalogDep) -> ModelList:
    usable = {name for name, configured in providers.status().items() if configured}
    patterns = catalog.loadable()
    named = [
        *(each.model for each in configured_models(settings) if each.kind != "alias_target"),
        *(model for info in patterns for _, model in info.meta.named_models),
    ]
    models = [
        ModelEntry(id=model, created=0, owned_by=model.split("/", 1)[0])
        for model in dict.fromkeys(m for m in named if m and "/" in m)  # first mention first
        if model.split("/", 1)[0] in usable
    ]
    models += [
        ModelEntry(id=f"{PATTERN_PREFIX}{info.name}", created=0, owned_by="gateway")
        for info in patterns
    ]
    return ModelList(data=models)


@router.get(
    MODELS,
    operation_id="listModels",
    summary="OpenAI model list: the configured models of configured providers, and patterns",
    response_model=ModelList,
)
async def list_models(
    settings: SettingsDep, providers: ProvidersDep, catalog: CatalogDep
) -> ModelList:
    return _model_list(settings, providers, catalog)


@router.get(
    MODELS + "/{model_id:path}",
    operation_id="retrieveModel",
    summary="One model: a listed one, or any id the alias map sends to a configured provider",
    response_model=ModelEntry,
    responses=error_responses(404),
)
async def retrieve_model(
    model_id: Annotated[str, Path(pattern=CHAT_MODEL)],
    settings: SettingsDep,
    providers: ProvidersDep,
    catalog: CatalogDep,
) -> ModelEntry:
    listed = _model_list(settings, providers, catalog)
    found = next((entry for entry in listed.data if entry.id == model_id), None)
    if found is not None:
        return found
    if not model_id.startswith(PATTERN_PREFIX):
        try:
            provider, _ = split_model(
                model_id, provider_names(settings), ModelAliases(settings.model_aliases)
            )
        except InvalidModel:
            provider = None
        if provider is not None and providers.status().get(provider, False):
            return ModelEntry(id=model_id, created=0, owned_by=provider)
    raise InvalidModel(
        f"The model {model_id!r} does not exist here: GET /v1/models lists what is served."
    )
