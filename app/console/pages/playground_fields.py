"""The playground's variable inputs: one typed field per variable, and the posted form read back
into the JSON the API takes (app/console/static/playground.js reads them the same way)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["text", "number", "boolean", "list", "object", "json"]
# What a variable without a default may be read as; the person filling the form chooses.
CHOSEN_KINDS: dict[Kind, str] = {
    "text": "text",
    "number": "number",
    "list": "list, one item per line",
    "json": "JSON (any value)",
}
FIELD_PREFIX = "var."  # form names are `var.<variable>`: never clash with the page's own fields
KIND_PREFIX = "kind."


@dataclass(frozen=True, slots=True)
class VariableField:
    """One input of the form: its kind (from the default's JSON type) and what it shows."""

    name: str
    kind: Kind
    description: str | None
    required: bool
    value: str  # the input's text; a checkbox's "on" or ""
    chosen: bool = False  # no default says the type: the form offers a choice of kinds

    @property
    def form_name(self) -> str:
        return FIELD_PREFIX + self.name

    @property
    def kind_name(self) -> str:
        return KIND_PREFIX + self.name

    @property
    def input_id(self) -> str:
        # Variable names are identifiers (the template engine's), so they are safe in an id.
        return "var-" + self.name


def kind_of(default: Any) -> Kind:
    """The input a variable gets: the pattern's default says what type it expects."""
    if isinstance(default, bool):  # before int: a bool is an int to Python
        return "boolean"
    if isinstance(default, int | float):
        return "number"
    if isinstance(default, list | tuple):
        return "list"
    if isinstance(default, dict):
        return "object"
    return "text"


def _shown(kind: Kind, default: Any) -> str:
    """A default value as its input shows it."""
    if default is None:
        return ""
    if kind == "boolean":
        return "on" if default else ""
    if kind == "list":
        return "\n".join(str(item) for item in default)
    if kind == "object":
        return json.dumps(default, indent=2, ensure_ascii=False)
    return str(default)


def fields_of(
    variables: Mapping[str, str | None],
    required: Sequence[str],
    defaults: Mapping[str, Any],
    posted: Mapping[str, str] | None = None,
) -> list[VariableField]:
    """The form's fields, showing what was posted (after a submit) or else the defaults."""
    fields = []
    for name, description in variables.items():
        chosen = name not in defaults
        kind = kind_of(defaults.get(name)) if not chosen else _guess(description)
        if posted is None:
            value = _shown(kind, defaults.get(name))
        else:
            value = posted.get(FIELD_PREFIX + name, "")
            picked = posted.get(KIND_PREFIX + name, "")
            if chosen and picked in CHOSEN_KINDS:
                kind = picked
        fields.append(VariableField(name, kind, description, name in required, value, chosen))
    return fields


def _guess(description: str | None) -> Kind:
    """A first choice for a variable without a default: a list when its description says so."""
    return "list" if (description or "").lower().startswith("list ") else "text"


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        number = float(text)  # ValueError when it is no number at all
        if number != number or number in (float("inf"), float("-inf")):
            raise ValueError(text) from None
        return number


def variables_of(fields: Sequence[VariableField]) -> tuple[dict[str, Any], list[str]]:
    """The variables to send and the problems of inputs that do not parse.

    An empty input is left out, so the pattern's default applies (or, for a required variable,
    the API answers which ones are missing); a checkbox is always sent."""
    variables: dict[str, Any] = {}
    problems: list[str] = []
    for field in fields:
        text = field.value
        if field.kind == "boolean":
            variables[field.name] = text == "on"
        elif not text.strip():
            continue
        elif field.kind == "number":
            try:
                variables[field.name] = _number(text.strip())
            except ValueError:
                problems.append(f"{field.name}: {text.strip()[:80]!r} is not a number")
        elif field.kind == "list":
            variables[field.name] = [line.strip() for line in text.splitlines() if line.strip()]
        elif field.kind == "object":
            try:
                value = json.loads(text)
            except ValueError as exc:
                problems.append(f"{field.name}: not valid JSON ({exc})")
                continue
            if not isinstance(value, dict):
                problems.append(f"{field.name}: must be a JSON object")
                continue
            variables[field.name] = value
        elif field.kind == "json":
            try:
                variables[field.name] = json.loads(text)
            except ValueError as exc:
                problems.append(f"{field.name}: not valid JSON ({exc})")
        else:
            variables[field.name] = text
    return variables, problems
