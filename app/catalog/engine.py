"""The one sandboxed Jinja2 environment: every template, file or database, renders through it.

The environment is bounded (`app/catalog/sandbox.py`): values cannot outgrow the render budget
and hooks check its deadline. `apply_template` consumes the output piece by piece and stops at
the size limit, and counts every value the render builds against its allowance (a multiple of
that limit). Run both functions through `TemplateRenderer` (`app/catalog/renderer.py`) to get
the wall-clock limit; called directly they are size-bounded but untimed.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, UndefinedError, nodes
from jinja2.exceptions import SecurityError

from app.catalog.budget import OverBudget, render_allowance, tick, too_large
from app.catalog.contract import require_supplied
from app.catalog.sandbox import BoundedSandbox, undeclared_variables
from app.errors import (
    InvalidPattern,
    PatternRenderError,
    RenderTooDeep,
    RenderTooLarge,
    SandboxViolation,
)

# Immutable: templates cannot mutate the lists and dicts callers pass in.
_ENV = BoundedSandbox(
    undefined=StrictUndefined,
    autoescape=False,
    keep_trailing_newline=False,
)


@dataclass(frozen=True, slots=True)
class Compiled:
    template: Template
    referenced: frozenset[str]  # the variable names it reads
    quick: bool  # see `renders_quickly`


# Constructs whose cost is not bounded by the template's size times its inputs' size.
_OPEN_ENDED = (
    nodes.Macro,
    nodes.CallBlock,
    nodes.Include,
    nodes.Import,
    nodes.FromImport,
    nodes.Extends,
    nodes.FilterBlock,
)


def renders_quickly(parsed: nodes.Template) -> bool:
    """True when a render costs at most the template's size times its inputs' size: no macro,
    call block, include, import or inheritance, and no loop inside another loop. With small
    inputs such a template renders in microseconds, so it may render on the event loop."""
    if any(True for _ in parsed.find_all(_OPEN_ENDED)):
        return False
    return not any(
        any(True for _ in loop.find_all(nodes.For)) for loop in parsed.find_all(nodes.For)
    )


def compile_section(name: str, source: str) -> Compiled:
    """Compile once; the template, the variable names it references, and whether it is quick."""
    try:
        parsed = _ENV.parse(source)
        template = _ENV.from_string(parsed)  # compile the tree already parsed, not the text again
    except TemplateSyntaxError as exc:
        raise InvalidPattern(
            name, [f"Jinja syntax error on line {exc.lineno}: {exc.message}"]
        ) from None
    except RecursionError:
        raise RenderTooDeep(name, "the template nests too deeply to compile") from None
    except OverBudget as exc:  # the compile itself ran past the deadline
        raise exc.kind(name, exc.problem) from None
    return Compiled(template, undeclared_variables(_ENV, parsed), renders_quickly(parsed))


def compile_template(name: str, source: str) -> tuple[Template, frozenset[str]]:
    """Compile once; return the template and the variable names it references."""
    compiled = compile_section(name, source)
    return compiled.template, compiled.referenced


def apply_template(
    name: str,
    template: Template,
    referenced: frozenset[str],
    variables: Mapping[str, Any],
) -> str:
    """Render strictly: every referenced variable must be supplied, all missing ones are named."""
    require_supplied(name, referenced, variables.keys())
    pieces = cast(Generator[str, None, None], template.generate(**variables))
    try:
        limit, size, output = tick(), 0, []
        with render_allowance():
            for piece in pieces:
                size += len(piece)
                if size > limit:
                    raise too_large("the output", size, limit)
                tick()
                output.append(piece)
        return "".join(output)
    except OverBudget as exc:
        raise exc.kind(name, exc.problem) from None
    except RecursionError:
        raise RenderTooDeep(name, "recursion went deeper than the interpreter allows") from None
    except MemoryError:
        raise RenderTooLarge(name, "rendering ran out of memory") from None
    except SecurityError:
        raise SandboxViolation(name) from None
    except UndefinedError as exc:
        raise PatternRenderError(f"Pattern {name!r} could not render: {exc.message}") from None
    except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
        # Wrong value shapes (e.g. iterating over an int) are the caller's to fix.
        raise PatternRenderError(
            f"Pattern {name!r} could not render with the given variables: {exc}"
        ) from None
    finally:
        pieces.close()
