"""The snippet library: reusable prompt fragments, managed once and used by many patterns."""

from __future__ import annotations

from fastapi import APIRouter, Query, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from app.api.body import OffLoopBodyRoute
from app.api.deps import CanComplete, IsAdmin, SnippetsDep
from app.api.errors import error_responses
from app.api.params import SlugPath, TagQuery
from app.schemas import Snippet, SnippetIn

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
async def create_snippet(body: SnippetIn, snippets: SnippetsDep) -> Snippet:
    return await snippets.create(body)


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
    summary="One active snippet",
    responses=error_responses(404),
)
async def get_snippet(identifier: SlugPath, snippets: SnippetsDep) -> Snippet:
    return await snippets.get(identifier)


@router.put(
    "/{identifier}",
    operation_id="updateSnippet",
    dependencies=[IsAdmin],
    summary="Replace a snippet; for a file snippet this stores a database override",
    responses=error_responses(404, 409, 422),
)
async def update_snippet(identifier: SlugPath, body: SnippetIn, snippets: SnippetsDep) -> Snippet:
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
    return await snippets.update(identifier, body)


@router.delete(
    "/{identifier}",
    operation_id="deleteSnippet",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[IsAdmin],
    summary="Delete a database snippet (file snippets are removed by deleting the file)",
    responses=error_responses(404),
)
async def delete_snippet(identifier: SlugPath, snippets: SnippetsDep) -> None:
    await snippets.delete(identifier)
