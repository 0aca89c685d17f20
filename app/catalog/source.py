"""What a pattern file, a database template or the fallback prompt rendered into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.routing.capabilities import Requirement
from app.schemas import Message, ModelParams, ResponseFormat, SourceKind, ToolSet

DATABASE_BASE_PATH = "database"


@dataclass(frozen=True, slots=True)
class RenderedSource:
    """The rendered task plus everything provenance and the audit record need to prove it.

    `examples` are the pattern's own messages; `user` is the final user message (the caller's
    text verbatim, or the pattern's templated user block), None when there is none (a built-in
    chat whose conversation does not end with plain user text).
    """

    kind: SourceKind
    name: str
    base_path: str
    content_hash: str
    system: str
    variables: dict[str, Any]
    user: str | None
    examples: tuple[Message, ...] = ()
    output_schema: dict[str, Any] | None = None
    # The caller's own output format (the chat doors' `response_format`): `output_schema` is then
    # its schema, checked but not a pattern's contract, so a stream of it is allowed.
    response_format: ResponseFormat | None = None
    tools: ToolSet | None = None
    requires: tuple[Requirement, ...] = ()
    snippet_labels: tuple[str, ...] = ()
    model_hint: str | None = None
    tags: tuple[str, ...] = ()
    fallbacks: tuple[str, ...] = ()  # the pattern's own fallback chain
    cache: bool = False  # front-matter `cache: true`; templates have none, so never by default
    # The system prompt may be a provider's prompt-cache breakpoint: a pattern's, unless its
    # front-matter says `prompt_cache: false`; never a caller's (the doors carry their markers).
    prompt_cache: bool = False
    params: ModelParams = field(default_factory=ModelParams)
    template_id: int | None = None
    role: str | None = None
    version: int | None = None
    label: str | None = None  # the template label that picked `version` (None: pinned)

    @property
    def tasks(self) -> tuple[str, ...]:
        """What per-task settings match: the pattern's name, then its tags in order."""
        return (self.name, *self.tags)

    @property
    def provenance_name(self) -> str:
        """Patterns by name; templates as `template:<name>:<role>:v<version>`."""
        if self.kind == "template":
            return f"template:{self.name}:{self.role}:v{self.version}"
        if self.kind == "fallback":
            return f"fallback:{self.name}:{self.role}"
        return self.name
