"""Jinja's filters that can grow a value far past their input, wrapped to estimate first.

`center(10**9)`, `indent`, `wordwrap(wrapstring=...)`, `%`-`format`, `replace('', ...)`, `join`,
`batch`/`slice` with a huge count, `urlize(target=...)` are refused from their arguments before
they run; `sum` of lists is re-done in linear time; every filter that turns a container into a
string weighs it first. Every wrapped filter's result is size-checked too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

from jinja2.filters import make_attrgetter
from jinja2.utils import _PassArg

from app.catalog.budget import (
    check_percent_format,
    check_size,
    check_str_method,
    tick,
    too_large,
)


def bounded_json_dumps(value: Any, **kwargs: Any) -> str:
    """`tojson`'s dumps: an indented dump is produced piece by piece and stopped at the limit."""
    if kwargs.get("indent") is None:
        return str(check_size(json.dumps(value, **kwargs), "the JSON"))
    limit, size, parts = tick(), 0, []
    for part in json.JSONEncoder(**kwargs).iterencode(value):
        size += len(part)
        if size > limit:
            raise too_large("the JSON", size, limit)
        parts.append(part)
    return "".join(parts)


def as_list(values: Any, limit: int) -> list[Any]:
    """Materialize an iterable (a `map`, a `select`) so its size can be estimated first."""
    if isinstance(values, list):
        return values
    found: list[Any] = []
    for value in values:
        if len(found) >= limit:
            raise too_large("the sequence", len(found) + 1, limit)
        found.append(value)
    return found


def _int_at_most(value: Any, limit: int, what: str) -> None:
    if isinstance(value, int) and value > limit:
        raise too_large(what, value, limit)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _check_center(value: Any, width: Any = 80) -> None:
    _int_at_most(width, tick(), "the centred string")


def _check_indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> None:
    limit, text = tick(), _text(s)
    step = width if isinstance(width, int) else len(_text(width))
    size = len(text) + (text.count("\n") + 1) * max(step, 0)
    if size > limit:
        raise too_large("the indented string", size, limit)


def _check_wordwrap(
    s: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None, *_: Any
) -> None:
    limit, text = tick(), _text(s)
    lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
    size = len(text) + lines * len(_text(wrapstring) if wrapstring is not None else "\n")
    if size > limit:
        raise too_large("the wrapped string", size, limit)


def _check_truncate(s: Any, *_: Any, **__: Any) -> None:
    tick()  # the result is never longer than `s` plus `end`: nothing to estimate


def _check_format(value: Any, *args: Any, **kwargs: Any) -> None:
    check_percent_format(_text(value), kwargs or args, tick())


def _check_replace(s: Any, old: Any, new: Any, count: Any = None) -> None:
    args = (_text(old), _text(new), -1 if count is None else count)
    check_str_method("replace", _text(s), args)


def _check_batch(value: Any, linecount: Any, fill_with: Any = None) -> None:
    _int_at_most(linecount, tick(), "a batch")


def _check_slice(value: Any, slices: Any, fill_with: Any = None) -> None:
    _int_at_most(slices, tick(), "the number of slices")


def _check_urlize(
    value: Any, trim_url_limit: Any = None, nofollow: bool = False, target: Any = None,
    rel: Any = None, extra_schemes: Any = None,
) -> None:  # fmt: skip
    limit, text = tick(), _text(value)
    per_link = 64 + len(_text(target or "")) + len(_text(rel or ""))
    size = 3 * len(text) + (len(text) // 4 + 1) * per_link
    if size > limit:
        raise too_large("the linked text", size, limit)


_CHECKS: dict[str, Callable[..., None]] = {
    "center": _check_center,
    "indent": _check_indent,
    "wordwrap": _check_wordwrap,
    "truncate": _check_truncate,
    "format": _check_format,
    "replace": _check_replace,
    "batch": _check_batch,
    "slice": _check_slice,
    "urlize": _check_urlize,
}


# Filters that turn their value into a string: a container is weighed before `str()` runs.
_STRINGIFYING = frozenset(
    {
        "capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower",
        "pprint", "replace", "safe", "string", "striptags", "title", "tojson", "trim",
        "truncate", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    }
)  # fmt: skip


def _check_value(value: Any, *_: Any, **__: Any) -> None:
    tick()
    check_size(value, "the filtered value")


def _guard(original: Callable[..., Any], checks: list[Callable[..., None]]) -> Callable[..., Any]:
    """Run `checks` on a filter's own arguments first, and size-check what it returns."""
    skip = 1 if _PassArg.from_obj(original) is not None else 0

    @functools.wraps(original)  # keeps `jinja_pass_arg`, so Jinja passes the same arguments
    def guarded(*args: Any, **kwargs: Any) -> Any:
        for check in checks:
            check(*args[skip:], **kwargs)
        return check_size(original(*args, **kwargs), "a filter's result")

    return guarded


def _guard_join(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def join(eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> Any:
        limit = tick()
        items = as_list(value, limit)
        if attribute is None:
            check_str_method("join", _text(d), (items,))
        return check_size(original(eval_ctx, items, d, attribute), "the joined string")

    return join


def _guard_sum(original: Callable[..., Any]) -> Callable[..., Any]:
    """Summing lists with the builtin copies the running total per item (quadratic, in one C
    call): lists and tuples are summed here in linear time, within the size limit."""

    @functools.wraps(original)
    def sum_(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
        limit = tick()
        items = as_list(iterable, limit)
        if not isinstance(start, list | tuple):
            return check_size(original(environment, items, attribute, start), "the sum")
        if attribute is not None:
            items = list(map(make_attrgetter(environment, attribute), items))
        total = list(start)
        for item in items:
            tick()
            if not isinstance(item, type(start)):
                kind = type(start).__name__
                raise TypeError(f'can only concatenate {kind} (not "{type(item).__name__}")')
            if len(total) + len(item) > limit:
                raise too_large("the sum", len(total) + len(item), limit)
            total.extend(item)
        return total if isinstance(start, list) else tuple(total)

    return sum_


def bounded_filters(filters: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    guarded = dict(filters)
    for name in _STRINGIFYING | _CHECKS.keys():
        checks = [_check_value] if name in _STRINGIFYING else []
        guarded[name] = _guard(
            filters[name], [*checks, *([_CHECKS[name]] if name in _CHECKS else [])]
        )
    guarded["join"] = _guard_join(filters["join"])
    guarded["sum"] = _guard_sum(filters["sum"])
    return guarded
