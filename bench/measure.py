"""One server's figures: warm-up, c=1, c=32, then a sustained run while RSS is sampled."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bench.load import LoadResult, run_load
from bench.procs import BenchError, CoreShare, RssSampler, http_post
from bench.stores import audit_rows
from bench.targets import Server


@dataclass(frozen=True)
class Plan:
    """How long each phase runs, in seconds."""

    warmup_s: float
    c1_s: float
    c32_s: float
    soak_s: float
    high_concurrency: int = 32


@dataclass(frozen=True)
class TargetResult:
    """One target: a server process measured with one request (its route)."""

    name: str
    group: str  # the server it is a route of: `baseline`, `service-sqlite`, …
    route: str  # a key of bench.routes.ROUTES, or of BASELINES for the baseline's targets
    baseline: str | None  # the name of the baseline target it is compared with
    started_in_s: float
    c1: LoadResult
    c32: LoadResult
    soak: LoadResult
    peak_rss_mb: float
    rss_after_warmup_mb: float
    rss_slope_mb_per_min: float | None
    audit_rows: dict[str, int] | None

    @property
    def failures(self) -> int:
        return sum(r.failures for r in (self.c1, self.c32, self.soak))

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "group": self.group,
            "route": self.route,
            "baseline": self.baseline,
            "started_in_s": round(self.started_in_s, 3),
            "c1": self.c1.as_dict(),
            "c32": self.c32.as_dict(),
            "soak": self.soak.as_dict(),
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "rss_after_warmup_mb": round(self.rss_after_warmup_mb, 1),
            "rss_slope_mb_per_min": (
                None if self.rss_slope_mb_per_min is None else round(self.rss_slope_mb_per_min, 3)
            ),
            "audit_rows": self.audit_rows,
            "failures": self.failures,
        }


def smoke(server: Server) -> None:
    """One request before any load: a misconfigured target fails here, with its answer shown."""
    status, body = http_post(server.port, server.path, server.body, server.headers)
    if not 200 <= status < 300:
        raise BenchError(
            f"{server.name}: POST {server.path} answered {status}: {body[:1500]!r}\n"
            f"its log:\n{server.child.tail()}"
        )


def measure(
    server: Server,
    plan: Plan,
    *,
    group: str,
    baseline: str | None,
    work_dir: Path,
    load_cores: frozenset[int] | None,
    use_wrk: bool,
    log: Callable[[str], None] = print,
) -> TargetResult:
    smoke(server)

    def load(concurrency: int, seconds: float, phase: str) -> LoadResult:
        server.child.check_alive()
        mark = CoreShare.mark(server.child.pid)
        result = run_load(
            port=server.port,
            path=server.path,
            body=server.body,
            headers=server.headers,
            concurrency=concurrency,
            seconds=seconds,
            work_dir=work_dir,
            cores=load_cores,
            use_wrk=use_wrk,
        )
        if mark is not None:
            result = replace(result, foreign_cpu=mark.foreign())
        server.child.check_alive()
        other = (
            ""
            if result.foreign_cpu is None
            else f", other load on its core {result.foreign_cpu:.0%}"
        )
        log(
            f"  {server.name} {phase:>14}: {result.rps:7.1f} req/s, "
            f"p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
            f"failures {result.failures}{other}"
        )
        return result

    with RssSampler(server.child.pid) as rss:
        rss.phase = "warmup"
        load(8, plan.warmup_s, "warm-up c=8")
        after_warmup = rss.samples[-1][1] if rss.samples else 0.0
        rss.phase = "c1"
        c1 = load(1, plan.c1_s, "c=1")
        rss.phase = "c32"
        c32 = load(plan.high_concurrency, plan.c32_s, "c=32")
        rss.phase = "soak"
        soak = load(plan.high_concurrency, plan.soak_s, f"sustained c={plan.high_concurrency}")
        rss.phase = "end"
    return TargetResult(
        name=server.name,
        group=group,
        route=server.route.key,
        baseline=baseline,
        started_in_s=server.started_in_s,
        c1=c1,
        c32=c32,
        soak=soak,
        peak_rss_mb=rss.peak_mb,
        rss_after_warmup_mb=after_warmup,
        rss_slope_mb_per_min=rss.slope_mb_per_min("soak"),
        audit_rows=None,
    )


def with_audit_rows(
    result: TargetResult, database_url: str | None, before: Mapping[str, int] | None
) -> TargetResult:
    """Counted after the service stopped (its writer drained): every request left one row.

    The routes of one service share its store, so `before` (the counts when this target's
    process started) is subtracted.
    """
    if database_url is None:
        return result
    rows = audit_rows(database_url)
    if rows is not None and before:
        rows = {k: n - before.get(k, 0) for k, n in rows.items() if n - before.get(k, 0)}
    return replace(result, audit_rows=rows)
