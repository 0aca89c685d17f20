"""The ground every data shape stands on: safe-text checks, strict integers, frozen models."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator
from pydantic_core import PydanticCustomError

# Template names and roles appear in URLs, so they are kept to a safe alphabet.
SLUG = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$"
# Job ids are uuid4().hex.
JOB_ID = r"^[0-9a-f]{32}$"
# The characters a model may be written with (`ollama/hf.co/org/model:Q4_K_M`); the policy checks
# the `provider/name` shape itself, so a misspelt model answers `invalid_model` with the providers.
MODEL = r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,254}$"
# A snippet label heads its block in the prompt (`PERSONA:`): one UPPER_SNAKE word. The one rule
# for labels a request composes and labels a pattern's front-matter expects.
SNIPPET_LABEL = re.compile(r"[A-Z][A-Z0-9_]*")


def is_snippet_label(label: str) -> bool:
    return SNIPPET_LABEL.fullmatch(label) is not None


# The largest value a 32-bit INTEGER column (template versions and ids) holds.
INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
# Deeper JSON would only exhaust recursion in hashing, rendering or storing; no real input needs it.
MAX_JSON_DEPTH = 64

# A lone surrogate cannot be encoded as UTF-8 (so it can never be stored, hashed or sent), and
# PostgreSQL text cannot hold NUL: both are refused at the boundary, in every string and key.
_UNSAFE_TEXT = re.compile("[\x00\ud800-\udfff]")


def _text_problem(text: str) -> str | None:
    found = _UNSAFE_TEXT.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (U+0000)"
    return f"contains an unpaired surrogate (U+{ord(found.group()):04X})"


@dataclass(frozen=True, slots=True)
class InputLimits:
    """What one request may carry besides its byte size (GENAI_REQUEST__*). The body-limit
    middleware sets the app's for each request; validation reads them from here, so a request
    that carries too much is refused before any work grows with it."""

    max_depth: int = 32
    max_values: int = 100_000  # JSON values (strings, numbers, keys' values…) in one body
    max_variables: int = 256
    max_variables_bytes: int = 1_000_000  # their JSON, UTF-8


DEFAULT_LIMITS = InputLimits()
_LIMITS: ContextVar[InputLimits] = ContextVar("input_limits", default=DEFAULT_LIMITS)


def current_limits() -> InputLimits:
    return _LIMITS.get()


@contextlib.contextmanager
def input_limits(limits: InputLimits) -> Iterator[None]:
    """Apply `limits` to the inputs validated within (one request)."""
    token = _LIMITS.set(limits)
    try:
        yield
    finally:
        _LIMITS.reset(token)


def too_many_values(limit: int) -> str:
    return f"body: more than {limit} values (GENAI_REQUEST__MAX_VALUES)"


def unsafe_input(value: Any) -> str | None:
    """Why `value` (parsed JSON) cannot be accepted, naming where; None when it is fine.

    One walk over every string, dict key and number at any depth, without recursion (so the
    input's depth cannot exhaust the stack), that stops at the request's limits on depth and on
    the number of values (so its own cost is bounded). The offending text is never echoed.
    """
    limits = current_limits()
    max_depth = min(limits.max_depth, MAX_JSON_DEPTH)
    budget = limits.max_values
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        budget -= 1
        if budget < 0:
            return too_many_values(limits.max_values)
        if depth > max_depth:
            top = where.split("[", 1)[0].split(".", 1)[0]
            return f"{top or 'body'}: nested deeper than {max_depth} levels"
        if isinstance(item, str):
            problem = _text_problem(item)
            if problem:
                return f"{where or 'value'}: {problem}"
        elif isinstance(item, dict):
            for key, child in item.items():
                if isinstance(key, str):
                    problem = _text_problem(key)
                    if problem:
                        return f"{where or 'body'}: a key {problem}"
                stack.append((child, f"{where}.{key}" if where else str(key), depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{where or 'value'}: must be a finite number"
    return None


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: 3 and 3.0 are integers, `true` and "3" are not (pydantic's lax
    int takes both, its strict int refuses 3.0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


# For an integer a caller sends: a JSON number without a fraction, never a boolean or a string.
# Constraints go before it (`Annotated[int, Field(ge=1), JSON_INTEGER]`), or the document
# would show pydantic's `ge` instead of JSON Schema's `minimum`.
JSON_INTEGER = BeforeValidator(_json_integer)


class FrozenModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def is_unset(value: Any) -> bool:
    """`exclude_if` of an optional field: a None is left out of the JSON, not written as null."""
    return value is None


def is_empty(value: Any) -> bool:
    """`exclude_if` of a list field: an empty one is left out of the JSON."""
    return not value


def refuse_unsafe(data: Any) -> Any:
    """`data` when `unsafe_input` finds nothing in it; a ValueError saying where otherwise.
    The `mode="before"` validator of every shape callers send."""
    problem = unsafe_input(data) if isinstance(data, dict) else None
    if problem:
        raise ValueError(problem[:300])
    return data


class SafeInput(BaseModel):
    """A shape callers send: every string in it, at any depth, passes `unsafe_input` first (no
    NUL, no lone surrogate, no nesting past MAX_JSON_DEPTH)."""

    @model_validator(mode="before")
    @classmethod
    def _safe_text(cls, data: Any) -> Any:
        return refuse_unsafe(data)


class InputModel(FrozenModel, SafeInput):
    """A frozen shape callers send (the gateway's own API)."""
