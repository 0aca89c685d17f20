"""Catalog size: `genai patterns list` wall time, `genai serve` to ready, and /v1/render cost."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import catalog
from bench.load import LoadResult, run_load
from bench.measure import smoke
from bench.procs import Children
from bench.routes import RENDER
from bench.targets import genai, prepare_store, service_env, start_service


@dataclass(frozen=True)
class CatalogResult:
    patterns: int
    list_s: float
    listed: int
    ready_s: float
    render: LoadResult

    def as_dict(self) -> dict[str, object]:
        return {
            "patterns": self.patterns,
            "patterns_list_s": round(self.list_s, 3),
            "patterns_listed": self.listed,
            "serve_to_ready_s": round(self.ready_s, 3),
            "render_c1": self.render.as_dict(),
        }


def measure_catalog(
    count: int,
    *,
    children: Children,
    server_cores: frozenset[int] | None,
    load_cores: frozenset[int] | None,
    upstream_url: str,
    work_dir: Path,
    use_wrk: bool,
    render_s: float,
    timeout: float,
    log: Callable[[str], None] = print,
) -> CatalogResult:
    root = work_dir / f"catalog-{count}"
    catalog.write_catalog(root / "patterns", count)
    env = service_env(
        upstream_url=upstream_url,
        pattern_dir=root / "patterns",
        data_dir=root / "data",
        database_url=None,
        log_level="WARNING",
        extra={},
    )
    key = prepare_store(env, root)
    started = time.perf_counter()
    listed = genai(["patterns", "list"], env, root, timeout=timeout, cores=server_cores)
    list_s = time.perf_counter() - started
    server = start_service(
        children,
        server_cores,
        name=f"service-{count}-patterns",
        env=env,
        cwd=root,
        key=key,
        workers=1,
        timeout=timeout,
        route=RENDER,
    )
    try:
        smoke(server)

        def render_for(seconds: float) -> LoadResult:
            return run_load(
                port=server.port,
                path=server.path,
                body=server.body,
                headers=server.headers,
                concurrency=1,
                seconds=seconds,
                work_dir=root,
                cores=load_cores,
                use_wrk=use_wrk,
            )

        render_for(1)  # warm-up: first renders may compile
        render = render_for(render_s)
    finally:
        children.stop(server.child)
    result = CatalogResult(count, list_s, len(listed.splitlines()), server.started_in_s, render)
    log(
        f"  {count} patterns: `patterns list` {list_s:.2f} s, serve to ready "
        f"{server.started_in_s:.2f} s, render p50 {render.p50_ms:.2f} ms "
        f"(failures {render.failures})"
    )
    return result
