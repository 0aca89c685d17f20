"""The bounded sandbox: Jinja's immutable sandbox, with every way to grow a value or loop checked.

What could explode, and where it is stopped (estimates in `app/catalog/estimates.py`, the budget
in `app/catalog/budget.py`):

- `**`, `*`, `+`, `-`, `%`, `//` (and unary `-`) are intercepted (`intercepted_binops`), which
  also keeps Jinja from folding them at compile time (`nodes.BinExpr.as_const`): `{{ 9**(9**9) }}`
  costs nothing to compile and is refused from its operands' sizes when rendered. `%` formatting
  is estimated field by field (a repeated `%(a)s` counts `a` each time), for str and bytes
  alike; `//` and `%` of integers too long to divide quickly are refused.
- Nothing but literal text is folded at compile time (`optimized=False`, and `Output` children
  stay runtime code unless literal): folding runs filters while compiling, outside any deadline,
  and keeps each result in the compiled code, so a hundred `{{ 'a'|center(999999) }}` would build
  a gigabyte before the first render.
- `~` (Concat) is compiled into the bounded `concat_values`; `{% set %}` blocks, macro bodies
  and filter blocks join their buffers through the bounded `environment.concat`.
- Containers are weighed by what they would print, not by their length: `[big] * 1000` is refused,
  and every `{{ value }}` passes `finalize` (`_printable`) so nothing heavy reaches `str()`; a
  `namespace()` is weighed by its attributes, since its repr prints them.
- `range` refuses more than `MAX_RANGE` items and checks the deadline on every step.
- str, bytes and int methods that grow (`center`, `replace`, `join`, `translate`, `encode`,
  `to_bytes`, ...) are estimated before the call; every call's result is size-checked.
- `str.format` and `format_map` count every field against one tally before formatting it: the
  value's length and the spec's widths, so `('{0}' * 1000).format(big)` is refused at the field
  that would pass the limit, not after a gigabyte has been joined.
- Filters that grow a value or stringify a container are wrapped (`app/catalog/filters.py`).
- `getattr`, `getitem` and `call` check the deadline, so a macro or attribute loop stops in time.
- Every value a render builds (an operator's, a call's or a filter's result, a join, a slice,
  which Jinja would compile to plain Python) counts against the render's allowance,
  `ALLOWANCE_FACTOR` times the size limit in all: each value within the limit, a thousand
  `{% set %}`s or a recursive macro holding one per level are still refused.

Loops that touch none of these hooks (a `for` over a long string) are the renderer's to stop.
"""

from __future__ import annotations

import functools
import string
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from jinja2 import Environment, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.meta import TrackingCodeGenerator
from jinja2.runtime import Context
from jinja2.sandbox import (
    ImmutableSandboxedEnvironment,
    SandboxedEscapeFormatter,
    SandboxedFormatter,
)
from jinja2.utils import generate_lorem_ipsum
from markupsafe import Markup

from app.catalog.budget import (
    OverBudget,
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
    GROWING_METHODS,
    MAX_RANGE,
    check_binop,
    check_format_field,
    check_method,
    formatted_size,
)
from app.catalog.filters import as_list, bounded_divisibleby, bounded_filters, bounded_json_dumps
from app.errors import RenderTooLarge

# --- expressions --------------------------------------------------------------------------------


class _LiteralFoldingOnly:
    """Mixed into code generators: only literals are folded into constants while compiling.
    Folding a filter or a `~` would run it outside any deadline (pattern files compile in the
    reload thread) and keep each result, and its repr, in the compiled code."""

    def _output_child_to_const(self, node: nodes.Expr, frame: Frame, finalize: Any) -> str:
        if not isinstance(node, nodes.TemplateData | nodes.Const):
            raise nodes.Impossible()  # evaluated when rendered, under the budget
        folded: str = super()._output_child_to_const(node, frame, finalize)  # type: ignore[misc]
        return folded


class _BoundedCodeGenerator(_LiteralFoldingOnly, CodeGenerator):
    """Compiles `a ~ b` into the environment's bounded `concat_values`, not an unchecked join."""

    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        """Jinja writes `s[1:]` as plain Python; this one goes through `environment.sliced`."""
        if not isinstance(node.arg, nodes.Slice):
            super().visit_Getitem(node, frame)
            return
        self.write("environment.sliced(")
        self.visit(node.node, frame)
        self.write(", slice(")
        for part in (node.arg.start, node.arg.stop, node.arg.step):
            if part is None:
                self.write("None")
            else:
                self.visit(part, frame)
            self.write(", ")
        self.write("))")

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


class _UndeclaredNames(_LiteralFoldingOnly, TrackingCodeGenerator):
    """Jinja's `meta.find_undeclared_variables` walks the template with a full code generator,
    folding constants as it goes: this one folds nothing but literals either."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.optimizer = None


def undeclared_variables(environment: Environment, template: nodes.Template) -> frozenset[str]:
    """The names a template looks up from its context (`meta.find_undeclared_variables`)."""
    finder = _UndeclaredNames(environment)
    finder.visit(template)
    return frozenset(finder.undeclared_identifiers)


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
    """Mixed into the sandbox's formatters: every field is counted against one tally before it
    is formatted, so neither `{:>999999999}` nor a thousand `{0}` of a long value is built."""

    _tally: Tally

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self._tally = Tally("the formatted string", len(format_string))
        return super().vformat(format_string, args, kwargs)  # type: ignore[misc, no-any-return]

    def convert_field(self, value: Any, conversion: str | None) -> Any:
        if conversion is not None:  # `{0!r}`: the repr is built here, before format_field
            size = formatted_size(value, self._tally.left)
            if size > self._tally.left:
                raise too_large("the formatted string", self._tally.size + size, self._tally.limit)
        return super().convert_field(value, conversion)  # type: ignore[misc]

    def format_field(self, value: Any, format_spec: str) -> Any:
        estimate = check_format_field(value, format_spec, self._tally)
        formatted = super().format_field(value, format_spec)  # type: ignore[misc]
        self._tally.add(max(len(formatted) - estimate, 0))  # escaping may outgrow the estimate
        return formatted


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
    intercepted_binops = frozenset({"**", "*", "+", "-", "%", "//"})
    intercepted_unops = frozenset({"-"})  # `-x` copies x, which may be a long integer

    def __init__(self, **options: Any) -> None:
        super().__init__(**options, finalize=_printable, optimized=False)
        self.globals["range"] = bounded_range
        self.globals["lipsum"] = bounded_lipsum
        self.filters = bounded_filters(self.filters)
        self.tests["divisibleby"] = bounded_divisibleby
        self.policies["json.dumps_function"] = bounded_json_dumps

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        check_binop(operator, left, right)
        return check_built(self.binop_table[operator](left, right))

    def call_unop(self, context: Context, operator: str, arg: Any) -> Any:
        return check_built(self.unop_table[operator](arg))

    def getattr(self, obj: Any, attribute: str) -> Any:
        tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        tick()
        return super().getitem(obj, argument)

    def sliced(self, obj: Any, where: slice) -> Any:
        """`s[1:]`: a copy, counted against the render's allowance like any value it builds."""
        limit = tick()
        found = obj[where]
        count_built(size_of(found, limit))
        return found

    def call(
        self, context: Context, obj: Any, /, *args: Any, **kwargs: Any
    ) -> Any:  # fmt: skip
        tick()
        method, owner = getattr(obj, "__name__", None), getattr(obj, "__self__", None)
        if method in GROWING_METHODS and isinstance(owner, str | bytes | int):
            if method == "join" and args:
                args = (as_list(args[0], tick()), *args[1:])
            check_method(method, owner, args, kwargs)
        return check_built(super().call(context, obj, *args, **kwargs), "a call's result")

    def concat(self, parts: Iterable[str]) -> str:
        """Join output pieces (a `~`, a `{% set %}` block, a macro body) within the limit."""
        limit, size, collected = tick(), 0, []
        for part in parts:
            size += len(part)
            if size > limit:
                raise too_large("the joined text", size, limit)
            collected.append(part)
        count_built(size)
        return "".join(collected)

    def concat_values(self, values: tuple[Any, ...]) -> str:
        """`a ~ b ~ c`: each value is weighed before it becomes a string."""
        limit, size = tick(), 0
        for value in values:
            size += len(value) if isinstance(value, str) else weight(value, limit)
            if size > limit:
                raise too_large("the joined text", size, limit)
        count_built(size)
        return "".join(map(str, values))

    def checked(self, value: Any) -> Any:
        return check_built(value, "the joined text")

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
