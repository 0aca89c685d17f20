"""Database templates through the same sandboxed engine: strict contract, blueprint, fallback."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache, partial
from typing import Any

from app.catalog.contract import declaration_problems, require_exactly
from app.catalog.engine import apply_template, compile_template
from app.catalog.labels import TemplateLabels
from app.catalog.renderer import TemplateRenderer
from app.errors import (
    InvalidPattern,
    InvalidTemplate,
    PatternRenderError,
    RenderLimitExceeded,
    SandboxViolation,
)
from app.schemas import TemplateCreate, TemplateVersion
from app.tracking import canonical_json, sha256_hex

FALLBACK_TEMPLATE = "ROLE: {{ role }}\nINPUT: {{ input_json }}"
FALLBACK_SHA256 = sha256_hex(FALLBACK_TEMPLATE.encode("utf-8"))
FORMATTER_ROLE = "formatter"
BLUEPRINT_SEPARATOR = "--- STRUCTURE BLUEPRINT INSTRUCTIONS ---"
SCHEMA_HEADING = "SCHEMA JSON:"


# Versions are immutable, so a compiled body can be cached by its text.
_compiled = lru_cache(maxsize=1024)(compile_template)


def _check_new_template(name: str, text: str, variables: Sequence[str]) -> None:
    problems = [
        f"variable {v!r} is declared twice"
        for v in sorted({v for v in variables if list(variables).count(v) > 1})
    ]
    try:
        template, referenced = compile_template(name, text)
    except InvalidPattern as exc:
        raise InvalidTemplate(f"Template {name!r} is invalid", exc.problems) from None
    problems += declaration_problems(referenced, variables)
    if problems:
        raise InvalidTemplate(f"Template {name!r} is invalid", problems)
    # A trial render with placeholder strings: a body that blows a budget whatever its inputs
    # is refused now, before it can be activated. Failures that real values could avoid (a
    # placeholder of the wrong type, an undefined attribute) do not count against the template.
    placeholders = {variable: f"<{variable}>" for variable in variables}
    try:
        apply_template(name, template, referenced, placeholders)
    except (RenderLimitExceeded, SandboxViolation):
        raise
    except PatternRenderError:
        pass


async def check_new_template(
    renderer: TemplateRenderer, name: str, text: str, variables: Sequence[str]
) -> None:
    """Refuse a version whose body and declared variables disagree, or whose trial render breaks
    a render budget (RenderLimitExceeded) or the sandbox, before it is stored."""
    await renderer.run(name, partial(_check_new_template, name, text, variables))


async def store_new_template(
    renderer: TemplateRenderer, labels: TemplateLabels, new: TemplateCreate, *, author: str
) -> TemplateVersion:
    """Check, then store: the one way a new version reaches the registry, so POST /v1/templates
    and `genai templates create` can never hold a template to different rules."""
    await check_new_template(renderer, new.name, new.template, new.variables)
    return await labels.create_version(new, author=author)


def _blueprint(version: TemplateVersion) -> str:
    """Extra structure for the formatter role only; other roles are never touched."""
    if version.role != FORMATTER_ROLE:
        return ""
    parts = []
    if version.blueprint_instructions and version.blueprint_instructions.strip():
        parts.append(f"\n\n{BLUEPRINT_SEPARATOR}\n{version.blueprint_instructions.strip()}")
    if version.blueprint_schema:
        schema = json.dumps(version.blueprint_schema, sort_keys=True, indent=2, ensure_ascii=False)
        parts.append(f"\n\n{SCHEMA_HEADING}\n{schema}")
    return "".join(parts)


def render_template_version(version: TemplateVersion, variables: Mapping[str, Any]) -> str:
    """Strict contract: the supplied variables must be exactly the declared ones."""
    require_exactly(version.name, version.variables, variables.keys())
    template, referenced = _compiled(version.name, version.template)
    return apply_template(version.name, template, referenced, variables) + _blueprint(version)


def render_fallback(role: str, variables: Mapping[str, Any]) -> str:
    """The prompt used when no template is active for a role: the role and the inputs as JSON."""
    template, referenced = _compiled("fallback", FALLBACK_TEMPLATE)
    return apply_template(
        "fallback", template, referenced, {"role": role, "input_json": canonical_json(variables)}
    )
