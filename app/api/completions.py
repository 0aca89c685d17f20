"""POST /v1/completions and its dry run, POST /v1/render."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import CanComplete, RequestIdDep, ServiceDep
from app.api.disconnect import cancel_on_disconnect
from app.api.errors import error_responses
from app.schemas import CompletionEnvelope, RenderRequest, RenderResult

router = APIRouter(prefix="/v1", tags=["completions"], dependencies=[CanComplete])


@router.post(
    "/completions",
    operation_id="createCompletion",
    summary="Render a pattern, call the chosen model, return the envelope with provenance",
    responses=error_responses(404, 422, 429, 502, 503, 504),
)
async def create_completion(
    body: RenderRequest, request: Request, service: ServiceDep, request_id: RequestIdDep
) -> CompletionEnvelope:
    return await cancel_on_disconnect(request, service.complete(body, request_id=request_id))


@router.post(
    "/render",
    operation_id="renderPrompt",
    summary="Dry run: the prompt, hashes and model choice, without calling a provider",
    responses=error_responses(404, 422),
)
async def render_prompt(body: RenderRequest, service: ServiceDep) -> RenderResult:
    return await service.render(body)
