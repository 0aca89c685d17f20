"""Pattern test cases: what a pattern (or template version) must render, and with `--live` answer.

The shape of a case is a published contract (tests written today keep working): `name`,
`variables`, `user_prompt` and `expect` with the keys below are never renamed; new keys are added
beside them. Unknown keys are refused, so a misspelt assertion fails loudly instead of passing.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator

from app.schemas.base import InputModel


def _as_list(value: Any) -> Any:
    """`prompt_contains: Ana` reads as `[Ana]`: one string is a list of one."""
    return [value] if isinstance(value, str) else value


class CaseExpectations(InputModel):
    """Assertions on the rendered prompt (always) and on the answer (live runs only)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt_contains: list[str] = Field(default_factory=list)
    prompt_not_contains: list[str] = Field(default_factory=list)
    prompt_equals: str | None = None
    prompt_matches: list[str] = Field(default_factory=list, description="Regular expressions.")
    prompt_hash: str | None = Field(
        default=None, description="`sha256:<hex>` of the rendered prompt (see docs/patterns.md)."
    )
    answer_contains: list[str] = Field(default_factory=list)
    answer_matches: list[str] = Field(default_factory=list, description="Regular expressions.")
    answer_schema: dict[str, Any] | None = Field(
        default=None, description="A JSON Schema the answer, parsed as JSON, must satisfy."
    )
    answer_max_chars: int | None = Field(default=None, ge=1)
    judge: str | None = Field(
        default=None, description="A pattern that grades the answer; it must answer PASS."
    )

    _lists = field_validator(
        "prompt_contains",
        "prompt_not_contains",
        "prompt_matches",
        "answer_contains",
        "answer_matches",
        mode="before",
    )(_as_list)


class PatternTestCase(InputModel):
    """One case: inputs, and what must hold of the prompt and the answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    variables: dict[str, Any] = Field(default_factory=dict)
    user_prompt: str = ""
    expect: CaseExpectations = Field(default_factory=CaseExpectations)
