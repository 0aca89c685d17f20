"""Console page 3, snippets (admin): the library by tag, one snippet with its versions, and the
forms that create a snippet or store its next version, all through `/v1/snippets`."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

from fastapi import APIRouter, Query
from starlette.datastructures import FormData
from starlette.responses import RedirectResponse, Response

from app.console.api import ApiError
from app.console.guard import AdminVisitDep, FormDep, Refused, Visit
from app.console.pages.forms import said, status_of
from app.schemas.base import SLUG

router = APIRouter()

# The snippet kinds the seeds manage centrally; a snippet's kind is the first such tag.
KINDS = ("persona", "tone", "audience", "style", "layout")
_SLUG = re.compile(SLUG)
_MAX_FIELD = 200_000  # a form field longer than any snippet the API accepts is cut, not echoed


def kind_of(tags: list[str]) -> str:
    return next((tag for tag in tags if tag.casefold() in KINDS), "")


@dataclass(frozen=True, slots=True)
class SnippetForm:
    """The create/edit form's fields as typed, so a refused form comes back as it was sent."""

    identifier: str = ""
    name: str = ""
    description: str = ""
    text: str = ""
    tags: str = ""
    metadata: str = "{}"
    active: bool = True

    @classmethod
    def posted(cls, form: FormData) -> SnippetForm:
        def text(name: str) -> str:
            value = form.get(name)
            return value[:_MAX_FIELD] if isinstance(value, str) else ""

        named = {f.name: text(f.name) for f in fields(cls) if f.name != "active"}
        return cls(**named, active=form.get("active") == "on")

    @classmethod
    def of(cls, snippet: dict[str, Any]) -> SnippetForm:
        return cls(
            identifier=str(snippet.get("identifier", "")),
            name=str(snippet.get("name", "")),
            description=str(snippet.get("description", "")),
            text=str(snippet.get("text", "")),
            tags=", ".join(str(tag) for tag in snippet.get("tags") or []),
            metadata=json.dumps(snippet.get("metadata") or {}, indent=2, ensure_ascii=False),
            active=bool(snippet.get("active", True)),
        )

    def body(self) -> dict[str, Any]:
        """The API's SnippetIn; ValueError when the metadata is not a JSON object."""
        try:
            metadata = json.loads(self.metadata) if self.metadata.strip() else {}
        except ValueError as exc:
            raise ValueError(f"Metadata is not valid JSON: {exc}") from None
        if not isinstance(metadata, dict):
            raise ValueError('Metadata must be a JSON object, like {"tone": "formal"}.')
        return {
            "identifier": self.identifier.strip(),
            "name": self.name.strip(),
            "description": self.description,
            "text": self.text,
            "tags": [tag.strip() for tag in self.tags.split(",") if tag.strip()],
            "metadata": metadata,
            "active": self.active,
        }


def _checked(identifier: str) -> str:
    """Only a well-formed identifier reaches the API path (no `..`, no other route)."""
    if not _SLUG.fullmatch(identifier):
        raise Refused(404, "No such snippet", "A snippet identifier is letters, digits, _ . -")
    return identifier


@router.get("/snippets")
async def snippet_list(visit: AdminVisitDep, tag: str | None = Query(default=None)) -> Response:
    """The library, or the snippets with one tag (an ill-formed tag: the API's refusal page)."""
    every = (await visit.api.get("/v1/snippets", include_inactive="true"))["snippets"]
    shown = every
    if tag:  # the API's own tag match (whole tag, any case)
        shown = (await visit.api.get("/v1/snippets", tag=tag, include_inactive="true"))["snippets"]
    counts = Counter(t.casefold() for snippet in every for t in snippet["tags"])
    return visit.render(
        "snippets.html",
        snippets=shown,
        tag=tag or "",
        tags=sorted(counts.items()),
        kind_of=kind_of,
    )


@router.get("/snippets/new")
async def new_snippet(visit: AdminVisitDep) -> Response:
    return visit.render("snippet_new.html", values=SnippetForm(), error=None)


@router.post("/snippets")
async def create_snippet(visit: AdminVisitDep, form: FormDep) -> Response:
    values = SnippetForm.posted(form)
    try:
        created = await visit.api.call("POST", "/v1/snippets", json=values.body())
    except (ValueError, ApiError) as problem:
        return visit.render(
            "snippet_new.html", status=status_of(problem), values=values, error=said(problem)
        )
    return RedirectResponse(f"/console/snippets/{created['identifier']}", status_code=303)


async def _shown(visit: Visit, identifier: str) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The snippet as served (or, hidden or retired, its latest version) and its versions."""
    try:
        versions: dict[str, Any] | None = await visit.api.get(f"/v1/snippets/{identifier}/versions")
    except ApiError as missing:
        if missing.status != 404:
            raise
        versions = None  # a file snippet: no stored versions
    try:
        return await visit.api.get(f"/v1/snippets/{identifier}"), versions
    except ApiError as missing:
        if missing.status != 404 or not versions or not versions["versions"]:
            raise
        return versions["versions"][-1], versions


@router.get("/snippets/{identifier}")
async def snippet_page(visit: AdminVisitDep, identifier: str) -> Response:
    snippet, versions = await _shown(visit, _checked(identifier))
    return _page(visit, snippet, versions, SnippetForm.of(snippet), error=None)


@router.post("/snippets/{identifier}")
async def save_snippet(visit: AdminVisitDep, identifier: str, form: FormDep) -> Response:
    """Store the edited snippet as its next version (PUT), or show the form again with why not."""
    _checked(identifier)
    values = SnippetForm.posted(form)
    try:
        body = {**values.body(), "identifier": identifier}
        await visit.api.call("PUT", f"/v1/snippets/{identifier}", json=body)
    except (ValueError, ApiError) as problem:
        snippet, versions = await _shown(visit, identifier)
        return _page(
            visit, snippet, versions, values, error=said(problem), status=status_of(problem)
        )
    return RedirectResponse(f"/console/snippets/{identifier}?saved=1", status_code=303)


def _page(
    visit: Visit,
    snippet: dict[str, Any],
    versions: dict[str, Any] | None,
    values: SnippetForm,
    *,
    error: str | None,
    status: int = 200,
) -> Response:
    return visit.render(
        "snippet.html",
        status=status,
        snippet=snippet,
        versions=versions,
        values=values,
        error=error,
        saved=visit.request.query_params.get("saved") == "1" and error is None,
        kind=kind_of(snippet.get("tags") or []),
    )
