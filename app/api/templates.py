"""Versioned database templates: create a version, list, get, activate."""

from __future__ import annotations

from fastapi import APIRouter, Query, status
from pydantic import BaseModel

from app.api.deps import TemplatesDep
from app.api.errors import error_responses
from app.catalog.templates import check_new_template
from app.schemas import TemplateCreate, TemplateVersion

router = APIRouter(prefix="/v1/templates", tags=["templates"])


class TemplateVersionList(BaseModel):
    versions: list[TemplateVersion]


@router.post(
    "",
    operation_id="createTemplateVersion",
    status_code=status.HTTP_201_CREATED,
    summary="Store the next immutable version of a template",
    responses=error_responses(409, 422),
)
async def create_template_version(body: TemplateCreate, templates: TemplatesDep) -> TemplateVersion:
    check_new_template(body.name, body.template, body.variables)
    return await templates.create_version(body)


@router.get("", operation_id="listTemplateVersions", summary="Template versions, filterable")
async def list_template_versions(
    templates: TemplatesDep,
    name: str | None = Query(default=None),
    role: str | None = Query(default=None),
) -> TemplateVersionList:
    return TemplateVersionList(versions=await templates.list_versions(name, role))


@router.get(
    "/{name}/{role}/versions/{version}",
    operation_id="getTemplateVersion",
    summary="One template version",
    responses=error_responses(404),
)
async def get_template_version(
    name: str, role: str, version: int, templates: TemplatesDep
) -> TemplateVersion:
    return await templates.get(name, role, version)


@router.post(
    "/{name}/{role}/versions/{version}/activate",
    operation_id="activateTemplateVersion",
    summary="Make this version the active variant of (name, role)",
    responses=error_responses(404, 409),
)
async def activate_template_version(
    name: str, role: str, version: int, templates: TemplatesDep
) -> TemplateVersion:
    return await templates.activate(name, role, version)
