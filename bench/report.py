"""What was measured, where, and against which goals: the JSON file and the Markdown table."""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.metadata
import json
import os
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.console_pages import ConsoleRun, console_tables
from bench.measure import TargetResult
from bench.startup import CatalogResult
from bench.streams import Phases, StreamResult, stream_comparisons, stream_tables
from bench.usage import UsageTiming, usage_tables

REPO = Path(__file__).resolve().parent.parent
PACKAGES = (
    "fastapi",
    "starlette",
    "uvicorn",
    "uvloop",
    "httptools",
    "openai",
    "pydantic",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "py-spy",
)


def commit() -> str:
    """Short HEAD, with `-dirty` when the working tree has changes; BENCH_COMMIT when set (a run
    from an exported copy of a commit, which has no git metadata: see bench/README.md)."""
    if named := os.environ.get("BENCH_COMMIT"):
        return named

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "--no-optional-locks", *args], cwd=REPO, capture_output=True, text=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain") else "")


def machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "usable_cores": sorted(os.sched_getaffinity(0)),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average_at_start": [round(v, 2) for v in os.getloadavg()],
    }


def versions(load_tool: str) -> dict[str, str]:
    found = {"load generator": load_tool}
    for name in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return found


@dataclass(frozen=True)
class Goal:
    text: str
    measured: str
    met: bool | None  # None: not measured in this run
    issue: int = 8


@dataclass
class Report:
    mode: str
    settings: dict[str, Any]
    targets: list[TargetResult] = field(default_factory=list)
    catalogs: list[CatalogResult] = field(default_factory=list)
    streams: list[StreamResult] = field(default_factory=list)
    usage: list[UsageTiming] = field(default_factory=list)
    console: list[ConsoleRun] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def target(self, name: str | None) -> TargetResult | None:
        return next((t for t in self.targets if t.name == name), None)

    def services(self, route: str | None = None) -> list[TargetResult]:
        """The service's targets (all compared with a baseline), or those of one route."""
        return [
            t
            for t in self.targets
            if t.baseline is not None and (route is None or t.route == route)
        ]

    def comparisons(self) -> list[dict[str, Any]]:
        found = []
        for t in self.services():
            base = self.target(t.baseline)
            if base is None:
                continue
            found.append(
                {
                    "service": t.name,
                    "group": t.group,
                    "route": t.route,
                    "baseline": base.name,
                    "c1_p50_delta_ms": round(t.c1.p50_ms - base.c1.p50_ms, 3),
                    "c1_p99_delta_ms": round(t.c1.p99_ms - base.c1.p99_ms, 3),
                    "c32_p99_delta_ms": round(t.c32.p99_ms - base.c32.p99_ms, 3),
                    "c32_rps_ratio": round(t.c32.rps / base.c32.rps, 3) if base.c32.rps else None,
                    "peak_rss_delta_mb": round(t.peak_rss_mb - base.peak_rss_mb, 1),
                }
            )
        return found

    def route_goals(self) -> list[Goal]:
        """Issue 15: every other route costs no more, over its baseline, than /v1/completions."""
        comparisons = self.comparisons()
        reference = {c["group"]: c for c in comparisons if c["route"] == "completions"}
        goals: list[Goal] = []
        for c in comparisons:
            ref = reference.get(c["group"])
            if c["route"] == "completions" or ref is None:
                continue
            name, of = c["service"], ref["service"]
            for label, key in (("c=1 p50", "c1_p50_delta_ms"), ("c=1 p99", "c1_p99_delta_ms")):
                mine, theirs = c[key], ref[key]
                goals.append(
                    Goal(
                        f"{name}: added {label} no more than {of}'s",
                        f"{mine:+.2f} ms vs {theirs:+.2f} ms ({mine - theirs:+.2f} ms)",
                        mine <= theirs,
                        issue=15,
                    )
                )
            mine, theirs = c["c32_rps_ratio"], ref["c32_rps_ratio"]
            goals.append(
                Goal(
                    f"{name}: c=32 req/s ratio at least {of}'s",
                    f"{mine:.2f}x vs {theirs:.2f}x" if mine and theirs else "n/a",
                    None if not (mine and theirs) else mine >= theirs,
                    issue=15,
                )
            )
        return goals

    def goals(self) -> list[Goal]:
        goals: list[Goal] = []
        for c in self.comparisons():
            if c["route"] != "completions":
                continue  # issue 8's goals are stated for /v1/completions
            name = c["service"]
            p50, p99 = c["c1_p50_delta_ms"], c["c1_p99_delta_ms"]
            goals.append(
                Goal(f"{name}: c=1 p50 within 0.5 ms of baseline", f"{p50:+.2f} ms", p50 <= 0.5)
            )
            goals.append(
                Goal(f"{name}: c=1 p99 within 1.5 ms of baseline", f"{p99:+.2f} ms", p99 <= 1.5)
            )
            ratio = c["c32_rps_ratio"]
            goals.append(
                Goal(
                    f"{name}: c=32 req/s at least 0.9x baseline",
                    f"{ratio:.2f}x" if ratio else "n/a",
                    None if ratio is None else ratio >= 0.9,
                )
            )
        soak = self.settings.get("soak_s", 0)
        for t in self.services("completions"):
            slope = t.rss_slope_mb_per_min
            note = "" if soak >= 300 else f" (soak {soak:.0f} s < 5 min: indicative only)"
            goals.append(
                Goal(
                    f"{t.name}: no RSS growth after warm-up (slope <= 0.5 MB/min)",
                    f"{slope:+.2f} MB/min{note}" if slope is not None else "n/a",
                    None if slope is None or soak < 300 else slope <= 0.5,
                )
            )
        big = next((c for c in self.catalogs if c.patterns >= 1000), None)
        small = next((c for c in self.catalogs if c.patterns < 1000), None)
        if big:
            goals.append(
                Goal(
                    "1,000 patterns: `genai serve` to ready under 2 s",
                    f"{big.ready_s:.2f} s",
                    big.ready_s < 2,
                )
            )
            goals.append(
                Goal(
                    "1,000 patterns: `genai patterns list` under 2 s",
                    f"{big.list_s:.2f} s",
                    big.list_s < 2,
                )
            )
        if big and small:
            a, b = small.render.p50_ms, big.render.p50_ms
            goals.append(
                Goal(
                    f"render p50 independent of catalog size ({small.patterns} vs {big.patterns}: "
                    "within 10% + 0.1 ms)",
                    f"{a:.2f} ms vs {b:.2f} ms",
                    b <= a * 1.1 + 0.1,
                )
            )
        return goals + self.route_goals() + self.stream_goals()

    def stream_goals(self) -> list[Goal]:
        """Issue 17: a streamed answer's first token and stream rate, against the passthrough."""
        goals: list[Goal] = []
        for c in stream_comparisons(self.streams):
            name, p50, p99 = (
                c["service"],
                c["first_token_p50_delta_ms"],
                c["first_token_p99_delta_ms"],
            )
            ratio = c["streams_per_s_ratio"]
            goals += [
                Goal(f"{name}: first token p50 within 0.5 ms", f"{p50:+.2f} ms", p50 <= 0.5, 17),
                Goal(f"{name}: first token p99 within 1 ms", f"{p99:+.2f} ms", p99 <= 1.0, 17),
                Goal(
                    f"{name}: streams/s with many open at least 0.9x",
                    "n/a" if ratio is None else f"{ratio:.2f}x",
                    None if ratio is None else ratio >= 0.9,
                    17,
                ),
            ]
        return goals

    def as_dict(self) -> dict[str, Any]:
        return {
            "meta": self.meta,
            "mode": self.mode,
            "settings": self.settings,
            "targets": [t.as_dict() for t in self.targets],
            "comparisons": self.comparisons(),
            "catalog": [c.as_dict() for c in self.catalogs],
            "streams": [r.as_dict() for r in self.streams],
            "stream_comparisons": stream_comparisons(self.streams),
            "usage": [t.as_dict() for t in self.usage],
            "console_pages": [r.as_dict() for r in self.console],
            "goals": [g.__dict__ for g in self.goals()],
            "problems": self.problems,
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_dict(), indent=2) + "\n")

    def markdown(self) -> str:
        m, s = self.meta, self.settings
        lines = [
            "# Benchmark results",
            "",
            f"Written by `python -m bench` ({self.mode} mode); see bench/README.md for how to "
            "read it. Figures are from one run; compare rows within this file, not across runs.",
            "",
            f"- commit `{m['commit']}`, {m['date']}",
            f"- machine: {m['machine']['cores']} cores ({m['machine']['cpu_model']}), "
            f"Linux {m['machine']['kernel']}, Python {m['machine']['python']}, load average at "
            f"start {m['machine']['load_average_at_start']}",
            f"- pinning: {m['pinning']}",
            "- tools: " + ", ".join(f"{k} {v}" for k, v in m["versions"].items()),
            f"- upstream: `bench.upstream`, latency {s['upstream_latency_ms']} ms; "
            f"{m.get('sdk_check', '')}",
            f"- phases: warm-up {s['warmup_s']} s at c=8, c=1 {s['c1_s']} s, c=32 {s['c32_s']} s, "
            f"sustained c=32 {s['soak_s']} s (RSS sampled every {s['rss_interval_s']} s)",
            f"- service: `genai serve --workers {s['workers']}`, audit trail on, auth on, "
            f"log level {s['service_log_level']}, a fresh process per target; extra env: "
            f"{s['service_env'] or 'none'}",
            f"- every request carries the `{s['pattern']}` prompt (system prompt "
            f"{s['system_prompt_chars']} chars) and the same user prompt; targets "
            "(`<server>-<route>`), each against its baseline:",
            *(
                f"  - {key}: POST {r['path']}, {r['about']}"
                + (f" (against `{r['baseline']}`)" if r.get("baseline") else "")
                for key, r in s.get("routes", {}).items()
            ),
            "",
            "| target | c=1 p50 | c=1 p99 | c=32 req/s | c=32 p99 | peak RSS | RSS slope "
            "(sustained) | audit rows | failures | other load on its core, c=1 / c=32 |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for t in self.targets:
            slope = (
                "n/a" if t.rss_slope_mb_per_min is None else f"{t.rss_slope_mb_per_min:+.2f} MB/min"
            )
            rows = (
                "—"
                if t.audit_rows is None
                else ", ".join(f"{k} {v}" for k, v in sorted(t.audit_rows.items()))
            )
            lines.append(
                f"| {t.name} | {t.c1.p50_ms:.2f} ms | {t.c1.p99_ms:.2f} ms | {t.c32.rps:.0f} | "
                f"{t.c32.p99_ms:.2f} ms | {t.peak_rss_mb:.0f} MB | {slope} | {rows} | "
                f"{t.failures} | {_share(t.c1.foreign_cpu)} / {_share(t.c32.foreign_cpu)} |"
            )
        if comparisons := self.comparisons():
            lines += [
                "",
                "| service minus baseline | baseline | c=1 p50 | c=1 p99 | c=32 p99 | "
                "c=32 req/s ratio | peak RSS |",
                "|---|---|---|---|---|---|---|",
            ]
            for c in comparisons:
                lines.append(
                    f"| {c['service']} | {c['baseline']} | {c['c1_p50_delta_ms']:+.2f} ms | "
                    f"{c['c1_p99_delta_ms']:+.2f} ms | {c['c32_p99_delta_ms']:+.2f} ms | "
                    f"{c['c32_rps_ratio']:.2f}x | {c['peak_rss_delta_mb']:+.0f} MB |"
                )
        if self.catalogs:
            lines += [
                "",
                "| patterns | `genai patterns list` | `genai serve` to /readyz 200 | "
                "/v1/render c=1 p50 | p99 |",
                "|---|---|---|---|---|",
            ]
            for size in self.catalogs:
                lines.append(
                    f"| {size.patterns:,} | {size.list_s:.2f} s | {size.ready_s:.2f} s | "
                    f"{size.render.p50_ms:.2f} ms | {size.render.p99_ms:.2f} ms |"
                )
        if self.streams:
            streamed = self.settings.get("streams", {})
            lines += stream_tables(
                self.streams,
                Phases(seconds=streamed.get("seconds", 0), open_streams=streamed.get("open", 0)),
                s.get("stream_gap_ms", 5.0),
            )
        if self.usage:
            lines += usage_tables(self.usage)
        lines += console_tables(self.console)
        goals = self.goals()
        for issue in sorted({g.issue for g in goals}):
            lines += ["", f"| goal (issue {issue}) | measured | met |", "|---|---|---|"]
            for g in goals:
                if g.issue == issue:
                    met = {True: "yes", False: "**no**", None: "—"}[g.met]
                    lines.append(f"| {g.text} | {g.measured} | {met} |")
        if self.problems:
            lines += ["", "Problems in this run:", ""] + [f"- {p}" for p in self.problems]
        return "\n".join(lines) + "\n"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def stamp(load_tool: str, pinning: str) -> dict[str, Any]:
    return {
        "commit": commit(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(load_tool),
        "pinning": pinning,
    }
