"""`python -m bench`: the service against a bare FastAPI + AsyncOpenAI passthrough.

    python -m bench                    # full: baselines, every route on SQLite and PostgreSQL
    python -m bench --quick            # CI: a few seconds per target, SQLite only, < 90 s
    python -m bench --route chat-tools # one route (repeatable) and its baseline
    python -m bench --soak 300         # the 5-minute RSS check
    python -m bench --profile          # py-spy flame data and hot-spot summaries at c=1 and c=32
    python -m bench --no-streams       # without the streamed targets (bench/streams.py)
    python -m bench --no-usage         # without usage reports on a million jobs (bench/usage.py;
                                       # --quick never runs them: CI stays under 90 s)
    python -m bench --no-console       # without the console pages (bench/console_pages.py; on
                                       # a million jobs, --quick on 2,000)

Every server runs in its own process, pinned to one core, while the upstream and the load
generator share the other; servers are measured one after the other, a fresh process for each
target (one route of one server). See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from bench import catalog
from bench.console_pages import measure_console_pages
from bench.load import LoadResult, run_load, tool_name, wrk_path
from bench.measure import Plan, TargetResult, measure, smoke, with_audit_rows
from bench.procs import BenchError, Children, Cores
from bench.profiling import finish_recording, start_recording, summarise
from bench.report import Report, stamp
from bench.routes import BASELINES, ROUTES, Route, baseline_target, describe
from bench.startup import measure_catalog
from bench.stores import audit_rows, store_for
from bench.streams import STREAM_GAP_MS, Phases, StreamRun, measure_streams
from bench.targets import (
    START_TIMEOUT_S,
    Server,
    prepare_store,
    sdk_check_result,
    service_env,
    start_baseline,
    start_sdk_check,
    start_service,
    start_upstream,
    store_url,
)
from bench.usage import measure_usage

BENCH_DIR = Path(__file__).resolve().parent


def log(message: str) -> None:
    print(message, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI mode: short phases, SQLite only.")
    parser.add_argument("--profile", action="store_true", help="Profile the service with py-spy.")
    parser.add_argument(
        "--route",
        action="append",
        choices=list(ROUTES),
        help="The service route(s) to measure, each with its baseline (repeatable; default: all; "
        "--profile: completions).",
    )
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "both"],
        default=None,
        help="Audit store(s) for the service (default: both; --quick: sqlite).",
    )
    parser.add_argument("--warmup", type=float, help="Seconds of warm-up at c=8 (default 3).")
    parser.add_argument("--c1", type=float, help="Seconds at c=1 (default 10).")
    parser.add_argument("--c32", type=float, help="Seconds at c=32 (default 10).")
    parser.add_argument(
        "--soak",
        type=float,
        help="Seconds of sustained c=32 with RSS sampling "
        "(default 30; 300 for the issue's 5-minute check).",
    )
    parser.add_argument(
        "--upstream-latency-ms",
        type=float,
        default=0.0,
        help="Fixed delay the upstream adds to every answer.",
    )
    parser.add_argument("--workers", type=int, default=1, help="`genai serve --workers`.")
    parser.add_argument(
        "--service-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Extra environment for the service, e.g. GENAI_AUDIT__MODE=with-call.",
    )
    parser.add_argument(
        "--audit-mode",
        action="append",
        default=[],
        metavar="MODE",
        help="Measure the service once per GENAI_AUDIT__MODE given (repeatable).",
    )
    parser.add_argument("--service-log-level", default="INFO", help="GENAI_LOG_LEVEL (INFO).")
    parser.add_argument("--no-catalog", action="store_true", help="Skip the catalog-size runs.")
    parser.add_argument("--no-streams", action="store_true", help="Skip the streamed targets.")
    parser.add_argument(
        "--open-streams",
        type=int,
        help="Streams open at once in the streamed targets' busy phase (default 256; --quick 32).",
    )
    parser.add_argument(
        "--no-usage", action="store_true", help="Skip the usage-report queries (bench/usage.py)."
    )
    parser.add_argument(
        "--usage-rows", type=int, default=1_000_000, help="Jobs in the usage store."
    )
    parser.add_argument(
        "--no-console", action="store_true", help="Skip the console pages (console_pages.py)."
    )
    parser.add_argument(
        "--console-jobs",
        type=int,
        help="Jobs in the console pages' store (default 1,000,000, cached; --quick: 2,000).",
    )
    parser.add_argument("--catalog-size", type=int, default=1000)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--no-pin", action="store_true", help="Do not pin processes to cores.")
    parser.add_argument(
        "--python-load", action="store_true", help="Use bench.pyload even when wrk is installed."
    )
    parser.add_argument("--start-timeout", type=float, default=START_TIMEOUT_S)
    parser.add_argument("--profile-seconds", type=float, default=15.0)
    parser.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second.")
    parser.add_argument(
        "--json",
        type=Path,
        help="Default bench/results/latest.json (--quick: bench/results/quick.json).",
    )
    parser.add_argument(
        "--markdown", type=Path, help="Default bench/RESULTS.md (--quick: bench/results/quick.md)."
    )
    parser.add_argument("--keep", action="store_true", help="Keep the temp dir (logs, catalogs).")
    args = parser.parse_args(argv)
    quick = args.quick
    args.backend = args.backend or ("sqlite" if quick or args.profile else "both")
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 3)
    # Quick mode proves every target starts and answers under load; its figures are not read.
    args.c1 = args.c1 if args.c1 is not None else (1 if quick else 10)
    args.c32 = args.c32 if args.c32 is not None else (1 if quick else 10)
    args.soak = args.soak if args.soak is not None else (1 if quick else 30)
    args.no_usage = args.no_usage or quick  # a million-job fill alone takes minutes
    args.console_jobs = args.console_jobs or (2_000 if quick else 1_000_000)
    args.route = list(dict.fromkeys(args.route or (["completions"] if args.profile else ROUTES)))
    results = BENCH_DIR / "results"
    args.json = args.json or results / ("quick.json" if quick else "latest.json")
    args.markdown = args.markdown or (results / "quick.md" if quick else BENCH_DIR / "RESULTS.md")
    for item in args.service_env:
        if "=" not in item:
            parser.error(f"--service-env {item!r} is not KEY=VALUE")
    return args


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through every `finally`, so children are stopped


@dataclass(frozen=True)
class Run:
    """What every target of one run shares."""

    args: argparse.Namespace
    children: Children
    cores: Cores
    plan: Plan
    upstream: str
    use_wrk: bool

    def measure(
        self, server: Server, *, group: str, baseline: str | None, work_dir: Path
    ) -> TargetResult:
        """The server's figures; it is stopped afterwards, whatever happened."""
        try:
            return measure(
                server,
                self.plan,
                group=group,
                baseline=baseline,
                work_dir=work_dir,
                load_cores=self.cores.load,
                use_wrk=self.use_wrk,
            )
        finally:
            self.children.stop(server.child)


def service_target(
    run: Run, route: Route, *, group: str, env: dict[str, str], root: Path, key: str
) -> TargetResult:
    """One route on a fresh `genai serve`; its audit rows are those its process added."""
    before = audit_rows(store_url(env))
    server = start_service(
        run.children,
        run.cores.server,
        name=route.target(group),
        env=env,
        cwd=root,
        key=key,
        workers=run.args.workers,
        timeout=run.args.start_timeout,
        route=route,
    )
    result = run.measure(server, group=group, baseline=route.compared_with, work_dir=root)
    return with_audit_rows(result, server.database_url, before)


def run_benchmarks(
    args: argparse.Namespace, children: Children, work_dir: Path, cores: Cores
) -> Report:
    use_wrk = wrk_path() is not None and not args.python_load
    load_tool = tool_name(use_wrk)
    plan = Plan(warmup_s=args.warmup, c1_s=args.c1, c32_s=args.c32, soak_s=args.soak)
    extra_env = dict(item.split("=", 1) for item in args.service_env)
    routes = [ROUTES[key] for key in args.route]
    report = Report(
        mode="quick" if args.quick else "full",
        settings={
            "warmup_s": plan.warmup_s,
            "c1_s": plan.c1_s,
            "c32_s": plan.c32_s,
            "soak_s": plan.soak_s,
            "rss_interval_s": 0.5,
            "workers": args.workers,
            "upstream_latency_ms": args.upstream_latency_ms,
            "stream_gap_ms": STREAM_GAP_MS,
            "backend": args.backend,
            "service_log_level": args.service_log_level,
            "service_env": extra_env,
            "pattern": catalog.PATTERN_NAME,
            "system_prompt_chars": len(catalog.rendered_system_prompt()),
            "routes": describe(routes),
        },
        meta=stamp(load_tool, cores.describe()),
    )
    log(f"load generator: {load_tool}; {cores.describe()}; work dir {work_dir}")
    if not use_wrk:
        log("wrk not found: using bench.pyload (install wrk, see bench/README.md)")
    upstream = start_upstream(children, cores.load, args.upstream_latency_ms)
    sdk_check = start_sdk_check(upstream)  # runs on the load core while the baseline starts
    run = Run(args, children, cores, plan, upstream, use_wrk)

    def finish_sdk_check() -> None:
        if "sdk_check" not in report.meta:
            report.meta["sdk_check"] = sdk_check_result(sdk_check)
            log(report.meta["sdk_check"])

    def attempt(label: str, work: Callable[[], object]) -> None:
        try:
            work()
        except BenchError as exc:
            report.problems.append(f"{label}: {exc}".splitlines()[0])
            log(f"FAILED {label}: {exc}")

    if not args.no_baseline:
        for route in dict.fromkeys(BASELINES[r.baseline] for r in routes if r.baseline):
            name = baseline_target(route.key)

            def baseline(route: Route = route, name: str = name) -> None:
                server = start_baseline(
                    children, cores.server, upstream, args.start_timeout, name=name, route=route
                )
                finish_sdk_check()
                report.targets.append(
                    run.measure(server, group="baseline", baseline=None, work_dir=work_dir)
                )

            log(f"{name} (FastAPI + AsyncOpenAI, POST {route.path})")
            attempt(name, baseline)

    attempt("SDK check", finish_sdk_check)
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    modes: list[str | None] = list(args.audit_mode) or [None]
    for backend in backends:
        for mode in modes:
            group = f"service-{backend}" + (f"-{mode}" if mode else "")

            def service(
                backend: str = backend, mode: str | None = mode, group: str = group
            ) -> None:
                root = work_dir / group
                root.mkdir()
                catalog.write_catalog(root / "patterns", 10)
                with store_for(backend) as database_url:
                    env = service_env(
                        upstream_url=upstream,
                        pattern_dir=root / "patterns",
                        data_dir=root / "data",
                        database_url=database_url,
                        log_level=args.service_log_level,
                        extra={**extra_env, **({"GENAI_AUDIT__MODE": mode} if mode else {})},
                    )
                    key = prepare_store(env, root)
                    for route in routes:  # one store and key; a fresh process per route

                        def target(route: Route = route) -> None:
                            report.targets.append(
                                service_target(run, route, group=group, env=env, root=root, key=key)
                            )

                        log(f"{route.target(group)} (genai serve, audit on, POST {route.path})")
                        attempt(route.target(group), target)

            attempt(group, service)

    if not args.no_streams:
        phases = Phases(
            seconds=2.0 if args.quick else args.c1,
            open_streams=args.open_streams or (32 if args.quick else 256),
        )
        report.settings["streams"] = {"seconds": phases.seconds, "open": phases.open_streams}

        def streams() -> None:
            stream_run = StreamRun(children, cores, upstream, work_dir, phases, args.start_timeout)
            with store_for("sqlite" if "postgres" not in backends else "postgres") as url:
                stores = {b: (url if b == "postgres" else None) for b in backends}
                report.streams.extend(measure_streams(stream_run, stores))

        attempt("streams", streams)

    if not args.no_usage:
        for backend in backends:
            log(f"usage reports on {args.usage_rows:,} jobs ({backend})")

            def usage(backend: str = backend) -> None:
                report.usage.extend(measure_usage(backend, rows=args.usage_rows, runs=5, log=log))

            attempt(f"usage-{backend}", usage)

    if not args.no_console:
        for backend in backends:
            log(f"console pages on {args.console_jobs:,} jobs ({backend})")

            def console(backend: str = backend) -> None:
                root = work_dir / f"console-{backend}"
                root.mkdir()
                found = measure_console_pages(
                    backend,
                    jobs=args.console_jobs,
                    visits=5 if args.quick else 100,
                    children=children,
                    cores=cores,
                    work=root,
                    log=log,
                )
                report.console.append(found)
                report.problems += [
                    f"console {backend} {p.label}: {p.status}" for p in found.pages if p.failed
                ]

            attempt(f"console-{backend}", console)

    if not args.no_catalog:
        # Quick mode skips the small catalog: each run starts three interpreters.
        for count in (args.catalog_size,) if args.quick else (10, args.catalog_size):
            log(f"catalog of {count} patterns")

            def catalog_run(count: int = count) -> None:
                report.catalogs.append(
                    measure_catalog(
                        count,
                        children=children,
                        server_cores=cores.server,
                        load_cores=cores.load,
                        upstream_url=upstream,
                        work_dir=work_dir,
                        use_wrk=use_wrk,
                        render_s=2 if args.quick else 5,
                        timeout=args.start_timeout,
                    )
                )

            attempt(f"catalog-{count}", catalog_run)
    for target in report.targets:
        if target.failures:
            report.problems.append(f"{target.name}: {target.failures} failed requests")
    for result in report.catalogs:
        if result.render.failures:
            report.problems.append(f"catalog-{result.patterns}: failed renders")
    return report


def profile_server(
    args: argparse.Namespace, server: Server, *, label: str, prefix: str, work_dir: Path
) -> int:
    """Warm up, then py-spy during a c=1 and a c=32 run; 1 when requests failed."""
    use_wrk = wrk_path() is not None and not args.python_load
    out_dir = BENCH_DIR / "profiles"
    out_dir.mkdir(exist_ok=True)
    cores = Cores.plan(not args.no_pin).load

    def load(concurrency: int, seconds: float) -> LoadResult:
        return run_load(
            port=server.port,
            path=server.path,
            body=server.body,
            headers=server.headers,
            concurrency=concurrency,
            seconds=seconds,
            work_dir=work_dir,
            cores=cores,
            use_wrk=use_wrk,
        )

    smoke(server)
    load(8, args.warmup)
    for concurrency in (1, 32):
        profile = out_dir / f"{prefix}c{concurrency}.speedscope.json"
        recorder = start_recording(
            server.child.pid, profile, args.profile_seconds, args.profile_rate
        )
        try:
            time.sleep(0.5)  # py-spy attaches
            result = load(concurrency, args.profile_seconds)
            finish_recording(recorder, timeout=args.profile_seconds + 30)
        finally:
            if recorder.poll() is None:
                recorder.kill()
                recorder.wait()
        title = (
            f"{label} at c={concurrency}: {result.rps:.0f} req/s, p50 {result.p50_ms:.2f} ms, "
            f"p99 {result.p99_ms:.2f} ms under py-spy ({args.profile_rate} Hz)"
        )
        summary = out_dir / f"summary-{prefix}{concurrency}.txt"
        # The recording starts 0.5 s into the load and lasts as long: it saw that many requests.
        recorded = result.rps * max(args.profile_seconds - 0.5, 0.5)
        summary.write_text(summarise(profile, title, requests=recorded))
        log(
            f"c={concurrency}: {profile.relative_to(BENCH_DIR.parent)}, "
            f"{summary.relative_to(BENCH_DIR.parent)} ({result.failures} failures)"
        )
        if result.failures:
            return 1
    return 0


def run_profile(args: argparse.Namespace, children: Children, work_dir: Path, cores: Cores) -> int:
    """py-spy on the service, then on its baseline, during a c=1 and a c=32 run each; files
    under bench/profiles/ (the baseline's summaries hold the same stages: the floor to compare)."""
    route = ROUTES[args.route[0]]
    prefix = "" if route.key == "completions" else f"{route.key}-"
    upstream = start_upstream(children, cores.load, args.upstream_latency_ms)
    root = work_dir / "profiled"
    catalog.write_catalog(root / "patterns", 10)
    with store_for(args.backend if args.backend != "both" else "sqlite") as url:
        env = service_env(
            upstream_url=upstream,
            pattern_dir=root / "patterns",
            data_dir=root / "data",
            database_url=url,
            log_level=args.service_log_level,
            extra=dict(item.split("=", 1) for item in args.service_env),
        )
        key = prepare_store(env, root)
        server = start_service(
            children,
            cores.server,
            name="service-profiled",
            env=env,
            cwd=root,
            key=key,
            workers=args.workers,
            timeout=args.start_timeout,
            route=route,
        )
        try:
            label = f"service ({args.backend}) POST {route.path} ({route.key})"
            failed = profile_server(
                args, server, label=label, prefix=f"service-{prefix}", work_dir=root
            )
        finally:
            children.stop(server.child)
    if failed or route.baseline is None:
        return failed
    baseline = BASELINES[route.baseline]
    server = start_baseline(
        children, cores.server, upstream, args.start_timeout, name="baseline", route=baseline
    )
    try:
        label = f"baseline POST {baseline.path} (for {route.key})"
        return profile_server(
            args, server, label=label, prefix=f"baseline-{prefix}", work_dir=work_dir
        )
    finally:
        children.stop(server.child)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="genai-bench-"))
    children = Children(work_dir)
    cores = Cores.plan(not args.no_pin)
    if cores.load is not None:
        os.sched_setaffinity(0, cores.load)  # the harness itself stays off the server's core
    keep = args.keep
    try:
        if args.profile:
            return run_profile(args, children, work_dir, cores)
        report = run_benchmarks(args, children, work_dir, cores)
        report.meta["wall_s"] = round(time.monotonic() - started, 1)
        report.write_json(args.json)
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(report.markdown())
        log("")
        log(report.markdown())
        log(f"written: {args.json}, {args.markdown} ({report.meta['wall_s']} s)")
        if report.problems:
            keep = True
            log(f"{len(report.problems)} problem(s); logs kept in {work_dir}")
            return 1
        return 0
    except BenchError as exc:
        keep = True
        log(f"bench failed: {exc}\nlogs kept in {work_dir}")
        return 1
    finally:
        children.close()
        if not keep:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
