"""How long a result would be, worked out from its inputs before it is computed.

The sandbox (`app/catalog/sandbox.py`) and the filters (`app/catalog/filters.py`) ask here
before every operation whose result can be far larger than its inputs (a repetition, a padded or
repeated format field, a widened string method, an integer that takes super-linear time) and
refuse it with `RenderTooLarge` when the estimate passes the budget (`app/catalog/budget.py`).
An estimate may be generous, never short: the operation runs only once its result is known to
fit, so no single C call can allocate gigabytes or run for seconds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from app.catalog.budget import OverBudget, Tally, size_of, tick, too_large
from app.errors import RenderTooLarge

# Integers past this many bits cannot even be printed (CPython refuses str() past 4300 digits),
# and multiplying, dividing or raising them costs super-linear time in one uninterruptible call.
MAX_INT_BITS = 65_536
# Decimal digits of the largest such integer: `round(x, -n)` builds 10**n.
MAX_INT_DIGITS = MAX_INT_BITS * 3 // 10
# Jinja's own sandbox allows 100,000 items per range; loops over a range tick as they go.
MAX_RANGE = 100_000
_SIZED = (str, bytes, list, tuple)
# A width or precision with more digits than this is over any budget (and past int()'s reach).
_MAX_NUMBER_DIGITS = 18


def _is_int(value: Any) -> bool:
    return isinstance(value, int)  # bool included: True * 'x' is 'x'


def _total_size(values: Iterable[Any], limit: int) -> int:
    total = 0
    for value in values:
        total += size_of(value, limit - total)
        if total > limit:
            break
    return total


# --- operators ----------------------------------------------------------------------------------


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse `left <operator> right` when its result would be over budget (from sizes alone)."""
    limit = tick()
    if operator == "**":
        _check_pow(left, right)
    elif operator == "*":
        _check_mul(left, right, limit)
    elif operator == "+":
        if isinstance(left, _SIZED) and isinstance(right, _SIZED):
            size = size_of(left, limit) + size_of(right, limit)
            if size > limit:
                raise too_large("the sum", size, limit)
    elif operator == "%" and isinstance(left, str | bytes):
        check_percent_format(left, right)
    elif operator in ("%", "//"):
        check_division(left, right)


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
            size = size_of(sequence, limit) * count
            if size > limit:
                raise too_large("the repetition", size, limit)


def check_division(dividend: Any, divisor: Any) -> None:
    """`//` and `%` of integers (and the `divisibleby` test): long division is quadratic in one
    C call, so an integer parsed from a long hex string (`'f' * 10**6 | int(base=16)`) would hold
    the thread for seconds."""
    if _is_int(dividend) and _is_int(divisor):
        bits = max(abs(dividend).bit_length(), abs(divisor).bit_length())
        if bits > MAX_INT_BITS:
            raise OverBudget(RenderTooLarge, f"a division of a {bits:,}-bit integer")


def check_decimal_digits(digits: Any, what: str) -> None:
    """`round(x, -n)` and `round(x, n, 'ceil')` compute 10**n in one C call."""
    if _is_int(digits) and abs(digits) > MAX_INT_DIGITS:
        raise OverBudget(RenderTooLarge, f"{what} to {digits:,} decimal digits")


# --- formats ------------------------------------------------------------------------------------


def formatted_size(value: Any, limit: int) -> int:
    """The longest text one `%s`/`{}` field can make of `value`, before its width is applied."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, int):
        return value.bit_length() + 2  # `{:b}` writes every bit (and a sign)
    if isinstance(value, float):  # `%f` writes every integer digit of 1e308
        return 24 + max(math.frexp(value)[1], 0) * 3 // 10
    return size_of(value, limit)


def _number(digits: str) -> int:
    return int(digits) if len(digits) <= _MAX_NUMBER_DIGITS else 10**_MAX_NUMBER_DIGITS


# printf-style conversions: %[(key)][flags][width][.precision][length]type
_PERCENT_SPEC = re.compile(r"%(?:\(([^)]*)\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.S)


def check_percent_format(template: str | bytes, args: Any) -> None:
    """Estimate `template % args` field by field, so `'%(a)s' * 1000 % {'a': big}` counts `big`
    a thousand times; widths, precisions and `*` arguments count too."""
    text = template.decode("latin-1") if isinstance(template, bytes) else template
    tally = Tally("the formatted string", len(text))
    positional = iter(args if isinstance(args, tuple) else (args,))
    for spec in _PERCENT_SPEC.finditer(text):
        key, width, precision, kind = spec.groups()
        if kind == "%":
            continue
        for number in (width, precision):
            if number == "*":  # a negative width pads too, on the other side
                star = next(positional, 0)
                tally.add(abs(star) if _is_int(star) else 0)
            elif number:
                tally.add(_number(number))
        if key is None:
            value = next(positional, None)
        elif isinstance(args, Mapping):
            value = args.get(key.encode("latin-1") if isinstance(template, bytes) else key)
        else:
            value = None  # a TypeError once Python formats it
        tally.add(formatted_size(value, tally.left))


_NUMBERS = re.compile(r"\d+")


def check_format_field(value: Any, spec: str, tally: Tally) -> int:
    """One `{…}` field of `str.format`: its value and every width and precision in its spec,
    added to the call's `tally` before the field is formatted. Returns the estimate."""
    estimate = formatted_size(value, tally.left)
    estimate += sum(_number(number) for number in _NUMBERS.findall(spec))
    tally.add(estimate)
    return estimate


# --- methods ------------------------------------------------------------------------------------

#: Methods of str, bytes and int whose result can be much longer than their inputs.
GROWING_METHODS = frozenset(
    {
        "center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join", "translate",
        "encode", "to_bytes", "split", "rsplit", "splitlines",
    }
)  # fmt: skip
# Encodings that write one byte per ASCII character.
_ASCII_ENCODINGS = frozenset({"utf8", "utf_8", "ascii", "us_ascii", "latin1", "latin_1", "cp1252"})
# Bytes one character can become. ASCII text: 4 in utf-32, 5 in utf-7 (`~` is `+AH4-`).
# Other text: 4 in a UTF; 10 in an escape codec (`\U0001f600`) or under an error handler that
# spells it out, 100 under `namereplace` (Unicode names reach 88 characters).
_ASCII_WIDTH = 5
_UTF_WIDTH = 4
_SPELLED_OUT = {"backslashreplace": 10, "xmlcharrefreplace": 10, "namereplace": 100}
_ESCAPE_WIDTH = 10


def check_method(
    method: str, owner: str | bytes | int, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> None:
    """Refuse a str, bytes or int method call whose result would be over budget, before it runs."""
    limit = tick()
    if isinstance(owner, int):
        size = _to_bytes_size(args, kwargs) if method == "to_bytes" else 0
    else:
        size = _text_method_size(method, owner, args, kwargs, limit)
    if size > limit:
        raise too_large(f"the result of .{method}()", size, limit)


def _to_bytes_size(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    length = args[0] if args else kwargs.get("length", 1)
    return length if _is_int(length) else 0


def _text_method_size(
    method: str, text: str | bytes, args: tuple[Any, ...], kwargs: Mapping[str, Any], limit: int
) -> int:
    size = len(text)
    if method in {"center", "ljust", "rjust", "zfill"} and args and _is_int(args[0]):
        size = max(size, args[0])
    elif method == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        tabs = text.count("\t") if isinstance(text, str) else text.count(b"\t")
        size += tabs * max(tab if _is_int(tab) else 0, 0)
    elif method == "replace" and len(args) >= 2:
        old, new = args[0], args[1]
        count = args[2] if len(args) > 2 else kwargs.get("count", -1)
        if isinstance(old, str | bytes) and isinstance(new, str | bytes):
            hits = text.count(old) if old else size + 1  # type: ignore[arg-type]
            if _is_int(count) and count >= 0:
                hits = min(hits, count)
            size += hits * len(new)
    elif method == "join" and args and isinstance(args[0], list | tuple):
        items = args[0]
        size *= max(len(items) - 1, 0)
        size += _total_size(items, limit)
    elif method == "translate" and args:
        size *= _longest_replacement(args[0])
    elif method == "encode" and isinstance(text, str):
        size = _encoded_size(text, args, kwargs)
    elif method in {"split", "rsplit", "splitlines"}:
        size += ITEM_OVERHEAD * _pieces(method, text, args, kwargs)
    return size


# What a list adds to each item it prints: quotes and `, ` (`['a', 'b']`).
ITEM_OVERHEAD = 4
_WHITESPACE = (" ", "\t", "\n", "\r", "\x0b", "\x0c")
_LINE_BREAKS = ("\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def _pieces(
    method: str, text: str | bytes, args: tuple[Any, ...], kwargs: Mapping[str, Any]
) -> int:  # fmt: skip
    """How many items `split`, `rsplit` or `splitlines` can make of `text`: a list of a million
    one-character strings prints five times as long as the text and takes 80 bytes a character."""
    as_text = text.decode("latin-1") if isinstance(text, bytes) else text
    if method == "splitlines":
        return 1 + sum(as_text.count(mark) for mark in _LINE_BREAKS)
    sep = args[0] if args else kwargs.get("sep")
    if isinstance(sep, str | bytes) and sep:
        found = as_text.count(sep.decode("latin-1") if isinstance(sep, bytes) else sep)
    else:  # runs of whitespace
        found = sum(as_text.count(mark) for mark in _WHITESPACE)
    limit = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
    return 1 + (min(found, limit) if _is_int(limit) and limit >= 0 else found)


def _longest_replacement(table: Any) -> int:
    """`str.translate` looks each character up in `table` (a dict, or a list by code point)."""
    if isinstance(table, Mapping):
        values: Iterable[Any] = table.values()
    elif isinstance(table, list | tuple):
        values = table
    else:
        return 1
    return max((len(v) for v in values if isinstance(v, str | bytes)), default=1) or 1


def _encoded_size(text: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> int:
    encoding = args[0] if args else kwargs.get("encoding", "utf-8")
    errors = args[1] if len(args) > 1 else kwargs.get("errors", "strict")
    name = encoding.lower().replace("-", "_") if isinstance(encoding, str) else ""
    if text.isascii():
        width = 1 if name in _ASCII_ENCODINGS else _ASCII_WIDTH
    elif isinstance(errors, str) and errors in _SPELLED_OUT:
        width = _SPELLED_OUT[errors]
    else:
        width = _UTF_WIDTH if name.startswith("utf") else _ESCAPE_WIDTH
    return len(text) * width + 4  # and a byte-order mark
