"""The bounded sandbox: Jinja's immutable sandbox, with every way to grow a value or loop checked.

What could explode, and where it is stopped (limits in `app/catalog/budget.py`):

- `**`, `*`, `+`, `%` are intercepted (`intercepted_binops`), which also keeps Jinja from folding
  them at compile time (`nodes.BinExpr.as_const`): `{{ 9**(9**9) }}` costs nothing to compile
  and is refused from its operands' sizes when rendered.
- `~` (Concat) is compiled into the bounded `concat`, as are `{% set %}` blocks, macro bodies and
  filter blocks, which join their buffers through `environment.concat`.
- `range` refuses more than `MAX_RANGE` items and checks the deadline on every step.
- str and bytes methods that grow (`center`, `replace`, `join`, ...) are estimated before the call;
  `str.format` counts its field widths; every call's result is size-checked.
- Filters that grow a value from a small argument (`center`, `indent`, `format`, `wordwrap`,
  `replace`, `join`, `batch`, `slice`, `urlize`, `sum`, `tojson`) are wrapped the same way. A
  refusal during compile-time folding merely leaves the filter to run (and be refused) at render.
- `getattr`, `getitem` and `call` check the deadline, so a macro or attribute loop stops in time.

Loops that touch none of these hooks (a `for` over a long string) are the renderer's to stop.
"""

from __future__ import annotations

import functools
import json
import string
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.filters import make_attrgetter
from jinja2.runtime import Context
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from jinja2.utils import _PassArg, generate_lorem_ipsum
from markupsafe import Markup

from app.catalog.budget import (
    GROWING_METHODS,
    MAX_RANGE,
    OverBudget,
    check_binop,
    check_format_spec,
    check_percent_format,
    check_size,
    check_str_method,
    tick,
    too_large,
    weight,
)
from app.errors import RenderTooLarge

# --- expressions --------------------------------------------------------------------------------


class _BoundedCodeGenerator(CodeGenerator):
    """Compiles `a ~ b` into the environment's bounded `concat_values`, not an unchecked join."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
            self.write("environment.checked(")  # markup joins: checked once built
            super().visit_Concat(node, frame)
            self.write(")")
            return
        self.write("environment.concat_values((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _BoundedRange:
    """`range()` for templates: at most MAX_RANGE items, and the deadline checked per item."""

    __slots__ = ("_range",)

    def __init__(self, values: range) -> None:
        self._range = values

    def __iter__(self) -> Iterator[int]:
        for value in self._range:
            tick()
            yield value

    def __reversed__(self) -> Iterator[int]:
        return iter(_BoundedRange(self._range[::-1]))

    def __len__(self) -> int:
        return len(self._range)

    def __contains__(self, value: object) -> bool:
        return value in self._range

    def __getitem__(self, index: int | slice) -> Any:
        found = self._range[index]
        return _BoundedRange(found) if isinstance(found, range) else found

    def __repr__(self) -> str:
        return repr(self._range)


def bounded_range(*args: int) -> _BoundedRange:
    values = range(*args)
    try:
        size = len(values)
    except OverflowError:  # more items than a C ssize_t holds
        size = MAX_RANGE + 1
    if size > MAX_RANGE:
        raise OverBudget(RenderTooLarge, f"range() of {size:,} items exceeds {MAX_RANGE:,}")
    return _BoundedRange(values)


def bounded_lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    limit = tick()
    size = n * (max if isinstance(max, int) else 0) * 12  # generous characters per word
    if size > limit:
        raise too_large("lipsum()", size, limit)
    return generate_lorem_ipsum(n=n, html=html, min=min, max=max)


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


class _FieldBudget:
    """Mixed into the sandbox's formatters: `{:>999999999}` is refused before it pads."""

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self._budget = [tick()]
        return super().vformat(format_string, args, kwargs)  # type: ignore[misc, no-any-return]

    def format_field(self, value: Any, format_spec: str) -> Any:
        check_size(value, "a formatted value")
        check_format_spec(format_spec, self._budget)
        return check_size(super().format_field(value, format_spec))  # type: ignore[misc]


class _BoundedFormatter(_FieldBudget, SandboxedFormatter):
    pass


class _BoundedEscapeFormatter(_FieldBudget, SandboxedEscapeFormatter):
    pass


# --- filters ------------------------------------------------------------------------------------


def _as_list(values: Any, limit: int) -> list[Any]:
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


def _check_wordwrap(s: Any, width: Any = 79, *_: Any, wrapstring: Any = None, **__: Any) -> None:
    limit, text = tick(), _text(s)
    lines = len(text) // max(width if isinstance(width, int) else 1, 1) + text.count("\n") + 1
    size = len(text) + lines * len(_text(wrapstring) if wrapstring is not None else "\n")
    if size > limit:
        raise too_large("the wrapped string", size, limit)


def _check_truncate(s: Any, length: Any = 255, killwords: bool = False, end: Any = "...") -> None:
    tick()  # the result is never longer than `s` plus `end`


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
        items = _as_list(value, limit)
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
        items = _as_list(iterable, limit)
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


# --- the environment ----------------------------------------------------------------------------


def _printable(value: Any) -> Any:
    """Every `{{ value }}` passes here before `str()`: a heavy container is refused unprinted."""
    if not isinstance(value, str):
        check_size(value, "a printed value")
    return value


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox, plus the budget checks listed in this module's docstring."""

    code_generator_class = _BoundedCodeGenerator
    intercepted_binops = frozenset({"**", "*", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(**options, finalize=_printable)
        self.globals["range"] = bounded_range
        self.globals["lipsum"] = bounded_lipsum
        self.filters = bounded_filters(self.filters)
        self.policies["json.dumps_function"] = bounded_json_dumps

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        check_binop(operator, left, right)
        return self.binop_table[operator](left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        tick()
        return super().getitem(obj, argument)

    def call(
        self, context: Context, obj: Any, /, *args: Any, **kwargs: Any
    ) -> Any:  # fmt: skip
        tick()
        method, owner = getattr(obj, "__name__", None), getattr(obj, "__self__", None)
        if method in GROWING_METHODS and isinstance(owner, str | bytes):
            if method == "join" and args:
                args = (_as_list(args[0], tick()), *args[1:])
            check_str_method(method, owner, (*args, *kwargs.values()))
        return check_size(super().call(context, obj, *args, **kwargs), "a call's result")

    def concat(self, parts: Iterable[str]) -> str:
        """Join output pieces (a `~`, a `{% set %}` block, a macro body) within the limit."""
        limit, size, collected = tick(), 0, []
        for part in parts:
            size += len(part)
            if size > limit:
                raise too_large("the joined text", size, limit)
            collected.append(part)
        return "".join(collected)

    def concat_values(self, values: tuple[Any, ...]) -> str:
        """`a ~ b ~ c`: each value is weighed before it becomes a string."""
        limit, size = tick(), 0
        for value in values:
            size += len(value) if isinstance(value, str) else weight(value, limit)
            if size > limit:
                raise too_large("the joined text", size, limit)
        return "".join(map(str, values))

    def checked(self, value: Any) -> Any:
        return check_size(value, "the joined text")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`str.format` and `format_map` through formatters that count field widths."""
        if not (
            isinstance(value, types.MethodType | types.BuiltinMethodType)
            and value.__name__ in ("format", "format_map")
            and isinstance(value.__self__, str)
        ):
            return None
        text: str = value.__self__
        formatter: string.Formatter = (
            _BoundedEscapeFormatter(self, escape=text.escape)
            if isinstance(text, Markup)
            else _BoundedFormatter(self)
        )

        def format_(*args: Any, **kwargs: Any) -> str:
            if value.__name__ != "format_map":
                return type(text)(formatter.vformat(text, args, kwargs))
            if kwargs or len(args) != 1:
                raise TypeError("format_map() takes exactly one positional argument")
            return type(text)(formatter.vformat(text, (), args[0]))

        return functools.update_wrapper(format_, value)
