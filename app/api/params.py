"""Path and query parameters, validated where they enter: the same alphabets as the bodies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Path, Query

from app.schemas import INT32_MAX, JOB_ID, SLUG, RenderRequest
from app.schemas.keys import TEAM_NAME

JobIdPath = Annotated[str, Path(pattern=JOB_ID, description="32 lowercase hex characters.")]
SlugPath = Annotated[str, Path(pattern=SLUG, description="Letters, digits, `_`, `.`, `-`.")]
KeyIdPath = Annotated[
    str, Path(pattern=r"^[0-9a-f]{16}$", description="The id `GET /v1/keys` lists (16 hex).")
]
TeamPath = Annotated[str, Path(pattern=TEAM_NAME, description="Lowercase letters, digits, `_.-`.")]
VersionPath = Annotated[int, Path(ge=1, le=INT32_MAX, description="A stored version number.")]
SlugQuery = Annotated[str | None, Query(pattern=SLUG)]
# Tags are free text, but never control characters (NUL included) and never long.
TagQuery = Annotated[
    str | None,
    Query(pattern=r"^[^\x00-\x1f\x7f]{1,100}$", description="Exact tag, case-insensitive."),
]

# --- template labels (release flow) ---
LabelHeader = Annotated[
    str | None,
    Header(
        alias="x-genai-label",
        pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$",
        description="The template label to answer with (default `production`); a `label` in "
        "the body wins over this header. Ignored for patterns and pinned versions.",
    ),
]


def with_label(body: RenderRequest, header: str | None) -> RenderRequest:
    """The body's own label wins; the header only fills a template request that names none."""
    if header is None or body.template is None or body.label or body.template.label:
        return body
    return body.model_copy(update={"label": header})
