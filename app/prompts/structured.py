"""Structured output: parse a reply as JSON, validate it, and phrase targeted repair feedback.

Errors are classified so a repair can be targeted: `missing` (required fields absent),
`unknown` (fields the schema does not allow) and `invalid` (present but wrong). The feedback
states facts and ends with one concrete action; it never says "try again", which invites loops.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

from app.schemas import ToolChoice, ValidationIssues

_FENCED = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n\s*```\s*$", re.DOTALL)
_PROVIDED_LIMIT = 200
REPAIR_ACTION = (
    "Return the complete JSON value again with every listed issue fixed and nothing else "
    "changed; output only the JSON."
)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One structured-output try, as the audit trail records it (redacted there)."""

    number: int
    valid: bool
    issues: ValidationIssues
    response: str

    def as_record(self) -> dict[str, Any]:
        """The JSON shape stored in `jobs.attempts` and returned by GET /v1/jobs/{id}."""
        return {
            "attempt": self.number,
            "valid": self.valid,
            "issues": self.issues.model_dump(),
            "response": self.response,
        }


@dataclass(frozen=True, slots=True)
class Validation:
    parsed: Any | None
    issues: ValidationIssues

    @property
    def valid(self) -> bool:
        return not (self.issues.invalid or self.issues.missing or self.issues.unknown)

    @property
    def issue_count(self) -> int:
        return len(self.issues.invalid) + len(self.issues.missing) + len(self.issues.unknown)


def _path(error: ValidationError, extra: str | None = None) -> str:
    parts = [str(p) for p in error.absolute_path] + ([extra] if extra else [])
    return ".".join(parts) or "$"


def _short(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return value if len(text) <= _PROVIDED_LIMIT else text[:_PROVIDED_LIMIT] + "…"


def _problem(error: ValidationError) -> str:
    """jsonschema's message, without a long instance repeated in it (`provided` has it)."""
    shown = repr(error.instance)
    if len(shown) <= _PROVIDED_LIMIT:
        return error.message
    return error.message.replace(shown, "the provided value")


def _requirement(error: ValidationError) -> str:
    value = json.dumps(error.validator_value, ensure_ascii=False, default=str)
    return f"{error.validator}: {value}"


def validate_output(schema: Mapping[str, Any], text: str | None, payload: Any = None) -> Validation:
    """`payload` is already-structured output (a forced tool's input); else `text` is parsed."""
    if payload is None:
        raw = text or ""
        fenced = _FENCED.match(raw)
        try:
            payload = json.loads(fenced.group(1) if fenced else raw)
        except (ValueError, RecursionError) as exc:  # not JSON, or nested past the parser
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else "it cannot be read"
            issue = {
                "field": "$",
                "provided": _short(raw),
                "problem": f"not valid JSON ({why})",
                "requirement": "a single JSON value",
            }
            return Validation(None, ValidationIssues(invalid=[issue]))
    invalid: list[dict[str, Any]] = []
    missing: list[dict[str, Any]] = []
    unknown: list[str] = []
    validator = Draft202012Validator(schema)
    try:
        errors = sorted(validator.iter_errors(payload), key=lambda e: list(map(str, e.path)))
    except RecursionError:  # a recursive schema walking a value nested past the stack
        issue = {
            "field": "$",
            "provided": "(nested too deeply to show)",
            "problem": "nested too deeply to check",
            "requirement": "a value that fits the schema at a reasonable depth",
        }
        return Validation(None, ValidationIssues(invalid=[issue]))
    for error in errors:
        if error.validator == "required":
            present = error.instance if isinstance(error.instance, dict) else {}
            for name in error.validator_value:  # one error per absent name, each listing all
                entry = {"field": _path(error, name), "requirement": "required"}
                if name not in present and entry not in missing:
                    missing.append(entry)
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(error.schema.get("properties", {}))
            patterns = list(error.schema.get("patternProperties", {}))
            unknown += [
                _path(error, key)
                for key in error.instance
                if key not in allowed and not any(re.search(p, key) for p in patterns)
            ]
        else:
            invalid.append(
                {
                    "field": _path(error),
                    "provided": _short(error.instance),
                    "problem": _problem(error),
                    "requirement": _requirement(error),
                }
            )
    return Validation(payload, ValidationIssues(invalid=invalid, missing=missing, unknown=unknown))


def repair_feedback(validation: Validation) -> str:
    """The message sent back to the model after an invalid answer; `action` is the last key."""
    return json.dumps(
        {
            "result": "validation_failed",
            "issues": validation.issues.model_dump(),
            "issue_count": validation.issue_count,
            "action": REPAIR_ACTION,
        },
        ensure_ascii=False,
    )


def tool_call_feedback(choice: ToolChoice | None, issues: ValidationIssues) -> str:
    """The message sent back when a model answered without the tool call `choice` requires."""
    name = choice.name if choice is not None else None
    action = (
        f"Call the tool `{name}` now, with its arguments; answer with nothing else."
        if name
        else "Call one of the tools now, with its arguments; answer with nothing else."
    )
    return json.dumps(
        {"result": "tool_call_required", "issues": issues.model_dump(), "action": action},
        ensure_ascii=False,
    )
