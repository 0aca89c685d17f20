"""POST /v1/completions and its dry run, POST /v1/render."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.body import OffLoopBodyRoute
from app.api.deps import CallerDep, CanComplete, CompleterDep, ServiceDep
from app.api.errors import error_responses
from app.api.openapi import COMPLETION_EVENTS
from app.api.params import LabelHeader, with_label
from app.api.paths import COMPLETIONS, V1
from app.api.responses import GatewayJSONResponse
from app.schemas import CompletionEnvelope, RenderRequest, RenderResult

router = APIRouter(
    prefix=V1, tags=["completions"], dependencies=[CanComplete], route_class=OffLoopBodyRoute
)


@router.post(
    COMPLETIONS,
    operation_id="createCompletion",
    summary="Render a pattern, call the chosen model, return the envelope with provenance",
    response_model=CompletionEnvelope,
    responses={
        200: {
            "description": 'The envelope; with `"stream": true`, Server-Sent Events: `delta` '
            'events (`{"text": …}`), then one `envelope` event (the CompletionEnvelope) or '
            "one `error` event (the error body).",
            "content": {"text/event-stream": {"schema": COMPLETION_EVENTS}},
        },
        **error_responses(404, 422, 429, 502, 503, 504),
    },
)
async def create_completion(
    body: RenderRequest, completer: CompleterDep, label: LabelHeader = None
) -> CompletionEnvelope | Response:
    body = with_label(body, label)
    if body.stream:
        return await completer.stream(body)
    # Serialised once, here (FastAPI would validate and dump the response model again).
    return GatewayJSONResponse(await completer.complete(body))


@router.post(
    "/render",
    operation_id="renderPrompt",
    summary="Dry run: the prompt, hashes and model choice, without calling a provider",
    responses=error_responses(404, 422),
)
async def render_prompt(
    body: RenderRequest, service: ServiceDep, caller: CallerDep, label: LabelHeader = None
) -> RenderResult:
    body = with_label(body, label)
    return await service.render(body, caller)
