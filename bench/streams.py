"""Streams: time to first token and completed streams per second, against a streaming passthrough.

    python -m bench                     # runs it after the request targets (see bench/README.md)
    python -m bench.streams [--quick]   # only this part

The upstream streams its answer as bench.upstream.STREAM_PIECES deltas `--stream-gap-ms` apart.
The baseline relays the OpenAI SDK's stream (`POST /v1/chat/stream` of bench.baseline); the
service is measured on its OpenAI-compatible route and on its own route, both with
`"stream": true`, the same prompt as every other target. Two phases per target, each driven by
bench.streamload in its own process: one stream at a time (time to first token), then
`--open` streams at once in a closed loop (completed streams per second).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import catalog, routes
from bench.procs import BenchError, Children, Cores
from bench.stores import store_for
from bench.targets import Server, prepare_store, service_env, start_baseline, start_service
from bench.targets import start_upstream as start_streaming_upstream
from bench.upstream import ANSWER

STREAM_GAP_MS = 5.0  # bench.upstream's default: a few ms between a streamed answer's deltas
MARK = ANSWER.split(" ", 1)[0]  # the first word of the first text delta


def _with(body: bytes, **fields: Any) -> bytes:
    return json.dumps(json.loads(body) | fields).encode()


BASELINE = routes.Route(
    "stream",
    "/v1/chat/stream",
    routes.chat_body(tools=False, model=catalog.MODEL_NAME),
    "the plain conversation, relayed as the SDK streams it",
)
BASELINE_NAME = "baseline-stream"
ROUTES = (
    routes.Route(
        "chat-stream",
        "/v1/chat/completions",
        _with(routes.chat_body(tools=False), stream=True, stream_options={"include_usage": True}),
        "the chat route with `stream: true` and usage",
        baseline="stream",
    ),
    routes.Route(
        "completions-stream",
        "/v1/completions",
        _with(catalog.completion_body(), stream=True),
        f"pattern `{catalog.PATTERN_NAME}` with `stream: true`",
        baseline="stream",
    ),
)


@dataclass(frozen=True)
class Phases:
    seconds: float
    open_streams: int = 256
    warmup_s: float = 2.0


@dataclass(frozen=True)
class StreamResult:
    """One target: a server streaming one route, alone and with many streams open."""

    name: str
    baseline: str | None
    one: dict[str, Any]  # bench.streamload's figures at one stream at a time
    many: dict[str, Any]  # … with Phases.open_streams at once

    @property
    def failures(self) -> int:
        return int(self.one["errors"]) + int(self.many["errors"])

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "baseline": self.baseline, "one": self.one, "many": self.many}


def streamload(
    server: Server,
    connections: int,
    seconds: float,
    *,
    work_dir: Path,
    cores: frozenset[int] | None,
) -> dict[str, Any]:
    """bench.streamload against the server, in its own process on the load core; its figures."""
    body = work_dir / f"{server.name}-stream-body.json"
    body.write_bytes(server.body)
    argv = [sys.executable, "-m", "bench.streamload", "--port", str(server.port)]
    argv += ["--path", server.path, "--body-file", str(body), "--mark", MARK]
    argv += ["-c", str(connections), "-d", str(seconds)]
    for key, value in server.headers.items():
        argv += ["--header", f"{key}: {value}"]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"bench.streamload did not finish within {seconds + 60:.0f} s") from exc
    line = next((x for x in done.stdout.splitlines() if x.startswith("STREAMJSON ")), None)
    if done.returncode != 0 or line is None:
        raise BenchError(f"bench.streamload failed ({done.returncode}):\n{done.stderr[-2000:]}")
    figures: dict[str, Any] = json.loads(line.removeprefix("STREAMJSON "))
    return figures


@dataclass(frozen=True)
class StreamRun:
    """What the stream targets of one run share."""

    children: Children
    cores: Cores
    upstream: str
    work_dir: Path
    phases: Phases
    start_timeout: float
    log: Callable[[str], None] = print


def measure_stream(run: StreamRun, server: Server, *, baseline: str | None) -> StreamResult:
    """Warm up, then one stream at a time, then many at once; the server is stopped after."""
    phases = run.phases

    def load(connections: int, seconds: float) -> dict[str, Any]:
        server.child.check_alive()
        return streamload(server, connections, seconds, work_dir=run.work_dir, cores=run.cores.load)

    try:
        load(8, phases.warmup_s)
        one = load(1, phases.seconds)
        many = load(phases.open_streams, phases.seconds)
        server.child.check_alive()
    finally:
        run.children.stop(server.child)
    return StreamResult(server.name, baseline, one, many)


def measure_streams(run: StreamRun, stores: dict[str, str | None]) -> list[StreamResult]:
    """The baseline, then each route on each store (`{name: GENAI_DATABASE_URL or None}`)."""
    results: list[StreamResult] = []
    name = BASELINE_NAME
    run.log(f"{name} (FastAPI + AsyncOpenAI, POST {BASELINE.path}, streamed)")
    server = start_baseline(
        run.children, run.cores.server, run.upstream, run.start_timeout, name=name, route=BASELINE
    )
    results.append(measure_stream(run, server, baseline=None))
    for store, database_url in stores.items():
        root = run.work_dir / f"streams-{store}"
        root.mkdir()
        catalog.write_catalog(root / "patterns", 10)
        env = service_env(
            upstream_url=run.upstream,
            pattern_dir=root / "patterns",
            data_dir=root / "data",
            database_url=database_url,
            log_level="warning",
            extra={},
        )
        key = prepare_store(env, root)
        for route in ROUTES:
            name = f"service-{store}-{route.key}"
            run.log(f"{name} (genai serve, audit on, POST {route.path}, streamed)")
            server = start_service(
                run.children,
                run.cores.server,
                name=name,
                env=env,
                cwd=root,
                key=key,
                workers=1,
                timeout=run.start_timeout,
                route=route,
            )
            results.append(measure_stream(run, server, baseline=BASELINE_NAME))
    return results


def stream_comparisons(results: list[StreamResult]) -> list[dict[str, Any]]:
    """Each service target minus its baseline: first-token deltas and the streams/s ratio."""
    by_name = {r.name: r for r in results}
    found = []
    for r in results:
        base = by_name.get(r.baseline or "")
        if base is None:
            continue
        rate = base.many["streams_per_s"]
        found.append(
            {
                "service": r.name,
                "baseline": base.name,
                "first_token_p50_delta_ms": round(
                    r.one["first_token_p50_ms"] - base.one["first_token_p50_ms"], 3
                ),
                "first_token_p99_delta_ms": round(
                    r.one["first_token_p99_ms"] - base.one["first_token_p99_ms"], 3
                ),
                "streams_per_s_ratio": round(r.many["streams_per_s"] / rate, 3) if rate else None,
            }
        )
    return found


def stream_tables(results: list[StreamResult], phases: Phases, gap_ms: float) -> list[str]:
    """The streams' tables for the report."""
    lines = [
        "",
        f"Streams: the upstream sends {ANSWER!r} as 8 deltas {gap_ms:g} ms apart; one stream "
        f"at a time for {phases.seconds:g} s, then {phases.open_streams} open at once for "
        f"{phases.seconds:g} s (bench.streamload, its own process).",
        "",
        "| target | first token p50 | p99 | stream p50 | "
        f"{phases.open_streams} open: streams/s | first token p99 | stream p99 | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        one, many = r.one, r.many
        lines.append(
            f"| {r.name} | {one['first_token_p50_ms']:.2f} ms | {one['first_token_p99_ms']:.2f} ms "
            f"| {one['duration_p50_ms']:.2f} ms | {many['streams_per_s']:.0f} | "
            f"{many['first_token_p99_ms']:.2f} ms | {many['duration_p99_ms']:.2f} ms | "
            f"{r.failures} |"
        )
    if found := stream_comparisons(results):
        lines += [
            "",
            "| streamed, service minus baseline | first token p50 | p99 | streams/s ratio |",
            "|---|---|---|---|",
        ]
        for c in found:
            ratio = c["streams_per_s_ratio"]
            lines.append(
                f"| {c['service']} | {c['first_token_p50_delta_ms']:+.2f} ms | "
                f"{c['first_token_p99_delta_ms']:+.2f} ms | "
                f"{'n/a' if ratio is None else f'{ratio:.2f}x'} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="2 s phases, SQLite only.")
    parser.add_argument("--seconds", type=float, default=10.0, help="Seconds per phase.")
    parser.add_argument("--open", type=int, default=256, help="Streams open at once.")
    parser.add_argument("--stream-gap-ms", type=float, default=STREAM_GAP_MS)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    phases = Phases(seconds=2.0 if args.quick else args.seconds, open_streams=args.open)
    with tempfile.TemporaryDirectory(prefix="genai-streams-") as tmp:
        work_dir = Path(tmp)
        children = Children(work_dir)
        try:
            cores = Cores.plan(pin=(os.cpu_count() or 1) >= 2)
            upstream = start_streaming_upstream(
                children, cores.load, 0.0, stream_gap_ms=args.stream_gap_ms
            )
            run = StreamRun(children, cores, upstream, work_dir, phases, 60.0)
            backend = "sqlite" if args.quick else args.backend
            with store_for("postgres" if backend != "sqlite" else "sqlite") as url:
                stores: dict[str, str | None] = {"sqlite": None, "postgres": url}
                if backend != "both":
                    stores = {backend: stores[backend]}
                results = measure_streams(run, stores)
        finally:
            children.close()
    print("\n".join(stream_tables(results, phases, args.stream_gap_ms)))
    if args.json:
        args.json.write_text(json.dumps([r.as_dict() for r in results], indent=2) + "\n")
    return 1 if any(r.failures for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
