"""Bounded rendering: no template, file or database, can stall the event loop, run past its time
budget, grow past its size budget or crash with a 500. Each hostile class is checked in the
engine and over HTTP; legitimate templates still render exactly as stock Jinja renders them."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from app.catalog import PatternCatalog, budget
from app.catalog import renderer as renderer_module
from app.catalog.budget import RenderBudget, render_budget
from app.catalog.engine import _ENV, apply_template, compile_template
from app.catalog.pattern import _split_sections, split_front_matter
from app.catalog.renderer import TemplateRenderer
from app.errors import (
    InvalidPattern,
    PatternRenderError,
    RenderLimitExceeded,
    RenderTimeout,
    RenderTooDeep,
    RenderTooLarge,
)
from tests.fakes.provider_server import FakeProviderServer
from tests.support import SHIPPED_PATTERNS, serve_app, settings_for
from tests.support import run_cli as run

# Pure Python loops no sandbox hook sees: only the renderer's injected interrupt stops them.
NESTED_STRING_LOOPS = (
    "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
)
NESTED_RANGES = (
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ '' }}{% endfor %}{% endfor %}"
)
RECURSIVE_MACRO = "{% macro down(n) %}{{ down(n + 1) }}{% endmacro %}{{ down(0) }}"
NAMESPACE_DOUBLING = (
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s }}"
)

# (template body, the error.type it must produce). None of these may take the process down.
HOSTILE = [
    pytest.param("{{ 9**(9**9) }}", "render_too_large", id="folded-power"),
    pytest.param("{{ 9**(9**(9**9)) }}", "render_too_large", id="tower-of-powers"),
    pytest.param("{{ 'a' * 10**9 }}", "render_too_large", id="string-repetition"),
    pytest.param("{{ [0] * 10**9 }}", "render_too_large", id="list-repetition"),
    pytest.param("{{ '%*s' % (10**9, 'x') }}", "render_too_large", id="percent-star-width"),
    pytest.param("{{ '%0999999999d' % 1 }}", "render_too_large", id="percent-literal-width"),
    pytest.param("{{ 'x'|center(10**9) }}", "render_too_large", id="center-filter"),
    pytest.param("{{ 'x'.rjust(10**9) }}", "render_too_large", id="rjust-method"),
    pytest.param("{{ '{:>999999999}'.format('x') }}", "render_too_large", id="str-format-width"),
    pytest.param("{{ '%999999999s'|format('x') }}", "render_too_large", id="format-filter"),
    pytest.param("{{ ('a\n' * 1000)|indent(10**6) }}", "render_too_large", id="indent-filter"),
    pytest.param("{{ range(10**9)|length }}", "render_too_large", id="huge-range"),
    pytest.param("{{ range(100000)|join('x' * 999999) }}", "render_too_large", id="join-filter"),
    pytest.param("{{ lipsum(10**6) }}", "render_too_large", id="lipsum"),
    pytest.param("{{ [1]|batch(10**9, 0)|list }}", "render_too_large", id="batch-filter"),
    pytest.param(
        "{{ ('a ' * 400000)|wordwrap(1, true, 'x' * 100) }}",
        "render_too_large",
        id="wordwrap-positional-wrapstring",
    ),
    pytest.param(NAMESPACE_DOUBLING, "render_too_large", id="namespace-doubling"),
    pytest.param("{{ ['x' * 999999] * 1000 }}", "render_too_large", id="few-items-heavy-list"),
    pytest.param("{{ ('{0}' * 1000).format('x' * 999999) }}", "render_too_large",
                 id="str-format-repeated-field"),
    pytest.param("{{ 1|tojson(indent=10**9) }}", "render_too_large", id="tojson-integer-indent"),
    pytest.param(
        "{% set y = 'x' * 999999 %}{{ [y, y, y]|string }}",
        "render_too_large",
        id="heavy-container-stringified",
    ),
    pytest.param(
        "{% set y = 'a' * 999999 %}{% set x %}{% for i in range(1000) %}{{ y }}{% endfor %}"
        "{% endset %}{{ x }}",
        "render_too_large",
        id="block-set-capture",
    ),
    pytest.param("{% for i in range(99999) %}{{ 'x' * 999 }}{% endfor %}", "render_too_large",
                 id="output-past-the-limit"),
    pytest.param(RECURSIVE_MACRO, "render_too_deep", id="recursive-macro"),
    pytest.param(NESTED_RANGES, "render_timeout", id="nested-range-loops"),
    pytest.param(NESTED_STRING_LOOPS, "render_timeout", id="nested-loops-over-a-string"),
]  # fmt: skip


def budget_for(error_type: str) -> float:
    """Seconds of render budget for a hostile case. Only the cases meant to time out get the
    short one: the others are stopped by size and depth checks, and a slow machine (first render
    includes the lazy compile) must not turn them into timeouts."""
    return 0.5 if error_type == "render_timeout" else 10.0


ERRORS: dict[str, type[RenderLimitExceeded]] = {
    "render_too_large": RenderTooLarge,
    "render_too_deep": RenderTooDeep,
    "render_timeout": RenderTimeout,
}


def compile_and_render(source: str, **variables: Any) -> Callable[[], str]:
    def work() -> str:
        template, referenced = compile_template("hostile", source)
        return apply_template("hostile", template, referenced, variables)

    return work


# --- the engine -------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "error_type"), HOSTILE)
async def test_each_hostile_template_is_stopped_by_the_renderer_with_its_error(
    body: str, error_type: str
) -> None:
    renderer = TemplateRenderer(
        timeout_seconds=budget_for(error_type), max_chars=1_000_000, workers=2
    )
    try:
        with pytest.raises(ERRORS[error_type]) as caught:
            await asyncio.wait_for(renderer.run("hostile", compile_and_render(body)), timeout=30)
    finally:
        renderer.close()
    assert caught.value.error_type == error_type
    assert caught.value.status_code == 422


async def test_a_pool_thread_is_free_again_after_a_hostile_render_is_interrupted() -> None:
    single = TemplateRenderer(timeout_seconds=0.5, max_chars=1_000_000, workers=1)
    try:
        with pytest.raises(RenderTimeout):
            await single.run("hostile", compile_and_render(NESTED_STRING_LOOPS))
        # The only thread ran the hostile loop; it must be back in service, not stuck.
        assert await asyncio.wait_for(single.run("next", lambda: "served"), timeout=5) == "served"
    finally:
        single.close()


async def test_a_swallowed_interrupt_is_repeated_until_the_thread_is_free() -> None:
    """CPython ignores an exception raised inside a weakref or GC callback (seen in CI: the
    injected interrupt landed in `WeakSet._remove`); one lost injection must not keep the
    thread."""

    def swallows_the_first_interrupt() -> str:
        try:
            while True:
                pass
        except renderer_module._Interrupted:
            pass  # what CPython does with it inside a callback
        while True:
            pass

    single = TemplateRenderer(timeout_seconds=0.5, max_chars=1_000_000, workers=1)
    try:
        with pytest.raises(RenderTimeout):
            await single.run("hostile", swallows_the_first_interrupt)
        assert await asyncio.wait_for(single.run("next", lambda: "served"), timeout=5) == "served"
    finally:
        single.close()


def test_powers_compile_into_runtime_calls_not_folded_constants() -> None:
    """Jinja folds constant expressions while compiling; an intercepted operator is not folded,
    so compiling `9**(9**9)` costs nothing and the budget check runs at render time."""
    code = _ENV.compile("{{ 9**(9**9) }}", raw=True)
    assert "call_binop" in code
    started = time.monotonic()
    compile_template("power", "{{ 9**(9**9) }} {{ 'x'|center(10**9) }} {{ 'a' * 10**9 }}")
    assert time.monotonic() - started < 10  # liveness only: folding would take minutes


def test_a_left_associative_power_chain_is_small_and_renders() -> None:
    """`9**9**9**9` is ((9**9)**9)**9 in Jinja, that is 9**729: a 696-digit number, allowed."""
    template, referenced = compile_template("chain", "{{ 9**9**9**9 }}")
    assert apply_template("chain", template, referenced, {}) == str(9**729)


def test_nested_range_loops_stop_at_the_deadline_by_themselves() -> None:
    """The cooperative check: range() looks at the clock on every step, no interrupt needed."""
    template, referenced = compile_template("ranges", NESTED_RANGES)
    budget = RenderBudget(deadline=time.monotonic() + 0.2, max_chars=1_000_000)
    with render_budget(budget), pytest.raises(RenderTimeout):
        apply_template("ranges", template, referenced, {})


def test_size_limits_apply_even_outside_the_renderer() -> None:
    template, referenced = compile_template("big", "{{ 'a' * 10**9 }}")
    with pytest.raises(RenderTooLarge) as caught:
        apply_template("big", template, referenced, {})
    assert caught.value.details() == {"template": "big"}


def test_the_output_limit_counts_what_the_template_writes() -> None:
    template, referenced = compile_template("out", "{% for i in range(n) %}{{ chunk }}{% endfor %}")
    with render_budget(RenderBudget(deadline=None, max_chars=10_000)):
        assert len(apply_template("out", template, referenced, {"n": 10, "chunk": "x" * 1000})) == (
            10_000
        )
        with pytest.raises(RenderTooLarge):
            apply_template("out", template, referenced, {"n": 11, "chunk": "x" * 1000})


def test_a_template_nesting_too_deep_to_compile_is_refused_not_crashed() -> None:
    with pytest.raises(RenderTooDeep):
        compile_template("deep", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}")


def test_summing_many_lists_is_linear_and_equal_to_the_builtin() -> None:
    template, referenced = compile_template("sum", "{{ (lists|sum(start=[]))|length }}")
    lists = [[1]] * 200_000  # the builtin would copy the running total 200,000 times
    assert apply_template("sum", template, referenced, {"lists": lists}) == "200000"
    template, referenced = compile_template("sum", "{{ [[1, 2], [3]]|sum(start=[0]) }}")
    assert apply_template("sum", template, referenced, {}) == str(sum([[1, 2], [3]], [0]))


# --- growth before the size check --------------------------------------------------------------

# Each template below grows a value by a factor it chooses, or (the last four) holds its thread
# in one long C call. At a 100,000-character budget, computing one before its size check
# allocates from 4 MB (a split into characters) to 160 MB (a thousand reprs); estimated first,
# none allocates more than about a megabyte.
GROWTH_LIMIT = 100_000
GROWTH_PEAK_BYTES = 30 * GROWTH_LIMIT
SHARED_LIST = "{% set a = 'a' * 9999 %}{% set b = [a, a, a, a, a, a, a, a] %}"
TRANSLATION_TABLE = "{% set w = 'b' * 1000 %}{% set t = [" + ", ".join(["w"] * 98) + "] %}"
HUGE_HEX_INTS = "{% set x = ('f' * 50000)|int(base=16) %}{% set y = ('f' * 25000)|int(base=16) %}"
DEEP_NAMESPACE = (
    "{% set ns = namespace(x='a ' * 40000) %}{% for i in range(80) %}{% set ns.x = [ns.x] %}"
    "{% endfor %}"
)
GROWTH = [
    pytest.param("{{ ('{0}' * 1000).format('a' * 99999) }}", id="str-format-repeated-field"),
    pytest.param("{{ ('{a}' * 1000).format_map({'a': 'a' * 99999}) }}",
                 id="str-format-map-repeated-field"),
    pytest.param(SHARED_LIST + "{{ ('{0!r}' * 1000).format(b) }}", id="str-format-repr-field"),
    pytest.param("{{ ('%(a)s' * 1000) % {'a': 'a' * 49999} }}", id="percent-repeated-key"),
    pytest.param("{{ ('%(a)s' * 1000)|format(a='a' * 49999) }}", id="format-filter-repeated-key"),
    pytest.param("{{ '%099999999d'.encode() % 1 }}", id="bytes-percent-width"),
    pytest.param("{{ (1).to_bytes(10**8, 'big')|length }}", id="int-to-bytes"),
    pytest.param(TRANSLATION_TABLE + "{{ ('a' * 99999).translate(t)|length }}",
                 id="translate-by-list"),
    pytest.param("{{ ('\u00e9' * 99999).encode('ascii', 'namereplace')|length }}",
                 id="encode-namereplace"),
    pytest.param("{{ ('\u4e00 ' * 49999).split()|length }}", id="split-into-characters"),
    pytest.param("{{ ('\u4e00' * 99999)|list|length }}", id="list-of-characters"),
    pytest.param("{% set ns = namespace(a='x' * 99999) %}{{ [ns] * 1000 }}",
                 id="namespace-repeated"),
    pytest.param("{{ 1|tojson(indent=10**8) }}", id="tojson-integer-indent"),
    pytest.param("{{ range(1000)|join('x' * 99999, attribute='real') }}",
                 id="join-filter-attribute"),
    pytest.param("{{ range(1000)|map('center', 99999)|list|length }}", id="map-then-list"),
    pytest.param("{% for x in range(1000)|map('center', 99999) %}{{ loop.length }}{% endfor %}",
                 id="map-then-loop-length"),
    pytest.param("{{ cycler(*(range(1000)|map('center', 99999))) }}", id="map-then-star-args"),
    pytest.param("{{ [1]|slice(99999, 0)|list|length }}", id="slice-many-fillers"),
    pytest.param(DEEP_NAMESPACE + "{{ ns.x|pprint|length }}", id="pprint-deep-string"),
    pytest.param("{{ ('\U0001F600' * 99999)|urlencode|length }}", id="urlencode-emoji"),
    pytest.param("{{ 'a'|center(99999) }}" * 100, id="compile-time-folding"),
    pytest.param(HUGE_HEX_INTS + "{{ (x // y) is number }}", id="floor-division-huge-ints"),
    pytest.param(HUGE_HEX_INTS + "{{ x % y }}", id="modulo-huge-ints"),
    pytest.param(HUGE_HEX_INTS + "{{ x is divisibleby(y) }}", id="divisibleby-huge-ints"),
    pytest.param("{{ 12345|round(-100000) }}", id="round-to-huge-precision"),
]  # fmt: skip


@pytest.mark.parametrize("body", GROWTH)
def test_each_growth_path_is_refused_before_it_allocates(body: str) -> None:
    """Untimed, as a pattern file compiles in the reload thread: only the estimates can stop
    these. Refused from the estimate, not from running out of memory, and the peak shows the
    large value was never built (compiling included: folding constants ran filters)."""
    with render_budget(RenderBudget(deadline=None, max_chars=GROWTH_LIMIT)):
        tracemalloc.start()
        try:
            with pytest.raises(RenderTooLarge) as caught:
                compile_and_render(body)()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert caught.value.details() == {"template": "hostile"}
    assert "out of memory" not in str(caught.value)
    assert peak < GROWTH_PEAK_BYTES, f"{peak:,} bytes at the peak"


# Each value within the limit, but kept all at once: by the hundred in the source, or one per
# level of recursion (about 160 levels before the interpreter's limit).
KEPT_AT_ONCE = [
    pytest.param("".join(f"{{% set s{i} = 'x' * 99999 %}}" for i in range(400)), id="many-sets"),
    pytest.param("{% macro m(n) %}{% set s = 'x' * 99999 %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}",
                 id="recursive-macro-locals"),
    pytest.param("{% macro m(s) %}{{ m(s ~ '') }}{% endmacro %}{{ m('x' * 99999) }}",
                 id="recursive-macro-concat"),
    pytest.param("{% macro m(s) %}{{ m(s[1:]) }}{% endmacro %}{{ m('x' * 99999) }}",
                 id="recursive-macro-slices"),
    pytest.param("{% for x in ['x' * 99999] recursive %}{{ loop([x ~ '']) }}{% endfor %}",
                 id="recursive-loop"),
    pytest.param("{% set x = ('f' * 70000)|int(base=16) %}"
                 + "".join(f"{{% set y{i} = -x %}}" for i in range(400)), id="negated-long-ints"),
]  # fmt: skip


@pytest.mark.parametrize("body", KEPT_AT_ONCE)
def test_values_kept_at_once_are_bounded_by_the_render_allowance(body: str) -> None:
    template, referenced = compile_template("kept", body)
    with render_budget(RenderBudget(deadline=None, max_chars=GROWTH_LIMIT)):
        tracemalloc.start()
        try:
            with pytest.raises(RenderTooLarge) as caught:
                apply_template("kept", template, referenced, {})
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert "everything this render has built would be" in str(caught.value)
    assert peak < (budget.ALLOWANCE_FACTOR + 8) * GROWTH_LIMIT, f"{peak:,} bytes at the peak"


def test_the_allowance_counts_every_value_a_render_builds() -> None:
    """Values built and dropped count too: the allowance bounds what a render builds in all, a
    multiple of the size limit (32), so it also bounds what it can keep."""
    body = "{% for i in range(n) %}{% set s = 'x' * 99999 %}{% endfor %}done"
    template, referenced = compile_template("spent", body)
    with render_budget(RenderBudget(deadline=None, max_chars=GROWTH_LIMIT)):
        assert apply_template("spent", template, referenced, {"n": 32}) == "done"
        with pytest.raises(RenderTooLarge) as caught:
            apply_template("spent", template, referenced, {"n": 33})
    assert "everything this render has built would be 3,299,967 long" in str(caught.value)


def test_format_fields_count_together_against_the_limit() -> None:
    """Two fields of a value each within the limit, together over it: refused at the second."""
    template, referenced = compile_template("fields", "{{ '{0}{0}'.format(half) }}")
    with render_budget(RenderBudget(deadline=None, max_chars=10_000)):
        assert apply_template("fields", template, referenced, {"half": "x" * 4_990}) == "x" * 9_980
        with pytest.raises(RenderTooLarge) as caught:
            apply_template("fields", template, referenced, {"half": "x" * 5_001})
    assert "the formatted string would be" in str(caught.value)


def test_a_namespace_is_weighed_by_its_attributes() -> None:
    """Its repr prints every attribute: repeating a namespace that holds a long string is
    refused like repeating the string, before the list exists."""
    body = "{% set ns = namespace(a=text) %}{{ ([ns] * 100)|length }}"
    template, referenced = compile_template("ns", body)
    with render_budget(RenderBudget(deadline=None, max_chars=10_000)):
        assert apply_template("ns", template, referenced, {"text": "xx"}) == "100"
        with pytest.raises(RenderTooLarge) as caught:
            apply_template("ns", template, referenced, {"text": "x" * 200})
    assert "the repetition would be" in str(caught.value)


def test_filters_are_not_run_while_compiling() -> None:
    """Jinja folds constant filter calls into the compiled code; here they run when rendered,
    where the budget (and a deadline) applies."""
    code = _ENV.compile("{{ 'a'|center(99999) }}{{ 'a' ~ 'b' }}", raw=True)
    assert "center" in code and "concat_values" in code
    assert "a" * 1000 not in code
    template, referenced = compile_template("folded", "{{ name|upper }}{{ 'a'|upper }}")
    assert referenced == {"name"}
    assert apply_template("folded", template, referenced, {"name": "x"}) == "XA"


# --- legitimate templates are unchanged -------------------------------------------------------

LEGITIMATE = [
    "{% for item in items %}{{ loop.index }}. {{ item.name|upper }}\n{% endfor %}",
    "{{ '%-6s|%5.2f|%03d' % ('ab', 3.14159, 7) }} {{ '{:>8}|{:^5}'.format('r', 'c') }}",
    "{{ 'x' * 3 }}{{ [1, 2] + [3] }}{{ 2 ** 10 }}{{ 'a' ~ 1 ~ none }}{{ 7 % 3 }}",
    "{{ range(3) }} {{ range(5)|reverse|list }} {{ range(10)[2:5]|list }} {{ 3 in range(5) }}",
    "{{ text|center(30) }}|{{ text|indent(2, true) }}|{{ text|wordwrap(5) }}|{{ text|truncate(9) }}"
    "{{ text|wordwrap(4, wrapstring='/') }}|{{ text|urlize }}|{{ 'a\tb'.expandtabs(4) }}",
    "{{ items|map(attribute='name')|join(', ') }} {{ [1, 2, 3]|sum }} {{ items|tojson }}",
    "{{ {'b': [1, {'c': 2}]}|tojson(indent=2) }} {{ 'a-b'|replace('-', '+') }}",
    "{% macro row(x) %}<{{ x }}>{% endmacro %}{% for i in range(3) %}{{ row(i) }}{% endfor %}",
    "{% set ns = namespace(total='') %}{% for i in range(4) %}{% set ns.total = ns.total ~ i %}"
    "{% endfor %}{{ ns.total }} {% set block %}captured {{ text }}{% endset %}{{ block }}",
    "{{ '%s and %s'|format('this', 'that') }} {{ [[1], [2]]|sum(start=[]) }} {{ 'ab'.center(6) }}",
    "{{ '{a}-{b}'.format_map({'a': 1, 'b': 2}) }} {{ [1, 2, 3]|batch(2)|list }}",
    "{{ text|truncate(12, false, '~', 0) }} {{ text|wordwrap(6, true, '|') }} {{ items }}",
    "{{ '{0}-{0}|{0!r}|{n:>{w}}'.format('ab', n=7, w=4) }} {{ '%(a)s %(a)s %%' % {'a': 'x'} }}",
    "{{ '%5.1f|%x' % (3.14159, 255) }} {{ '%-3s|'|format('z') }} {{ 'x'.encode() % () }}",
    "{{ 7 // 2 }} {{ -7 % 3 }} {{ 10 is divisibleby 5 }} {{ 3.14159|round(2) }} {{ 5|round }}",
    "{{ 7 - 2 }} {{ -3 }} {{ -(2 ** 70) }} {{ range(3, 0, -1)|list }} {{ 'ff'|int(base=16) }}",
    "{{ (258).to_bytes(2, 'big') }} {{ 'ab'.translate({97: 'xy'}) }} {{ 'e\u0301'.encode() }}",
    "{{ text.split() }} {{ 'a,b'.split(',') }} {{ 'a\nb'.splitlines() }} {{ 'abc'|list }}",
    "{{ items|pprint }} {{ items|join(', ', attribute='name') }} {{ [3, 1]|sort }}",
    "{{ [1, 2, 3]|map('string')|join('+') }} {{ text|urlencode }} {{ {'a': 1}|urlencode }}",
    "{{ [1, 2, 3, 4, 5]|slice(2, 0)|list }} {{ [1, 2, 3]|batch(2, 0)|list }} {{ none }}",
    "{% set ns = namespace(a=1, b=[2.5]) %}{{ ns }} {{ [ns] }} {{ 'a'|upper ~ 'b' }}",
    "{{ text[2:8] }} {{ text[::-3] }} {{ items[:1] }} {{ range(9)[1::4]|list }} {{ text|reverse }}",
    "{{ items|groupby('name')|list }} {{ {'b': 1, 'a': 2}|dictsort }} {{ items|reverse|list }}",
]
SAMPLE = {"items": [{"name": "ana"}, {"name": "bo"}], "text": "two words here and more"}


@pytest.mark.parametrize("source", LEGITIMATE)
def test_legitimate_templates_render_byte_for_byte_like_stock_jinja(source: str) -> None:
    stock = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    template, referenced = compile_template("legit", source)
    variables = {name: SAMPLE[name] for name in referenced}
    assert apply_template("legit", template, referenced, variables) == stock.from_string(
        source
    ).render(**variables)


@pytest.mark.parametrize("name", PatternCatalog(base_path=SHIPPED_PATTERNS).names())
def test_shipped_patterns_render_byte_for_byte_like_stock_jinja(name: str) -> None:
    adapter = PatternCatalog(base_path=SHIPPED_PATTERNS)
    pattern = adapter.get(name)
    samples = {"labels": ["billing", "bug"], "context": "Opens at 9.", "target_language": "German"}
    variables = {v: samples[v] for v in pattern.required_variables}
    rendered = adapter.apply_template(name, variables, user_prompt="The user's text.")
    scope = {**rendered.variables, "user_prompt": "The user's text."}
    stock = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    path = SHIPPED_PATTERNS / f"{name}.md"
    _, body = split_front_matter(name, path.read_text(encoding="utf-8"))
    expected = [
        stock.from_string(source).render(**scope) for _, source in _split_sections(name, body)
    ]
    assert [rendered.system, *(m.content for m in rendered.messages)][-len(expected) :] == expected


# --- pattern files ----------------------------------------------------------------------------


def write_pattern(root: Path, name: str, body: str) -> None:
    (root / f"{name}.md").write_text(f"---\ndescription: Hostile.\n---\n{body}", encoding="utf-8")


async def test_loading_and_reloading_hostile_pattern_files_never_hangs(tmp_path: Path) -> None:
    """Compiling folds nothing that can explode, so the reload thread stays live; such a file
    loads as valid and is stopped when it renders (a file too deep to compile is invalid)."""
    write_pattern(tmp_path, "power", "{{ 9**(9**9) }}")
    adapter = await asyncio.wait_for(asyncio.to_thread(PatternCatalog, base_path=tmp_path), 30)
    write_pattern(tmp_path, "center", "{{ 'x'|center(10**9) }} {{ 'a' * 10**9 }}")
    write_pattern(tmp_path, "deep", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}")
    assert await asyncio.wait_for(asyncio.to_thread(adapter.refresh), 30)
    problems = await asyncio.wait_for(asyncio.to_thread(adapter.check), 30)  # compiles bodies
    assert sorted(problems) == ["deep"]
    assert "nests too deeply" in problems["deep"].problems[0]
    for name in ("power", "center"):
        with pytest.raises(RenderTooLarge):
            adapter.apply_template(name, {})
    with pytest.raises(InvalidPattern):
        adapter.apply_template("deep", {})


@pytest.mark.parametrize(("body", "error_type"), HOSTILE)
async def test_a_hostile_pattern_file_answers_422_with_its_error_type(
    fake: FakeProviderServer, tmp_path: Path, body: str, error_type: str
) -> None:
    write_pattern(tmp_path, "hostile", body)
    settings = settings_for(
        fake, pattern_dir=[tmp_path], render_timeout_seconds=budget_for(error_type)
    )
    async with serve_app(settings) as http:
        resp = await asyncio.wait_for(
            http.post("/v1/render", json={"pattern_key": "hostile", "user_prompt": "x"}), 30
        )
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["type"] == error_type


async def test_healthz_answers_while_a_hostile_render_runs(
    fake: FakeProviderServer, tmp_path: Path
) -> None:
    write_pattern(tmp_path, "spin", NESTED_STRING_LOOPS)
    settings = settings_for(fake, pattern_dir=[tmp_path], render_timeout_seconds=3)
    async with serve_app(settings) as http:
        render = asyncio.create_task(
            http.post("/v1/render", json={"pattern_key": "spin", "user_prompt": "x"})
        )
        await asyncio.sleep(0.2)  # let the render start spinning in its thread
        health = await asyncio.wait_for(http.get("/healthz"), timeout=5)
        assert health.status_code == 200
        assert not render.done(), "the hostile render should still be running"
        resp = await asyncio.wait_for(render, timeout=30)
    assert resp.status_code == 422
    assert resp.json()["error"]["type"] == "render_timeout"


# --- database templates -----------------------------------------------------------------------


@pytest.fixture
async def http(fake: FakeProviderServer, database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_for(
        fake, database_url=database_url, database_auto_migrate=True, render_timeout_seconds=0.5
    )
    async with serve_app(settings) as client:
        yield client


async def create(http: httpx.AsyncClient, template: str, variables: list[str]) -> httpx.Response:
    body = {"name": "probe", "role": "writer", "template": template, "variables": variables}
    return await asyncio.wait_for(http.post("/v1/templates", json=body), timeout=30)


def by_ref(variables: dict[str, Any]) -> dict[str, Any]:
    ref = {"name": "probe", "role": "writer"}
    return {"template": ref, "variables": variables, "user_prompt": "Go."}


@pytest.mark.parametrize(("body", "error_type"), HOSTILE)
async def test_creating_a_hostile_database_template_is_refused_with_its_error_type(
    fake: FakeProviderServer, tmp_path: Path, body: str, error_type: str
) -> None:
    """The refusal happens before the store is touched: one backend is enough for the matrix."""
    settings = settings_for(
        fake,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'genai.db'}",
        database_auto_migrate=True,
        render_timeout_seconds=budget_for(error_type),
    )
    async with serve_app(settings) as http_sqlite:
        resp = await create(http_sqlite, body, [])
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["type"] == error_type
        assert (await http_sqlite.get("/v1/templates")).json()["versions"] == []


async def test_a_sandbox_escape_in_a_new_database_template_is_refused(
    http: httpx.AsyncClient,
) -> None:
    resp = await create(http, "{{ who.__class__.__mro__ }}", ["who"])
    assert resp.status_code == 422
    assert resp.json()["error"]["type"] == "sandbox_violation"


@pytest.mark.parametrize(
    ("template", "variables"),
    [
        pytest.param("{% for i in items %}{{ i.name }} {% endfor %}", ["items"], id="attr-of-str"),
        pytest.param("{{ count * 2 + 1 }} {{ 'x' * count }}", ["count"], id="arithmetic-on-str"),
        pytest.param("{% for i in range(n) %}.{% endfor %}", ["n"], id="range-of-str"),
        pytest.param("{{ data.items()|list }} {{ when|int }}", ["data", "when"], id="dict-methods"),
    ],
)
async def test_a_trial_failing_only_on_placeholder_types_does_not_refuse_the_template(
    http: httpx.AsyncClient, template: str, variables: list[str]
) -> None:
    resp = await create(http, template, variables)
    assert resp.status_code == 201, resp.text


async def test_a_template_hostile_only_with_real_values_is_stopped_when_it_renders(
    http: httpx.AsyncClient,
) -> None:
    assert (await create(http, "{{ 'a' * count }}", ["count"])).status_code == 201
    ok = await http.post("/v1/render", json=by_ref({"count": 3}))
    assert ok.status_code == 200, ok.text
    assert ok.json()["prompt"]["system"].startswith("aaa")
    resp = await http.post("/v1/render", json=by_ref({"count": 10**9}))
    assert resp.status_code == 422
    assert resp.json()["error"]["type"] == "render_too_large"
    spin = await http.post("/v1/render", json=by_ref({"count": 10**5}))
    assert spin.status_code == 200  # 100,000 characters: inside the 1,000,000 budget


async def test_a_template_that_spins_only_on_real_input_is_stopped_at_the_deadline(
    http: httpx.AsyncClient,
) -> None:
    """The trial render passes (a short placeholder string), the real input makes it spin."""
    body = "{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}"
    assert (await create(http, body, ["s"])).status_code == 201  # a short placeholder: fast
    resp = await asyncio.wait_for(
        http.post("/v1/render", json=by_ref({"s": "x" * 100_000})), timeout=30
    )
    assert resp.status_code == 422
    assert resp.json()["error"]["type"] == "render_timeout"


@pytest.fixture
def cli_db(tmp_path: Path, cli_env: Callable[..., None], database_url: str) -> Path:
    pattern_root = tmp_path / "patterns"
    pattern_root.mkdir()
    cli_env(
        GENAI_DATABASE_URL=database_url,
        GENAI_DATABASE_AUTO_MIGRATE="true",
        GENAI_DATA_DIR=str(tmp_path / "data"),
        GENAI_PATTERN_DIR=str(pattern_root),
        GENAI_RENDER_TIMEOUT_SECONDS="0.5",
    )
    return tmp_path


@pytest.mark.parametrize(
    ("body", "error_type"),
    [
        pytest.param("{{ 9**(9**9) }}", "render_too_large", id="folded-power"),
        pytest.param(RECURSIVE_MACRO, "render_too_deep", id="recursive-macro"),
        pytest.param(NESTED_STRING_LOOPS, "render_timeout", id="nested-loops-over-a-string"),
        pytest.param("{{ 1|tojson(indent=10**9) }}", "render_too_large", id="tojson-indent"),
    ],
)
def test_cli_templates_create_refuses_a_hostile_template(
    cli_db: Path, body: str, error_type: str
) -> None:
    path = cli_db / "hostile.j2"
    path.write_text(body, encoding="utf-8")
    result = run("templates", "create", "probe", "writer", "--file", str(path))
    assert result.exit_code == 1
    error = result.stderr.strip().splitlines()[-1]  # one line of JSON, after any log lines
    assert json.loads(error)["error"]["type"] == error_type
    assert run("templates", "list").stdout == ""


def test_a_placeholder_type_error_is_not_a_render_limit() -> None:
    """The trial render relies on this split: wrong value shapes are PatternRenderError, never
    one of the budget errors."""
    template, referenced = compile_template("shape", "{{ 'a' * n }}")
    with pytest.raises(PatternRenderError) as caught:
        apply_template("shape", template, referenced, {"n": "<n>"})
    assert not isinstance(caught.value, RenderLimitExceeded)
