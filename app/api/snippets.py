"""The snippet library: reusable prompt fragments, managed once and used by many patterns.

Database snippets are versioned: an edit stores the next version and serves it; earlier versions
stay for replay and can be served again (activate).
"""

from __future__ import annotations

from fastapi import APIRouter, Query, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import AdminLogDep, CanComplete, IsAdmin, SnippetsDep
from app.api.errors import error_responses
from app.api.params import SlugPath, TagQuery, VersionPath
from app.audit.events import snippet_detail, snippet_target
from app.schemas import Snippet, SnippetIn, SnippetVersions

router = APIRouter(prefix="/v1/snippets", tags=["snippets"], route_class=OffLoopBodyRoute)


class SnippetList(BaseModel):
    snippets: list[Snippet]


@router.post(
    "",
    operation_id="createSnippet",
    status_code=status.HTTP_201_CREATED,
    dependencies=[IsAdmin],
    summary="Store a database snippet (it overrides a file snippet of the same identifier)",
    responses=error_responses(409, 422),
)
async def create_snippet(body: SnippetIn, snippets: SnippetsDep, admin_log: AdminLogDep) -> Snippet:
    created = await snippets.create(body)
    await admin_log.record(
        "snippet.created", target=snippet_target(created.identifier), detail=snippet_detail(created)
    )
    return created


@router.get(
    "",
    operation_id="listSnippets",
    dependencies=[CanComplete],
    summary="Snippets, optionally by tag",
)
async def list_snippets(
    snippets: SnippetsDep,
    tag: TagQuery = None,
    include_inactive: bool = Query(default=False),
) -> SnippetList:
    return SnippetList(snippets=await snippets.list(tag=tag, include_inactive=include_inactive))


@router.get(
    "/{identifier}",
    operation_id="getSnippet",
    dependencies=[CanComplete],
    summary="One active snippet (a database one: its live version, with `version`)",
    responses=error_responses(404),
)
async def get_snippet(identifier: SlugPath, snippets: SnippetsDep) -> Snippet:
    return await snippets.get(identifier)


@router.put(
    "/{identifier}",
    operation_id="updateSnippet",
    dependencies=[IsAdmin],
    summary="Store the next version of a snippet and serve it; for a file snippet this stores "
    "a database override",
    responses=error_responses(404, 409, 422),
)
async def update_snippet(
    identifier: SlugPath, body: SnippetIn, snippets: SnippetsDep, admin_log: AdminLogDep
) -> Snippet:
    if body.identifier != identifier:
        raise RequestValidationError(
            [
                {
                    "loc": ("body", "identifier"),
                    "msg": f"must equal the identifier in the path, {identifier!r}",
                    "type": "value_error",
                }
            ]
        )
    updated = await snippets.update(identifier, body)
    await admin_log.record(
        "snippet.updated", target=snippet_target(identifier), detail=snippet_detail(updated)
    )
    return updated


@router.delete(
    "/{identifier}",
    operation_id="deleteSnippet",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[IsAdmin],
    summary="Retire a database snippet: no version is served, all are kept for replay "
    "(file snippets are removed by deleting the file)",
    responses=error_responses(404),
)
async def delete_snippet(
    identifier: SlugPath, snippets: SnippetsDep, admin_log: AdminLogDep
) -> None:
    await snippets.delete(identifier)
    await admin_log.record("snippet.deleted", target=snippet_target(identifier))


@router.get(
    "/{identifier}/versions",
    operation_id="listSnippetVersions",
    dependencies=[CanComplete],
    summary="Every stored version of a database snippet, oldest first",
    responses=error_responses(404),
)
async def list_snippet_versions(identifier: SlugPath, snippets: SnippetsDep) -> SnippetVersions:
    return await snippets.versions(identifier)


@router.get(
    "/{identifier}/versions/{version}",
    operation_id="getSnippetVersion",
    dependencies=[CanComplete],
    summary="One stored version of a database snippet, served or not",
    responses=error_responses(404),
)
async def get_snippet_version(
    identifier: SlugPath, version: VersionPath, snippets: SnippetsDep
) -> Snippet:
    return await snippets.version(identifier, version)


@router.post(
    "/{identifier}/versions/{version}/activate",
    operation_id="activateSnippetVersion",
    dependencies=[IsAdmin],
    summary="Serve this stored version (a rollback); it also restores a deleted snippet",
    responses=error_responses(404, 409),
)
async def activate_snippet_version(
    identifier: SlugPath, version: VersionPath, snippets: SnippetsDep, admin_log: AdminLogDep
) -> Snippet:
    activated = await snippets.activate(identifier, version)
    await admin_log.record(
        "snippet.activated", target=snippet_target(identifier), detail=snippet_detail(activated)
    )
    return activated
