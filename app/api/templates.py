"""Versioned database templates: create a version, list, get, activate."""

from __future__ import annotations

from fastapi import APIRouter, status
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import CanComplete, IsAdmin, RendererDep, TemplatesDep
from app.api.errors import error_responses
from app.api.params import SlugPath, SlugQuery, VersionPath
from app.catalog.templates import store_new_template
from app.schemas import TemplateCreate, TemplateVersion

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
    body: TemplateCreate, templates: TemplatesDep, renderer: RendererDep
) -> TemplateVersion:
    return await store_new_template(renderer, templates, body)


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
    summary="Make this version the active variant of (name, role)",
    responses=error_responses(404, 409),
)
async def activate_template_version(
    name: SlugPath, role: SlugPath, version: VersionPath, templates: TemplatesDep
) -> TemplateVersion:
    return await templates.activate(name, role, version)
