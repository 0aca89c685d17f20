"""Render budgets: a deadline and a size limit, checked cooperatively by the sandbox's hooks.

The renderer (`app/catalog/renderer.py`) sets a `RenderBudget` for the thread running one job;
the sandbox (`app/catalog/engine.py`) calls `tick()` from its hooks and asks the `check_*`
functions here before an operation that could allocate more than the budget allows. Every check
runs *before* the expensive operation: `'a' * 10**9` is refused from the operands' sizes, never
computed and measured afterwards. Outside a renderer job (tests, compile-time folding) the size
limit still applies, with no deadline.

Hooks raise `OverBudget`, which names the kind of `RenderLimitExceeded` but not the template;
`apply_template` knows the name and turns it into the public error.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from app.errors import RenderLimitExceeded, RenderTimeout, RenderTooLarge

DEFAULT_MAX_CHARS = 1_000_000
# Integers past this many bits cannot even be printed (CPython refuses str() past 4300 digits),
# and multiplying or raising them costs super-linear time in one uninterruptible C call.
MAX_INT_BITS = 65_536
# Jinja's own sandbox allows 100,000 items per range; loops over a range tick as they go.
MAX_RANGE = 100_000
_SIZED = (str, bytes, list, tuple)
_CONTAINERS = (list, tuple, set, frozenset, Mapping, KeysView, ValuesView, ItemsView)


@dataclass(frozen=True, slots=True)
class RenderBudget:
    deadline: float | None  # time.monotonic() value; None: no deadline
    max_chars: int  # longest str (or longest list) any value or the output may reach


_UNTIMED = RenderBudget(deadline=None, max_chars=DEFAULT_MAX_CHARS)
_current: ContextVar[RenderBudget] = ContextVar("render_budget", default=_UNTIMED)


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


def tick() -> int:
    """Refuse to go on past the deadline; return the size limit for the caller's own checks."""
    budget = _current.get()
    if budget.deadline is not None and time.monotonic() > budget.deadline:
        raise OverBudget(RenderTimeout, "rendering ran past its time budget")
    return budget.max_chars


def too_large(what: str, size: int, limit: int) -> OverBudget:
    return OverBudget(RenderTooLarge, f"{what} would be {size:,} long, over the limit of {limit:,}")


def weight(value: Any, limit: int) -> int:
    """About how long `str(value)` is, found without building it; counting stops past `limit`.

    A list holding the same 999,999-character string 1,000 times is short but prints a
    gigabyte: containers are weighed by what they hold, not by how many items they have.
    """
    total, pending = 0, [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, str | bytes):
            total += len(item) + 2
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 1
        elif isinstance(item, _CONTAINERS):
            total += 2 + 2 * len(item)
            if total <= limit:
                pending.extend(item.items() if isinstance(item, Mapping) else item)
        else:
            total += 1
    return total


def check_size(value: Any, what: str = "a value") -> Any:
    """Pass `value` through, refusing a string, or a container that prints, over the limit."""
    if isinstance(value, str | bytes):
        limit = _current.get().max_chars
        if len(value) > limit:
            raise too_large(what, len(value), limit)
    elif isinstance(value, _CONTAINERS):
        limit = _current.get().max_chars
        size = weight(value, limit)
        if size > limit:
            raise too_large(what, size, limit)
    return value


def _size(value: Any, limit: int) -> int:
    return len(value) if isinstance(value, str | bytes) else weight(value, limit)


def _total_size(values: Iterable[Any], limit: int) -> int:
    total = 0
    for value in values:
        total += _size(value, limit - total)
        if total > limit:
            break
    return total


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse `left <operator> right` when its result would be over budget (from sizes alone)."""
    limit = tick()
    if operator == "**":
        _check_pow(left, right)
    elif operator == "*":
        _check_mul(left, right, limit)
    elif operator == "+":
        if isinstance(left, _SIZED) and isinstance(right, _SIZED):
            size = _size(left, limit) + _size(right, limit)
            if size > limit:
                raise too_large("the sum", size, limit)
    elif operator == "%" and isinstance(left, str):
        check_percent_format(left, right, limit)


def _is_int(value: Any) -> bool:
    return isinstance(value, int)  # bool included: True * 'x' is 'x'


def _check_pow(base: Any, exponent: Any) -> None:
    if _is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1:
        bits = abs(base).bit_length() * exponent
        if bits > MAX_INT_BITS:
            raise OverBudget(RenderTooLarge, f"{base} ** {exponent} would have about {bits:,} bits")


def _check_mul(left: Any, right: Any, limit: int) -> None:
    if _is_int(left) and _is_int(right):
        bits = abs(left).bit_length() + abs(right).bit_length()
        if bits > MAX_INT_BITS:
            raise OverBudget(RenderTooLarge, f"a product would have about {bits:,} bits")
        return
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, _SIZED) and _is_int(count) and count > 0:
            size = _size(sequence, limit) * count
            if size > limit:
                raise too_large("the repetition", size, limit)


# printf-style conversions: %[(key)][flags][width][.precision][length]type
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.S)


def check_percent_format(template: str, args: Any, limit: int) -> None:
    """Estimate the length of `template % args` (widths, precisions, argument lengths)."""
    values = list(args.values()) if isinstance(args, Mapping) else args
    values = list(values) if isinstance(values, tuple | list) else [values]
    star = max((v for v in values if _is_int(v)), default=0)
    size = len(template) + _total_size(values, limit)
    for width, precision, _ in _PERCENT_SPEC.findall(template):
        for number in (width, precision):
            if number:
                size += star if number == "*" else int(number)
    if size > limit:
        raise too_large("the formatted string", size, limit)


_NUMBERS = re.compile(r"\d+")


def check_format_spec(spec: str, budget: list[int]) -> None:
    """One `{:spec}` field of str.format: widths and precisions count against `budget[0]`."""
    for number in _NUMBERS.findall(spec):
        budget[0] -= int(number)
        if budget[0] < 0:
            limit = _current.get().max_chars
            raise too_large("the formatted string", limit - budget[0], limit)


def check_str_method(method: str, text: str | bytes, args: tuple[Any, ...]) -> None:
    """Refuse a str/bytes method call whose result would be over budget, before it runs."""
    limit = tick()
    size = len(text)
    if method in {"center", "ljust", "rjust", "zfill"} and args and _is_int(args[0]):
        size = max(size, args[0])
    elif method == "expandtabs":
        tab = args[0] if args and _is_int(args[0]) else 8
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        size += tabs * max(tab, 0)
    elif method == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        if isinstance(old, str | bytes) and isinstance(new, str | bytes):
            hits = text.count(old) if old else size + 1  # type: ignore[arg-type]
            if len(args) > 2 and _is_int(args[2]) and args[2] >= 0:
                hits = min(hits, args[2])
            size += hits * len(new)
    elif method == "join" and args and isinstance(args[0], list | tuple):
        items = args[0]
        size *= max(len(items) - 1, 0)
        size += _total_size(items, limit)
    elif method == "translate" and args and isinstance(args[0], Mapping):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str | bytes)), default=1)
        size *= max(longest, 1)
    if size > limit:
        raise too_large(f"the result of .{method}()", size, limit)


#: str and bytes methods whose result can be much longer than their inputs.
GROWING_METHODS = frozenset(
    {"center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "translate"}
)
