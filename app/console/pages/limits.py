"""The limit fields the key and team forms share: read from a posted form into the API's body,
and from a stored key or team back into form values, so an edit form starts as things are."""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

from starlette.datastructures import FormData

WINDOWS = ("day", "month", "total")
_MAX_FIELD = 20_000
_GLOB_SPLIT = re.compile(r"[\s,]+")

Values = dict[str, str]


class FormProblem(ValueError):
    """A field the console could not read; shown above the form, which keeps what was typed."""


def values_of(form: FormData) -> Values:
    """Every posted text field but the CSRF token, as typed (cut to a sane length)."""
    return {
        name: value[:_MAX_FIELD]
        for name, value in form.items()
        if isinstance(value, str) and name != "csrf"
    }


def _number(values: Values, name: str, label: str) -> float | None:
    raw = values.get(name, "").strip()
    if not raw:
        return None
    try:
        number = float(raw)
    except ValueError:
        raise FormProblem(f"{label}: {raw!r} is not a number.") from None
    if not math.isfinite(number):
        raise FormProblem(f"{label}: {raw!r} is not a finite number.")
    return number


def _whole(values: Values, name: str, label: str) -> int | None:
    number = _number(values, name, label)
    if number is not None and not number.is_integer():
        raise FormProblem(f"{label}: {number} is not a whole number.")
    return None if number is None else int(number)


def limits_body(values: Values) -> dict[str, Any]:
    """Budgets (one per window), rpm and tpm; an empty field is no limit (`null` removes one)."""
    budgets = []
    for window in WINDOWS:
        usd = _number(values, f"budget_{window}", f"Budget per {window}")
        if usd is not None:
            budgets.append({"usd": usd, "window": window})
    return {
        "budgets": budgets,
        "rpm": _whole(values, "rpm", "Requests per minute"),
        "tpm": _whole(values, "tpm", "Tokens per minute"),
    }


def _globs(values: Values, name: str) -> list[str] | None:
    found = [item for item in _GLOB_SPLIT.split(values.get(name, "")) if item]
    return found or None  # none listed: anything is allowed


def _expiry(values: Values) -> str | None:
    raw = values.get("expires", "").strip()
    if not raw:
        return None
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError:
        raise FormProblem(f"Expires: {raw!r} is not a date (YYYY-MM-DD).") from None
    return f"{day.isoformat()}T00:00:00Z"


def key_body(values: Values) -> dict[str, Any]:
    """A key's limits, allowlists, team and expiry as `POST`/`PATCH /v1/keys` take them."""
    return {
        **limits_body(values),
        "allowed_models": _globs(values, "allowed_models"),
        "allowed_patterns": _globs(values, "allowed_patterns"),
        "team": values.get("team", "").strip() or None,
        "expires_at": _expiry(values),
    }


def limit_values(limits: dict[str, Any]) -> Values:
    """A stored key's or team's limits as the form's fields."""
    found: Values = {
        f"budget_{budget['window']}": f"{budget['usd']:g}" for budget in limits.get("budgets", [])
    }
    for name in ("rpm", "tpm"):
        if limits.get(name) is not None:
            found[name] = str(limits[name])
    return found


def key_values(key: dict[str, Any]) -> Values:
    found = limit_values(key)
    for name in ("allowed_models", "allowed_patterns"):
        found[name] = "\n".join(key.get(name) or [])
    found["team"] = key.get("team") or ""
    found["expires"] = str(key.get("expires_at") or "")[:10]
    return found
