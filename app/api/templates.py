"""Versioned database templates: create a version, list, get; labels: move, list, history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response, status
from pydantic import BaseModel
from starlette.convertors import Convertor, register_url_convertor

from app.api.body import OffLoopBodyRoute
from app.api.deps import (
    AdminLogDep,
    CallerDep,
    CanComplete,
    CompleterDep,
    IsAdmin,
    RendererDep,
    ServiceDep,
    TemplateLabelsDep,
    TemplatesDep,
)
from app.api.errors import error_responses
from app.api.params import SlugPath, SlugQuery, VersionPath
from app.audit.events import template_detail, template_target
from app.catalog.labels import author_of
from app.catalog.templates import store_new_template
from app.release import PatternTestRun, SuiteReport, run_pattern_suite, suite_name, version_ref
from app.schemas import (
    LabelHistory,
    LabelMoveIn,
    RenderRequest,
    RenderResult,
    TemplateCreate,
    TemplateLabelInfo,
    TemplateLabelList,
    TemplateVersion,
)
from app.schemas.labels import LABEL

router = APIRouter(prefix="/v1/templates", tags=["templates"], route_class=OffLoopBodyRoute)


class TemplateVersionList(BaseModel):
    versions: list[TemplateVersion]


@router.post(
    "",
    operation_id="createTemplateVersion",
    status_code=status.HTTP_201_CREATED,
    dependencies=[IsAdmin],
    summary="Store the next immutable version of a template",
    responses=error_responses(409, 422),
)
async def create_template_version(
    body: TemplateCreate,
    labels: TemplateLabelsDep,
    renderer: RendererDep,
    caller: CallerDep,
    admin_log: AdminLogDep,
) -> TemplateVersion:
    stored = await store_new_template(renderer, labels, body, author=author_of(caller))
    await admin_log.record(
        "template.version_created",
        target=template_target(stored.name, stored.role),
        detail=template_detail(stored),
    )
    return stored


@router.get(
    "",
    operation_id="listTemplateVersions",
    dependencies=[CanComplete],
    summary="Template versions, filterable",
)
async def list_template_versions(
    templates: TemplatesDep,
    name: SlugQuery = None,
    role: SlugQuery = None,
) -> TemplateVersionList:
    return TemplateVersionList(versions=await templates.list_versions(name, role))


@router.get(
    "/{name}/{role}/versions/{version}",
    operation_id="getTemplateVersion",
    dependencies=[CanComplete],
    summary="One template version",
    responses=error_responses(404),
)
async def get_template_version(
    name: SlugPath, role: SlugPath, version: VersionPath, templates: TemplatesDep
) -> TemplateVersion:
    return await templates.get(name, role, version)


@router.post(
    "/{name}/{role}/versions/{version}/activate",
    operation_id="activateTemplateVersion",
    dependencies=[IsAdmin],
    summary="Deprecated: move the `production` label to this version",
    description="Kept for old clients; `PUT /v1/templates/{name}/{role}/labels/production` "
    "does the same with a message in the history.",
    deprecated=True,
    responses=error_responses(404, 409, 422),
)
async def activate_template_version(
    name: SlugPath,
    role: SlugPath,
    version: VersionPath,
    labels: TemplateLabelsDep,
    caller: CallerDep,
    admin_log: AdminLogDep,
) -> TemplateVersion:
    activated = await labels.activate(name, role, version, author=author_of(caller))
    await admin_log.record(
        "template.activated", target=template_target(name, role), detail={"version": version}
    )
    return activated


@router.post(
    "/{name}/{role}/versions/{version}/test",
    operation_id="testTemplateVersion",
    dependencies=[CanComplete],
    summary="Run a template version's test cases: its rendered prompts, and with live: true "
    "its answers",
    responses=error_responses(404, 422),
)
async def test_template_version(
    name: SlugPath,
    role: SlugPath,
    version: VersionPath,
    body: PatternTestRun,
    templates: TemplatesDep,
    service: ServiceDep,
    caller: CallerDep,
    completer: CompleterDep,
) -> SuiteReport:
    """The same run as the release gate's for a protected label (non-live), or, with
    `live: true`, each case that asserts an answer completed like any request (audited)."""
    stored = await templates.get(name, role, version)

    async def render(request: RenderRequest) -> RenderResult:
        return await service.render(request, caller)

    return await run_pattern_suite(
        suite_name(stored),
        list(stored.tests),
        render=render,
        complete=completer.complete if body.live else None,
        model=body.model,
        template=version_ref(stored),
    )


# --- labels -----------------------------------------------------------------------------------


class _LabelSegment(Convertor[str]):
    """A path segment that is never `history`: `…/labels/history` is the history route alone,
    so a PUT or DELETE there is a 405, not a move of a label named `history`."""

    regex = r"(?!history/?$)[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("template_label", _LabelSegment())

LabelPath = Annotated[
    str, Path(pattern=LABEL, description="Lowercase letters, digits, `_.-` (not `history`).")
]


@router.put(
    "/{name}/{role}/labels/{label:template_label}",
    operation_id="moveTemplateLabel",
    dependencies=[IsAdmin],
    summary="Point a label at a version, or split it between two (a canary)",
    description="Recorded with the calling key, the time, from and to, and the message. "
    "A protected label (`production` by default) only moves to versions whose pattern tests "
    "pass (`422 tests_failed`). A rollback is a move back.",
    responses=error_responses(404, 409, 422),
)
async def move_template_label(
    name: SlugPath,
    role: SlugPath,
    label: LabelPath,
    body: LabelMoveIn,
    labels: TemplateLabelsDep,
    caller: CallerDep,
    admin_log: AdminLogDep,
) -> TemplateLabelInfo:
    moved = await labels.move(name, role, label, body, author=author_of(caller))
    await admin_log.record(
        "label.moved", target=template_target(name, role, label), detail=body.model_dump()
    )
    return moved


@router.get(
    "/{name}/{role}/labels",
    operation_id="listTemplateLabels",
    dependencies=[CanComplete],
    summary="The labels of (name, role) and where each points",
)
async def list_template_labels(
    name: SlugPath, role: SlugPath, labels: TemplateLabelsDep
) -> TemplateLabelList:
    return TemplateLabelList(labels=await labels.labels_of(name, role))


@router.get(
    "/{name}/{role}/labels/history",
    operation_id="templateLabelHistory",
    dependencies=[CanComplete],
    summary="Every move of the labels of (name, role), newest first",
)
async def template_label_history(
    name: SlugPath,
    role: SlugPath,
    labels: TemplateLabelsDep,
    label: Annotated[str | None, Query(pattern=LABEL, description="Only this label.")] = None,
) -> LabelHistory:
    return LabelHistory(moves=await labels.history(name, role, label))


@router.delete(
    "/{name}/{role}/labels/{label:template_label}",
    operation_id="deleteTemplateLabel",
    dependencies=[IsAdmin],
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Remove a label (never a protected one such as `production`)",
    responses=error_responses(404, 409),
)
async def delete_template_label(
    name: SlugPath,
    role: SlugPath,
    label: LabelPath,
    labels: TemplateLabelsDep,
    caller: CallerDep,
    admin_log: AdminLogDep,
    message: Annotated[str, Query(min_length=1, max_length=2000)] = "deleted",
) -> Response:
    await labels.delete(name, role, label, message=message, author=author_of(caller))
    await admin_log.record(
        "label.deleted", target=template_target(name, role, label), detail={"message": message}
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT)
