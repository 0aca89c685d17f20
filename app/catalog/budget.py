"""Render budgets: a deadline and a size limit, checked cooperatively by the sandbox's hooks.

The renderer (`app/catalog/renderer.py`) sets a `RenderBudget` for the thread running one job;
the sandbox (`app/catalog/engine.py`) calls `tick()` from its hooks and asks the estimates
(`app/catalog/estimates.py`) before an operation that could allocate more than the budget
allows. Every check runs *before* the expensive operation: `'a' * 10**9` is refused from the
operands' sizes, never computed and measured afterwards. Outside a renderer job (tests, pattern
files loading) the size limit still applies, with no deadline.

Each value is held to the size limit, and all the values one render builds, together, to its
allowance (`ALLOWANCE_FACTOR` times the limit, counted from `apply_template`'s
`render_allowance`), so what a render can hold at once is bounded however many values it keeps.

Hooks raise `OverBudget`, which names the kind of `RenderLimitExceeded` but not the template;
`apply_template` knows the name and turns it into the public error.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from jinja2.utils import Namespace

from app.errors import RenderLimitExceeded, RenderTimeout, RenderTooLarge

DEFAULT_MAX_CHARS = 1_000_000
_CONTAINERS = (list, tuple, set, frozenset, Mapping, KeysView, ValuesView, ItemsView)
# What `check_size` weighs (besides ints): containers, and `namespace()`, whose repr shows
# every attribute.
_WEIGHED = (*_CONTAINERS, Namespace)
# `<jinja2.utils.Cycler object at 0x7f…>`: the default repr of the runtime's other objects.
_OPAQUE_REPR = 64
#: All the values one render builds, together, may reach this many times the size limit. Each
#: is checked against the limit as it is built, but a template that keeps many (a thousand
#: `{% set %}`s, or a recursive macro holding one per level) would otherwise hold them all.
ALLOWANCE_FACTOR = 32


@dataclass(frozen=True, slots=True)
class RenderBudget:
    deadline: float | None  # time.monotonic() value; None: no deadline
    max_chars: int  # longest str (or longest list) any value or the output may reach


_UNTIMED = RenderBudget(deadline=None, max_chars=DEFAULT_MAX_CHARS)
_current: ContextVar[RenderBudget] = ContextVar("render_budget", default=_UNTIMED)


@dataclass(slots=True)
class _Allowance:
    built: int = 0  # characters of every value built so far (their printed size)


_allowance: ContextVar[_Allowance | None] = ContextVar("render_allowance", default=None)


class OverBudget(Exception):
    """Raised inside a render; `apply_template` re-raises it as `kind(name, problem)`."""

    def __init__(self, kind: type[RenderLimitExceeded], problem: str) -> None:
        super().__init__(problem)
        self.kind = kind
        self.problem = problem


@contextlib.contextmanager
def render_budget(budget: RenderBudget) -> Iterator[None]:
    """Apply `budget` to everything rendered in this thread (context) until the block ends."""
    token = _current.set(budget)
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def render_allowance() -> Iterator[None]:
    """Count every value one render builds against `ALLOWANCE_FACTOR` times the size limit."""
    token = _allowance.set(_Allowance())
    try:
        yield
    finally:
        _allowance.reset(token)


def tick() -> int:
    """Refuse to go on past the deadline; return the size limit for the caller's own checks."""
    budget = _current.get()
    if budget.deadline is not None and time.monotonic() > budget.deadline:
        raise OverBudget(RenderTimeout, "rendering ran past its time budget")
    return budget.max_chars


def too_large(what: str, size: int, limit: int) -> OverBudget:
    return OverBudget(RenderTooLarge, f"{what} would be {size:,} long, over the limit of {limit:,}")


class Tally:
    """What one growing operation (a format, a join, a mapped sequence) has made or is about to
    make, counted against the size limit: `add` refuses the piece that would pass it, so a
    result built from many pieces is stopped before it is joined."""

    __slots__ = ("limit", "size", "what")

    def __init__(self, what: str, size: int = 0) -> None:
        self.what, self.limit, self.size = what, tick(), 0
        self.add(size)

    @property
    def left(self) -> int:
        return self.limit - self.size

    def add(self, size: int) -> None:
        self.size += size
        if self.size > self.limit:
            raise too_large(self.what, self.size, self.limit)


def _namespace_attrs(value: Namespace) -> dict[str, Any]:
    attrs: dict[str, Any] = getattr(value, "_Namespace__attrs")  # noqa: B009 (mangled name)
    return attrs


def weight(value: Any, limit: int, *, nested: bool = False) -> int:
    """About how long `str(value)` is, found without building it; counting stops past `limit`.

    A list holding the same 999,999-character string 1,000 times is short but prints a
    gigabyte: containers are weighed by what they hold, not by how many items they have.
    `nested=True` counts each item once more per container around it: what `pprint` builds,
    since it takes the repr of every container on the way down to decide where lines break.
    """
    total, pending = 0, [(value, 1)]
    while pending and total <= limit:
        item, times = pending.pop()
        inner = times + 1 if nested else 1
        if isinstance(item, str | bytes):
            total += (len(item) + 2) * times
        elif isinstance(item, bool) or item is None:
            total += 5 * times
        elif isinstance(item, int):
            total += (item.bit_length() // 3 + 1) * times
        elif isinstance(item, float):
            total += len(repr(item)) * times
        elif isinstance(item, Mapping):
            total += (2 + 4 * len(item)) * times  # braces; ": " and ", " per item
            if total <= limit:
                pending.extend((part, inner) for pair in item.items() for part in pair)
        elif isinstance(item, _CONTAINERS):
            total += (2 + 2 * len(item)) * times
            if total <= limit:
                pending.extend((child, inner) for child in item)
        elif isinstance(item, Namespace):
            total += len("<Namespace >") * times
            pending.append((_namespace_attrs(item), times))
        else:
            total += _OPAQUE_REPR * times
    return total


def size_of(value: Any, limit: int) -> int:
    """The length of a string, or the printed length of anything else (counting stops past
    `limit`)."""
    return len(value) if isinstance(value, str | bytes) else weight(value, limit)


def check_size(value: Any, what: str = "a value") -> Any:
    """Pass `value` through, refusing a string, or a container that prints, over the limit."""
    _check_size(value, what)
    return value


def check_built(value: Any, what: str = "a value") -> Any:
    """`check_size` for a value the render has just built: it also counts against the render's
    allowance (`render_allowance`)."""
    count_built(_check_size(value, what))
    return value


def count_built(size: int) -> None:
    """Add `size` characters to what the current render has built; refuse past its allowance."""
    allowance = _allowance.get()
    if allowance is None:
        return
    allowance.built += size
    limit = _current.get().max_chars * ALLOWANCE_FACTOR
    if allowance.built > limit:
        raise too_large("everything this render has built", allowance.built, limit)


def _check_size(value: Any, what: str) -> int:
    if isinstance(value, str | bytes):
        size = len(value)
    elif isinstance(value, (*_WEIGHED, int)):  # an int parsed from long hex text is long too
        size = weight(value, _current.get().max_chars)
    else:
        return 0
    limit = _current.get().max_chars
    if size > limit:
        raise too_large(what, size, limit)
    return size
