"""Jinja's filters (and tests) that can grow a value far past their input, wrapped to estimate
first.

`center(10**9)`, `indent`, `wordwrap(wrapstring=...)`, `%`-`format`, `replace('', ...)`, `join`
(with or without `attribute`), `batch`/`slice` with a huge count or filler, `urlize(target=...)`,
`tojson(indent=10**9)`, `pprint` of a deep value, `round` to a huge precision, `urlencode` of
non-ASCII text and `list`/`sort` of a long string are refused from their arguments before they
run; `sum` of lists is re-done in linear time; `map` through a filter makes at most the size
limit in all, so no `list`, `join`, `loop.length` or `*args` can gather a thousand limit-sized
results; every filter that turns a container into a string weighs it first. Every wrapped
filter's result is size-checked too. The `divisibleby` test divides, so it is held to the
integer bound of `//` and `%`.

Left to the check on the result: filters whose output is at most a few times their (weighed)
input, by a factor no argument can raise: `escape` (5x, `&#34;`), `tojson` (6x, `\\u0000`),
`upper`/`title`/`capitalize` (3x, `ΐ` is three letters), `pprint`'s and `string`'s reprs (10x,
`\\U0001f600`), `xmlattr`, `striptags`, `truncate`, `filesizeformat`.
"""

from __future__ import annotations

import functools
import io
import json
import pprint
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2.filters import make_attrgetter
from jinja2.utils import _PassArg

from app.catalog.budget import (
    Tally,
    check_built,
    check_size,
    count_built,
    size_of,
    tick,
    too_large,
    weight,
)
from app.catalog.estimates import (
    ITEM_OVERHEAD,
    check_decimal_digits,
    check_division,
    check_method,
    check_percent_format,
)


def bounded_json_dumps(value: Any, **kwargs: Any) -> str:
    """`tojson`'s dumps: an indented dump is produced piece by piece and stopped at the limit."""
    indent = kwargs.get("indent")
    if indent is None:
        return str(check_size(json.dumps(value, **kwargs), "the JSON"))
    tally = Tally("the JSON")
    if isinstance(indent, int) and indent > tally.left:  # json builds ' ' * indent up front
        raise too_large("the JSON's indent", indent, tally.limit)
    parts = []
    for part in json.JSONEncoder(**kwargs).iterencode(value):
        tally.add(len(part))
        parts.append(part)
    return "".join(parts)


class _TallyStream(io.StringIO):
    """A text stream that refuses the write that would pass the size limit."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self._tally = Tally(what)

    def write(self, text: str) -> int:
        tick()
        self._tally.add(len(text))
        return super().write(text)


def bounded_pprint(value: Any) -> str:
    """`pprint`, as Jinja's `pformat(value)`, estimated first: it takes the repr of every
    container on the way down to decide where to break lines, so a long string nested 80 deep is
    printed 80 times. Its output then stops at the limit, however it splits long strings into
    indented lines."""
    limit = tick()
    passes = weight(value, limit, nested=True)
    if passes > limit:
        raise too_large("the reprs pprint builds", passes, limit)
    stream = _TallyStream("the pretty-printed value")
    pprint.PrettyPrinter(stream=stream).pprint(value)
    return stream.getvalue()[:-1]  # pprint ends with a newline, pformat does not


def as_list(values: Any, limit: int) -> list[Any]:
    """Materialize an iterable (a `map`, a `select`) so its size can be estimated first; refused
    as soon as its items alone would print past the limit."""
    if isinstance(values, list):
        return values
    found: list[Any] = []
    tally = Tally("the sequence")
    for value in values:
        if len(found) >= limit:
            raise too_large("the sequence", len(found) + 1, limit)
        tally.add(size_of(value, tally.left))
        found.append(value)
    return found


def _weighed(items: Iterable[Any], what: str) -> Iterator[Any]:
    """Yield `items`, refusing the one that takes their total past the size limit."""
    tally = Tally(what)
    for item in items:
        tally.add(size_of(item, tally.left))
        yield item


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
    check_percent_format(_text(value), kwargs or args)


def _check_replace(s: Any, old: Any, new: Any, count: Any = None) -> None:
    args = (_text(old), _text(new), -1 if count is None else count)
    check_method("replace", _text(s), args, {})


def _check_chars(value: Any, *_: Any, **__: Any) -> None:
    """`list`, `sort`, `groupby`, `batch` and `slice` of a string make an item per character: a list
    printing five times as long, and a new object of about 80 bytes per non-Latin-1 character."""
    if isinstance(value, str | bytes):
        limit = tick()
        size = 2 + (ITEM_OVERHEAD + 1) * len(value)
        if size > limit:
            raise too_large("the list of characters", size, limit)


def _filler_size(fill_with: Any, limit: int) -> int:
    """Characters one `, filler` adds to a printed batch or slice."""
    return 0 if fill_with is None else 2 + weight(fill_with, limit)


def _check_batch(value: Any, linecount: Any, fill_with: Any = None) -> None:
    _check_chars(value)
    limit = tick()
    _int_at_most(linecount, limit, "a batch")
    if isinstance(linecount, int) and linecount > 0:  # the last batch is filled up to linecount
        _int_at_most(linecount * _filler_size(fill_with, limit), limit, "the filled batch")


def _check_slice(value: Any, slices: Any, fill_with: Any = None) -> None:
    _check_chars(value)
    limit = tick()
    if isinstance(slices, int) and slices > 0:  # each slice a new list: `[], ` and a filler
        size = slices * (4 + _filler_size(fill_with, limit))
        _int_at_most(size, limit, "the slices")


def _check_round(value: Any, precision: Any = 0, method: Any = "common") -> None:
    tick()
    check_decimal_digits(precision, "rounding")


def _check_urlize(
    value: Any, trim_url_limit: Any = None, nofollow: bool = False, target: Any = None,
    rel: Any = None, extra_schemes: Any = None,
) -> None:  # fmt: skip
    limit, text = tick(), _text(value)
    per_link = 64 + len(_text(target or "")) + len(_text(rel or ""))
    size = 3 * len(text) + (len(text) // 4 + 1) * per_link
    if size > limit:
        raise too_large("the linked text", size, limit)


# What `urlencode` writes as it is: `urllib.parse`'s always-safe bytes, and `/` in a string.
_URL_SAFE = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/"


def _check_urlencode(value: Any) -> None:
    """Each other byte becomes `%XX`: an emoji becomes twelve characters, and quoting builds a
    list of every byte on the way (some 50 bytes of memory a character)."""
    if isinstance(value, str | bytes):
        limit = tick()
        data = value.encode() if isinstance(value, str) else value
        size = len(data) + 2 * len(data.translate(None, _URL_SAFE))
        if size > limit:
            raise too_large("the URL-encoded string", size, limit)


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
    "urlencode": _check_urlencode,
    "round": _check_round,
    "list": _check_chars,
    "sort": _check_chars,
    "groupby": _check_chars,
}
# Filters that regroup the items they are given into new containers: their results count
# against the render's allowance but are not refused for outweighing the items they came with.
_REGROUPING = frozenset({"list", "sort", "groupby", "dictsort", "reverse"})


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


def _guard(
    original: Callable[..., Any], checks: list[Callable[..., None]], *, weigh_result: bool = True
) -> Callable[..., Any]:
    """Run `checks` on a filter's own arguments first, and size-check what it returns (or, for a
    regrouping filter, only count it against the render's allowance)."""
    skip = 1 if _PassArg.from_obj(original) is not None else 0

    @functools.wraps(original)  # keeps `jinja_pass_arg`, so Jinja passes the same arguments
    def guarded(*args: Any, **kwargs: Any) -> Any:
        for check in checks:
            check(*args[skip:], **kwargs)
        result = original(*args, **kwargs)
        if weigh_result:
            return check_built(result, "a filter's result")
        count_built(size_of(result, tick()))
        return result

    return guarded


def _guard_join(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def join(eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> Any:
        limit = tick()
        if attribute is not None:  # the joined values, not the items they come from, count
            value = map(make_attrgetter(eval_ctx.environment, attribute), value)
        items = as_list(value, limit)
        check_method("join", _text(d), (items,), {})
        return check_built(original(eval_ctx, items, d), "the joined string")

    return join


def _guard_map(original: Callable[..., Any]) -> Callable[..., Any]:
    """`map('center', 999999)` makes a new value per item: at most the size limit in all.
    (`map(attribute=...)` passes existing values through and is left alone.)"""

    @functools.wraps(original)
    def map_(context: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        mapped = original(context, value, *args, **kwargs)
        return _weighed(mapped, "the mapped values") if args else mapped

    return map_


def _guard_sum(original: Callable[..., Any]) -> Callable[..., Any]:
    """Summing lists with the builtin copies the running total per item (quadratic, in one C
    call): lists and tuples are summed here in linear time, within the size limit."""

    @functools.wraps(original)
    def sum_(environment: Any, iterable: Any, attribute: Any = None, start: Any = 0) -> Any:
        limit = tick()
        items = as_list(iterable, limit)
        if not isinstance(start, list | tuple):
            return check_built(original(environment, items, attribute, start), "the sum")
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
        count_built(len(total))
        return total if isinstance(start, list) else tuple(total)

    return sum_


# Filters that hand back values they were given, or parts of them: nothing new to count.
_PASSING_THROUGH = frozenset(
    {
        "attr", "count", "d", "default", "first", "items", "last", "length", "max", "min",
        "random", "reject", "rejectattr", "select", "selectattr", "unique",
    }
)  # fmt: skip
_OWN_GUARDS = {"join": _guard_join, "map": _guard_map, "sum": _guard_sum}


def bounded_filters(filters: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Every filter guarded, bar those that pass values through: a filter added to Jinja later
    has its result size-checked and counted without anyone listing it here."""
    guarded = {**filters, "pprint": bounded_pprint}
    for name, original in guarded.items():
        if name in _OWN_GUARDS:
            guarded[name] = _OWN_GUARDS[name](original)
        elif name not in _PASSING_THROUGH:
            checks = [_check_value] if name in _STRINGIFYING else []
            checks += [_CHECKS[name]] if name in _CHECKS else []
            guarded[name] = _guard(original, checks, weigh_result=name not in _REGROUPING)
    return guarded


def bounded_divisibleby(value: Any, num: Any) -> bool:
    """The `divisibleby` test divides: held to the integer bound of `//` and `%`."""
    check_division(value, num)
    return bool(value % num == 0)
