"""The bounded sandbox: Jinja's immutable sandbox, with every way to grow a value or loop checked.

What could explode, and where it is stopped (limits and estimates in `app/catalog/budget.py`):

- `**`, `*`, `+`, `%` are intercepted (`intercepted_binops`), which also keeps Jinja from folding
  them at compile time (`nodes.BinExpr.as_const`): `{{ 9**(9**9) }}` costs nothing to compile
  and is refused from its operands' sizes when rendered.
- `~` (Concat) is compiled into the bounded `concat_values`; `{% set %}` blocks, macro bodies
  and filter blocks join their buffers through the bounded `environment.concat`.
- Containers are weighed by what they would print, not by their length: `[big] * 1000` is refused,
  and every `{{ value }}` passes `finalize` (`_printable`) so nothing heavy reaches `str()`.
- `range` refuses more than `MAX_RANGE` items and checks the deadline on every step.
- str and bytes methods that grow (`center`, `replace`, `join`, ...) are estimated before the call;
  `str.format` counts its field widths; every call's result is size-checked.
- Filters that grow a value or stringify a container are wrapped (`app/catalog/filters.py`). A
  refusal during compile-time folding merely leaves the filter to run (and be refused) at render.
- `getattr`, `getitem` and `call` check the deadline, so a macro or attribute loop stops in time.

Loops that touch none of these hooks (a `for` over a long string) are the renderer's to stop.
"""

from __future__ import annotations

import functools
import string
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from jinja2.utils import generate_lorem_ipsum
from markupsafe import Markup

from app.catalog.budget import (
    GROWING_METHODS,
    MAX_RANGE,
    OverBudget,
    check_binop,
    check_format_spec,
    check_size,
    check_str_method,
    tick,
    too_large,
    weight,
)
from app.catalog.filters import as_list, bounded_filters, bounded_json_dumps
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
                args = (as_list(args[0], tick()), *args[1:])
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
