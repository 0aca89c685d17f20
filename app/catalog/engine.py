"""The one sandboxed Jinja2 environment: every template, file or database, renders through it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, UndefinedError, meta
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.errors import InvalidPattern, MissingVariables, PatternRenderError, SandboxViolation

# Immutable: templates cannot mutate the lists and dicts callers pass in.
_ENV = ImmutableSandboxedEnvironment(
    undefined=StrictUndefined,
    autoescape=False,
    keep_trailing_newline=False,
)


def compile_template(name: str, source: str) -> tuple[Template, frozenset[str]]:
    """Compile once; return the template and the variable names it references."""
    try:
        parsed = _ENV.parse(source)
        template = _ENV.from_string(parsed)  # compile the tree already parsed, not the text again
    except TemplateSyntaxError as exc:
        raise InvalidPattern(
            name, [f"Jinja syntax error on line {exc.lineno}: {exc.message}"]
        ) from None
    return template, frozenset(meta.find_undeclared_variables(parsed))


def apply_template(
    name: str,
    template: Template,
    referenced: frozenset[str],
    variables: Mapping[str, Any],
) -> str:
    """Render strictly: every referenced variable must be supplied, all missing ones are named."""
    missing = referenced - variables.keys()
    if missing:
        raise MissingVariables(name, sorted(missing))
    try:
        return template.render(**variables)
    except SecurityError:
        raise SandboxViolation(name) from None
    except UndefinedError as exc:
        raise PatternRenderError(f"Pattern {name!r} could not render: {exc.message}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        # Wrong value shapes (e.g. iterating over an int) are the caller's to fix.
        raise PatternRenderError(
            f"Pattern {name!r} could not render with the given variables: {exc}"
        ) from None
