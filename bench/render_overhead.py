"""What bounded rendering costs a benign render: the shipped `summarize` pattern, in-process.

(a) `PatternCatalog.apply_template` called directly (the sandbox's checks, no thread hop);
(b) the same render awaited through `TemplateRenderer.run` (dedicated pool, wait_for, budget);
(c) for reference, the same render awaited through `asyncio.to_thread` (the bare thread hop).

    .venv/bin/python -m bench.render_overhead [--n 10000]

Best of 7 runs, in microseconds per render. Figures are reported, never asserted. To compare
with a tree without the budget, export its `app/` (`git archive <commit> app | tar -x -C DIR`)
and run this file with `PYTHONPATH=DIR`: (b) and (c) are skipped there.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import time
import timeit
from pathlib import Path

import structlog

from app.catalog import PatternCatalog

PATTERNS = Path(__file__).resolve().parent.parent / "patterns"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    n = parser.parse_args().n
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    adapter = PatternCatalog(base_path=PATTERNS)
    work = functools.partial(adapter.apply_template, "summarize", {}, user_prompt="Some text.")

    def direct() -> None:
        for _ in range(n):
            work()

    best = min(timeit.repeat(direct, number=1, repeat=7))
    print(f"(a) direct apply_template           {best / n * 1e6:8.2f} us/render")
    try:
        from app.catalog.renderer import TemplateRenderer
    except ImportError:
        return

    async def awaited() -> None:
        renderer = TemplateRenderer(timeout_seconds=2.0, max_chars=1_000_000, workers=4)
        pooled = hop = float("inf")
        try:
            for _ in range(7):
                started = time.perf_counter()
                for _ in range(n):
                    await renderer.run("summarize", work)
                pooled = min(pooled, time.perf_counter() - started)
                started = time.perf_counter()
                for _ in range(n):
                    await asyncio.to_thread(work)
                hop = min(hop, time.perf_counter() - started)
        finally:
            renderer.close()
        print(f"(b) awaited TemplateRenderer.run    {pooled / n * 1e6:8.2f} us/render")
        print(f"(c) awaited asyncio.to_thread       {hop / n * 1e6:8.2f} us/render")

    asyncio.run(awaited())


if __name__ == "__main__":
    main()
