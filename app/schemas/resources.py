"""What the catalog and its operators manage: patterns (read), database templates and snippets
(API keys and teams: `keys.py`)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, StrictBool

from app.schemas.base import SLUG, FrozenModel, InputModel
from app.schemas.pattern_tests import PatternTestCase, unique_case_names
from app.schemas.requests import ModelParams


class PatternSummary(FrozenModel):
    name: str
    base_path: str | None = Field(
        default=None,
        description="The catalog root the file is read from; null when it could not be loaded.",
    )
    description: str
    tags: list[str]
    model_hint: str | None
    content_hash: str | None = Field(
        description="SHA-256 of the pattern file's bytes (plus its output_schema file's when the "
        "schema lives in a sibling file); null when the file could not be loaded."
    )
    valid: bool = Field(
        default=True,
        description="false when the file fails to load (unreadable, bad front-matter, or a body "
        "known not to compile); `problems` says why. Such a pattern is listed, not dropped.",
    )
    problems: list[str] = Field(
        default_factory=list, description="Why the pattern cannot be used; empty when valid."
    )


class PatternDetail(PatternSummary):
    content_hash: str = Field(
        description="SHA-256 of the pattern file's bytes (plus its output_schema file's when the "
        "schema lives in a sibling file)."
    )
    base_path: str
    variables: dict[str, str | None] = Field(
        description="Declared variables and their descriptions."
    )
    required_variables: list[str]
    defaults: dict[str, Any]
    params: ModelParams
    fallbacks: list[str] = Field(
        default_factory=list, description="The pattern's own fallback chain (provider/model)."
    )
    cache: bool = Field(
        default=False, description="Identical repeats are answered from the response cache."
    )
    front_matter: dict[str, Any] = Field(
        default_factory=dict, description="The file's YAML front-matter, as written."
    )
    template: str = Field(
        default="", description="The Jinja2 body after the front-matter, role markers included."
    )
    tests: list[PatternTestCase] = Field(
        default_factory=list,
        description="The pattern's test cases: its front-matter's, then its `.tests.yaml` file's.",
    )
    test_problems: list[str] = Field(
        default_factory=list,
        description="Why the test cases cannot be read (`FILE:LINE: problem`); empty if they can.",
    )


class TemplateCreate(InputModel):
    """A new version of a database template; its text is immutable once stored."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "support-reply",
                    "role": "writer",
                    "template": "Answer as {{ brand }} support, in {{ language }}.",
                    "variables": ["brand", "language"],
                    "activate": True,
                }
            ]
        },
    )

    name: str = Field(pattern=SLUG)
    role: str = Field(pattern=SLUG)
    template: str = Field(min_length=1, max_length=100_000)
    variables: list[str] = Field(default_factory=list, description="The exact, ordered contract.")
    blueprint_schema: dict[str, Any] | None = None
    blueprint_instructions: str | None = None
    activate: StrictBool = Field(
        default=False,
        description="Move the `production` label to this version; the first version always "
        "gets it.",
    )
    tests: Annotated[list[PatternTestCase], AfterValidator(unique_case_names)] = Field(
        default_factory=list,
        max_length=200,
        description="Pattern test cases this version must pass before a protected label "
        "(e.g. `production`) may point at it.",
    )


class TemplateVersion(FrozenModel):
    id: int
    name: str
    role: str
    version: int
    template: str
    variables: list[str]
    active: bool = Field(
        default=False, description="True when the `production` label points at this version."
    )
    checksum: str
    blueprint_schema: dict[str, Any] | None
    blueprint_instructions: str | None
    created_at: dt.datetime
    updated_at: dt.datetime
    labels: list[str] = Field(
        default_factory=list,
        description="The labels pointing at this version (or splitting to it).",
    )
    tests: list[PatternTestCase] = Field(default_factory=list)


class SnippetIn(InputModel):
    """A reusable prompt fragment (persona, tone, audience, style, layout); edits add versions."""

    identifier: str = Field(pattern=SLUG)
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    text: str = Field(min_length=1, max_length=50_000)
    tags: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    active: StrictBool = True


class Snippet(SnippetIn):
    source: Literal["database", "file"]
    version: int | None = Field(
        default=None, description="The database version (edits add versions); null for a file."
    )
    checksum: str | None = Field(default=None, description="`sha256:<hex>` of the text.")
    live: bool = Field(
        default=True, description="Whether this is the version served for its identifier."
    )
    created_at: dt.datetime | None = Field(
        default=None,
        description="When this version was stored (an edit stores a new one); null for a file.",
    )


class SnippetVersions(FrozenModel):
    """Every stored version of one database snippet, oldest first."""

    identifier: str
    live_version: int | None = Field(description="The version served; null once deleted.")
    versions: list[Snippet]
