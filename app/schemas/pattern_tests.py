"""Pattern test cases: what a pattern (or template version) must render, and with `--live` answer.

Whatever a case can get wrong on its own (a regular expression that does not compile, a schema
that is not one) is refused here, so a file and a template version's `tests` obey one rule.

The shape of a case is a published contract (tests written today keep working): `name`,
`variables`, `user_prompt` and `expect` with the keys below are never renamed; new keys are added
beside them. Unknown keys are refused, so a misspelt assertion fails loudly instead of passing.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from app.schemas.base import InputModel


def _as_list(value: Any) -> Any:
    """`prompt_contains: Ana` reads as `[Ana]`: one string is a list of one."""
    return [value] if isinstance(value, str) else value


def _compiles(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PydanticCustomError(
            "bad_regex", "bad regular expression: {error}", {"error": str(exc)}
        ) from None
    return pattern


def _is_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    if schema is not None:
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            raise PydanticCustomError(
                "bad_schema", "not a JSON Schema: {error}", {"error": exc.message}
            ) from None
    return schema


# `prompt_contains: Ana` reads as `[Ana]`, and the document says so (a string or a list).
_ONE_OR_MANY = WithJsonSchema(
    {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
)
Strings = Annotated[list[str], BeforeValidator(_as_list), _ONE_OR_MANY]
Regexes = Annotated[
    list[Annotated[str, AfterValidator(_compiles)]], BeforeValidator(_as_list), _ONE_OR_MANY
]


def unique_case_names(cases: list[PatternTestCase]) -> list[PatternTestCase]:
    """A case name says which case failed, so names are unique within one list."""
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise PydanticCustomError(
                "duplicate_case", "case name '{name}' is used twice", {"name": case.name}
            )
        seen.add(case.name)
    return cases


class CaseExpectations(InputModel):
    """Assertions on the rendered prompt (always) and on the answer (live runs only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_contains: Strings = Field(default_factory=list)
    prompt_not_contains: Strings = Field(default_factory=list)
    prompt_equals: str | None = None
    prompt_matches: Regexes = Field(default_factory=list, description="Regular expressions.")
    prompt_hash: str | None = Field(
        default=None, description="`sha256:<hex>` of the rendered prompt (see docs/patterns.md)."
    )
    answer_contains: Strings = Field(default_factory=list)
    answer_matches: Regexes = Field(default_factory=list, description="Regular expressions.")
    answer_schema: Annotated[dict[str, Any] | None, AfterValidator(_is_schema)] = Field(
        default=None, description="A JSON Schema the answer, parsed as JSON, must satisfy."
    )
    answer_max_chars: int | None = Field(default=None, ge=1)
    judge: str | None = Field(
        default=None, description="A pattern that grades the answer; it must answer PASS."
    )


class PatternTestCase(InputModel):
    """One case: inputs, and what must hold of the prompt and the answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    variables: dict[str, Any] = Field(default_factory=dict)
    user_prompt: str = ""
    expect: CaseExpectations = Field(default_factory=CaseExpectations)
