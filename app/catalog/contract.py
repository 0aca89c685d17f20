"""The variable contract, written once for pattern files and database templates alike.

A body *references* variables (found in its compiled tree); a file or version may *declare*
them; a render *supplies* them. These functions compare the three sets.
"""

from __future__ import annotations

from collections.abc import Collection

from app.errors import MissingVariables, VariableContractViolation


def declaration_problems(referenced: Collection[str], declared: Collection[str]) -> list[str]:
    """Every variable the body uses must be declared and every declared one used."""
    used, named = set(referenced), set(declared)
    return [f"variable {v!r} is used but not declared" for v in sorted(used - named)] + [
        f"variable {v!r} is declared but never used" for v in sorted(named - used)
    ]


def require_supplied(name: str, referenced: Collection[str], supplied: Collection[str]) -> None:
    """Refuse a render that leaves a referenced variable out, naming all of them at once."""
    missing = set(referenced).difference(supplied)
    if missing:
        raise MissingVariables(name, sorted(missing))


def require_exactly(name: str, declared: Collection[str], supplied: Collection[str]) -> None:
    """The strict contract of database templates: exactly the declared keys, no more, no less."""
    missing, unexpected = set(declared).difference(supplied), set(supplied).difference(declared)
    if missing or unexpected:
        raise VariableContractViolation(
            name, missing=sorted(missing), unexpected=sorted(unexpected)
        )
