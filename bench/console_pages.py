"""Server time of each console page on a store of a million jobs (issue 21), p50 and p99.

    .venv/bin/python -m bench.console_pages                    # 1,000,000 jobs, SQLite (cached)
    .venv/bin/python -m bench.console_pages --database postgresql   # a scratch PostgreSQL store
    .venv/bin/python -m bench.console_pages --quick            # 2,000 jobs, 5 visits a page (CI)

`genai serve` runs on the store (bench/console_data.py) pinned to one core; a separate process
(bench/console_visits.py) on the other core signs in through /console/login with an admin key
and visits each page in turn. The server time is the service's own `x-genai-overhead-ms` (from
the first byte of the request to the start of the answer: every query and the whole render);
the wall time adds the loopback and the client. A page not built yet answers 404 and is shown
as missing. Figures are reported, never asserted; `python -m bench` runs this too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from bench.console_data import Store, build, cached_sqlite, write_patterns
from bench.procs import BenchError, Children, Cores
from bench.stores import scratch_postgres
from bench.targets import service_env, start_service, store_url


@dataclass(frozen=True)
class PageTiming:
    label: str
    path: str
    status: str  # "200", "missing", "HTTP 500", "no next link"…
    server_p50: float | None
    server_p99: float | None
    wall_p50: float | None
    wall_p99: float | None
    kilobytes: float
    visits: int

    @property
    def failed(self) -> bool:
        return self.status not in ("200", "missing", "no next link")

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class ConsoleRun:
    backend: str
    jobs: int
    visits: int
    build_s: float
    pages: list[PageTiming]

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "pages": [p.as_dict() for p in self.pages]}


def _rank(samples: list[float], share: float) -> float:
    """Nearest-rank percentile: a sample that was measured, never an interpolation."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _job_ids(url: str) -> tuple[str, str]:
    """A recent completed job and an older failed one, for the detail page."""
    recent = "SELECT id FROM jobs WHERE status = 'completed' ORDER BY created_at DESC LIMIT 1"
    failed = "SELECT id FROM jobs WHERE status = 'failed' ORDER BY created_at LIMIT 1"
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(url.split(":///", 1)[1])) as db:
            return db.execute(recent).fetchone()[0], db.execute(failed).fetchone()[0]

    async def fetch() -> tuple[str, str]:
        connection = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            return await connection.fetchval(recent), await connection.fetchval(failed)
        finally:
            await connection.close()

    return asyncio.run(fetch())


def page_paths(store: Store, job_id: str, failed_job: str) -> list[tuple[str, str]]:
    """Every console page, with real names from the store, and the jobs page's filters."""
    top, other = store.patterns[0], store.patterns[len(store.patterns) // 2]
    template, role = store.templates[0]
    key_id = store.keys[1][0]
    return [
        ("home", "/console"),
        ("patterns", "/console/patterns"),
        ("patterns, search", "/console/patterns?q=refund"),
        ("pattern (most used)", f"/console/patterns/{top}"),
        ("pattern (less used)", f"/console/patterns/{other}"),
        ("template", f"/console/templates/{template}/{role}"),
        ("playground", "/console/playground"),
        ("playground, a pattern", f"/console/playground?pattern={top}"),
        ("snippets", "/console/snippets"),
        ("jobs", "/console/jobs"),
        ("jobs, second page", "next:/console/jobs"),
        ("jobs ?status=failed", "/console/jobs?status=failed"),
        ("jobs ?pattern=", f"/console/jobs?pattern={other}"),
        ("jobs ?model=", "/console/jobs?model=anthropic/claude-haiku-4-5"),
        ("jobs ?key=", f"/console/jobs?key={key_id}"),
        ("job (recent)", f"/console/jobs/{job_id}"),
        ("job (failed, a year old)", f"/console/jobs/{failed_job}"),
        ("keys", "/console/keys"),
        ("usage", "/console/usage"),
        ("integrity", "/console/integrity"),
    ]


def _timing(label: str, raw: dict[str, Any], visits: int) -> PageTiming:
    statuses = {int(code): count for code, count in raw["statuses"].items()}
    if raw.get("unresolved"):
        return PageTiming(label, raw["path"], "no next link", None, None, None, None, 0, 0)
    if statuses == {404: visits}:
        status = "missing"
    elif len(statuses) == 1:
        status = str(next(iter(statuses)))
    else:
        status = "mixed " + ", ".join(f"{n} x {c}" for c, n in sorted(statuses.items()))
    if status == "missing":
        return PageTiming(label, raw["path"], status, None, None, None, None, 0, visits)
    server, wall = raw["server_ms"], raw["wall_ms"]
    return PageTiming(
        label,
        raw["path"],
        status,
        _rank(server, 0.5) if server else None,
        _rank(server, 0.99) if server else None,
        _rank(wall, 0.5),
        _rank(wall, 0.99),
        round(raw["bytes"] / 1024, 1),
        visits,
    )


def visit_pages(
    base_url: str, store: Store, pages: list[tuple[str, str]], visits: int, cores: Cores
) -> list[PageTiming]:
    """The visiting process, on the load core; its timings per page."""
    argv = [sys.executable, "-m", "bench.console_visits", base_url, store.admin_key]
    argv += [json.dumps(pages), str(visits)]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=3600,
        preexec_fn=(lambda: os.sched_setaffinity(0, load)) if (load := cores.load) else None,
    )
    if done.returncode != 0:
        raise BenchError(f"the console visits failed:\n{done.stderr[-3000:]}")
    found = json.loads(done.stdout)
    return [_timing(label, found[label], visits) for label, _ in pages]


@contextlib.contextmanager
def _store(
    backend: str,
    jobs: int,
    work: Path,
    children: Children,
    cores: Cores,
    rebuild: bool,
    log: Callable[[str], None],
) -> Iterator[tuple[Store, Path, str | None]]:
    """(store, data dir, GENAI_DATABASE_URL) ready to serve."""
    if backend == "sqlite":
        store, data = cached_sqlite(
            work, jobs, children=children, cores=cores, rebuild=rebuild, log=log
        )
        yield store, data, None
        return
    with scratch_postgres() as url:
        log(f"building the console store ({jobs:,} jobs) in a scratch PostgreSQL database")
        build_root = work / "build"
        build_root.mkdir()
        store = build(build_root, jobs, children=children, cores=cores, database_url=url, log=log)
        yield store, build_root / "data", url


def measure_console_pages(
    backend: str,
    *,
    jobs: int,
    visits: int,
    children: Children,
    cores: Cores,
    work: Path,
    rebuild: bool = False,
    log: Callable[[str], None] = print,
) -> ConsoleRun:
    """Build or reuse the store, serve it on a fresh `genai serve`, visit every page."""
    with _store(backend, jobs, work, children, cores, rebuild, log) as (store, data, url):
        write_patterns(work / "patterns")
        env = service_env(
            upstream_url="http://127.0.0.1:9",
            pattern_dir=work / "patterns",
            data_dir=data,
            database_url=url,
            log_level="INFO",
            extra={},
        )
        job_id, failed_job = _job_ids(store_url(env))
        server = start_service(
            children,
            cores.server,
            name=f"console-{backend}",
            env=env,
            cwd=work,
            key=store.admin_key,
            workers=1,
            timeout=120,
        )
        try:
            pages = page_paths(store, job_id, failed_job)
            log(f"visiting {len(pages)} console pages {visits} times each ({backend})")
            timings = visit_pages(f"http://127.0.0.1:{server.port}", store, pages, visits, cores)
        finally:
            children.stop(server.child)
    return ConsoleRun(backend, jobs, visits, store.build_s, timings)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def console_tables(runs: list[ConsoleRun]) -> list[str]:
    """Markdown: a table per backend, a row per page."""
    lines: list[str] = []
    for run in runs:
        lines += [
            "",
            f"### Console pages on {run.jobs:,} jobs ({run.backend}; `bench/console_pages.py`; "
            f"{run.visits} visits each, ms)",
            "",
            "| page | path | status | server p50 | server p99 | wall p50 | wall p99 | KB |",
            "|---|---|---|---:|---:|---:|---:|---:|",
        ]
        for p in run.pages:
            lines.append(
                f"| {p.label} | `{p.path}` | {p.status} | {_ms(p.server_p50)} | "
                f"{_ms(p.server_p99)} | {_ms(p.wall_p50)} | {_ms(p.wall_p99)} | "
                f"{'—' if p.wall_p50 is None else p.kilobytes} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console_pages", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 5 visits a page.")
    parser.add_argument("--jobs", type=int, help="Jobs in the store (default 1,000,000).")
    parser.add_argument("--visits", type=int, help="Timed visits per page (default 100).")
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="sqlite")
    parser.add_argument("--rebuild", action="store_true", help="Rebuild the cached SQLite store.")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args(argv)
    jobs = args.jobs or (2_000 if args.quick else 1_000_000)
    visits = args.visits or (5 if args.quick else 100)
    backends = (
        ["sqlite", "postgres"]
        if args.database == "both"
        else ["postgres" if args.database == "postgresql" else "sqlite"]
    )
    work = Path(tempfile.mkdtemp(prefix="genai-bench-console-"))
    children = Children(work)
    cores = Cores.plan(not args.no_pin)
    runs: list[ConsoleRun] = []
    try:
        for backend in backends:
            (work / backend).mkdir()
            runs.append(
                measure_console_pages(
                    backend,
                    jobs=jobs,
                    visits=visits,
                    children=children,
                    cores=cores,
                    work=work / backend,
                    rebuild=args.rebuild,
                )
            )
    except BenchError as exc:
        children.close()
        print(f"bench failed: {exc}\nlogs kept in {work}")
        return 1
    children.close()
    shutil.rmtree(work, ignore_errors=True)
    print("\n".join(console_tables(runs)))
    if args.json:
        args.json.write_text(json.dumps([r.as_dict() for r in runs], indent=2) + "\n")
    return 1 if any(p.failed for r in runs for p in r.pages) else 0


if __name__ == "__main__":
    sys.exit(main())
