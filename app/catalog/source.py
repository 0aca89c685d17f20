"""What a pattern file, a database template or the fallback prompt rendered into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from app.schemas import ModelParams

SourceKind = Literal["pattern", "template", "fallback"]
DATABASE_BASE_PATH = "database"


@dataclass(frozen=True, slots=True)
class RenderedSource:
    """The system text plus everything provenance and the audit record need to prove it."""

    kind: SourceKind
    name: str
    base_path: str
    content_hash: str
    system: str
    variables: dict[str, Any]
    model_hint: str | None = None
    params: ModelParams = field(default_factory=ModelParams)
    template_id: int | None = None
    role: str | None = None
    version: int | None = None

    @property
    def provenance_name(self) -> str:
        """Patterns by name; templates as `template:<name>:<role>:v<version>`."""
        if self.kind == "template":
            return f"template:{self.name}:{self.role}:v{self.version}"
        if self.kind == "fallback":
            return f"fallback:{self.name}:{self.role}"
        return self.name
