"""Quick renders: a compiled template with no nested loop, macro or include, over small inputs,
renders on the event loop within a short slice; anything else, or a quick job that outlasts
the slice, renders in a render thread with the whole budget, with the same result."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from app.catalog import PatternCatalog
from app.catalog.engine import _ENV, apply_template, compile_section, renders_quickly
from app.catalog.renderer import SMALL_INPUTS, TemplateRenderer, small_inputs
from app.catalog.resolver import SourceResolver
from app.errors import RenderTooLarge


def quick(source: str) -> bool:
    return renders_quickly(_ENV.parse(source))


@pytest.mark.parametrize(
    "source",
    [
        "Hello {{ name }}",
        "{% if strict %}Refuse.{% else %}Help.{% endif %} {{ topic | lower }}",
        "{% for channel in channels %}- {{ channel }}\n{% endfor %}",
        "{% for a in xs %}{{ a }}{% endfor %}{% for b in ys %}{{ b }}{% endfor %}",
        "{% set greeting = 'Hi ' ~ name %}{{ greeting }}",
    ],
)
def test_straight_line_and_single_loops_are_quick(source: str) -> None:
    assert quick(source)


@pytest.mark.parametrize(
    "source",
    [
        "{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        "{% for a in s %}{% if a %}{% for b in s %}{{ b }}{% endfor %}{% endif %}{% endfor %}",
        "{% macro down(n) %}{{ down(n + 1) }}{% endmacro %}{{ down(0) }}",
        "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}",
        "{% filter upper %}{{ name }}{% endfilter %}",
        "{% include 'other' %}",
        "{% extends 'base' %}",
        "{% import 'macros' as m %}{{ m.x() }}",
    ],
)
def test_nested_loops_macros_and_includes_are_not_quick(source: str) -> None:
    assert not quick(source)


def test_small_inputs_counts_every_character_and_item() -> None:
    assert small_inputs({"name": "Ada", "channels": ["email", "phone"]}, "hello")
    assert small_inputs({"n": 1, "f": 1.5, "b": True, "z": None})
    assert not small_inputs({"policy": "x" * SMALL_INPUTS})
    assert not small_inputs({"deep": [{"a": ["x" * 5000]}] * 4})
    assert not small_inputs({"items": list(range(SMALL_INPUTS))})
    assert not small_inputs({}, "u" * (SMALL_INPUTS + 1))  # the user prompt counts too
    assert not small_inputs({"odd": object()})  # not JSON: its size is unknown


def _thread_of(renderer: TemplateRenderer, quick: bool) -> threading.Thread:
    async def run() -> threading.Thread:
        return await renderer.run("t", threading.current_thread, quick=quick)

    import asyncio

    return asyncio.run(run())


def test_a_quick_job_runs_on_the_loop_and_any_other_in_a_render_thread() -> None:
    renderer = TemplateRenderer(timeout_seconds=1.0, max_chars=100_000, workers=1)
    try:
        assert _thread_of(renderer, quick=True) is threading.main_thread()
        assert _thread_of(renderer, quick=False).name.startswith("render")
    finally:
        renderer.close()


async def test_a_quick_job_that_outlasts_its_slice_finishes_in_a_render_thread() -> None:
    # A single loop is quick by shape; 100,000 iterations outlast the 5 ms slice.
    compiled = compile_section("long", "{% for i in range(n) %}{{ i % 10 }}{% endfor %}")
    assert compiled.quick
    threads: list[threading.Thread] = []

    def work() -> str:
        threads.append(threading.current_thread())
        return apply_template("long", compiled.template, compiled.referenced, {"n": 100_000})

    renderer = TemplateRenderer(timeout_seconds=10.0, max_chars=1_000_000, workers=1)
    try:
        with capture_logs() as logs:
            text = await renderer.run("long", work, quick=True)
    finally:
        renderer.close()
    assert text == "0123456789" * 10_000
    assert threads[0] is threading.main_thread() and threads[-1].name.startswith("render")
    assert [e["event"] for e in logs] == ["render_moved_off_loop"]


async def test_a_quick_job_over_its_size_budget_fails_as_it_would_in_a_thread() -> None:
    compiled = compile_section("big", "{{ 'a' * n }}")
    renderer = TemplateRenderer(timeout_seconds=1.0, max_chars=1_000, workers=1)

    def work() -> str:
        return apply_template("big", compiled.template, compiled.referenced, {"n": 10**6})

    try:
        for quick_job in (True, False):
            with pytest.raises(RenderTooLarge):
                await renderer.run("big", work, quick=quick_job)
    finally:
        renderer.close()


class _NoTemplates:
    async def get(self, name: str, role: str, version: int) -> object:
        raise AssertionError("no template is read")


class _NoLabels:
    async def get(self, name: str, role: str, label: str) -> object:
        raise AssertionError("no label is read")


async def test_patterns_render_on_the_loop_only_once_compiled_quick_and_small(
    tmp_path: Path,
) -> None:
    (tmp_path / "greet.md").write_text("---\ndescription: d\n---\nHello {{ name }}\n")
    (tmp_path / "grid.md").write_text(
        "---\ndescription: d\n---\n{% for a in xs %}{% for b in xs %}{{ a }}{{ b }}"
        "{% endfor %}{% endfor %}\n"
    )
    catalog = PatternCatalog(tmp_path)
    renderer = TemplateRenderer(timeout_seconds=1.0, max_chars=100_000, workers=1)
    resolver = SourceResolver(
        patterns=catalog,
        templates=_NoTemplates(),  # type: ignore[arg-type]
        labels=_NoLabels(),  # type: ignore[arg-type]
        renderer=renderer,
    )
    seen: list[bool] = []
    run = renderer.run

    async def spy(name: str, work: object, *, quick: bool = False) -> object:
        seen.append(quick)
        return await run(name, work, quick=quick)  # type: ignore[arg-type]

    renderer.run = spy  # type: ignore[method-assign,assignment]
    try:
        assert not catalog.renders_quickly("greet")  # not compiled yet: compiled in a thread
        first = await resolver.pattern("greet", {"name": "Ada"}, "hi")
        assert catalog.renders_quickly("greet")
        second = await resolver.pattern("greet", {"name": "Ada"}, "hi")
        big = await resolver.pattern("greet", {"name": "Ada" * 10_000}, "hi")
        await resolver.pattern("grid", {"xs": [1, 2]}, "hi")
        await resolver.pattern("grid", {"xs": [1, 2]}, "hi")
    finally:
        renderer.close()
    assert first.system == second.system == "Hello Ada"
    assert big.system == "Hello " + "Ada" * 10_000
    assert seen == [False, True, False, False, False]
    assert not catalog.renders_quickly("grid") and not catalog.renders_quickly("missing")
