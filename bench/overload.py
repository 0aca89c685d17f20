"""Load shedding: `genai serve` behind a slow upstream, driven at several times its capacity.

    .venv/bin/python -m bench.overload                 # capacity 32, upstream 200 ms, x1 x2 x4 x8
    .venv/bin/python -m bench.overload --quick         # capacity 8, x1 x4, 3 s per phase (< 30 s)
    .venv/bin/python -m bench.overload --capacity 16 --multiples 1,4,16 --seconds 20 \\
        --upstream-latency-ms 500 --json bench/results/overload.json

The service runs with GENAI_LIMITS__MAX_CONCURRENT = --capacity and GENAI_LIMITS__MAX_QUEUED =
--queued (default: the capacity), so at most twice the capacity is ever held in memory; every
request beyond that must be answered 503 `overloaded` at once. The upstream (bench/upstream.py,
its own process) answers after --upstream-latency-ms, so a slot is held that long.

Each phase runs `multiple x capacity` closed-loop keep-alive connections (each sends its next
request as soon as the last is answered; a shed client retries at once, the harshest case) and
reports answered and shed counts, p50/p99 of both, and the server's RSS (VmRSS, sampled every
0.5 s) at the start and end of the phase, its peak and its slope. The target: shed answers far
faster than admitted ones, and RSS flat from x2 upwards. Figures are reported, never asserted;
the exit status is 1 only when a request fails in another way (not 200, not 503 `overloaded`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench import catalog
from bench.measure import smoke
from bench.procs import BenchError, Children, Cores, RssSampler
from bench.targets import START_TIMEOUT_S, Server, prepare_store, service_env, start_service
from bench.targets import start_upstream as start_slow_upstream

REQUEST_TIMEOUT_S = 60.0


def log(message: str) -> None:
    print(message, flush=True)


@dataclass
class Tally:
    """What every connection of one phase adds to."""

    answered_s: list[float] = field(default_factory=list)
    shed_s: list[float] = field(default_factory=list)
    other_statuses: dict[int, int] = field(default_factory=dict)
    socket_errors: int = 0


@dataclass(frozen=True)
class PhaseResult:
    multiple: float
    connections: int
    seconds: float
    answered: int
    shed: int
    other: dict[int, int]
    socket_errors: int
    answered_p50_ms: float | None
    answered_p99_ms: float | None
    shed_p50_ms: float | None
    shed_p99_ms: float | None
    shed_max_ms: float | None
    rss_start_mb: float
    rss_end_mb: float
    rss_peak_mb: float
    rss_slope_mb_per_min: float | None

    @property
    def failures(self) -> int:
        return sum(self.other.values()) + self.socket_errors


def _percentile_ms(samples: Sequence[float], q: int) -> float | None:
    if not samples:
        return None
    if len(samples) == 1:
        return samples[0] * 1000
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] * 1000


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One HTTP/1.1 response with a Content-Length body: its status and body."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return int(head.split(b" ", 2)[1]), await reader.readexactly(length)


async def _connection(port: int, request: bytes, until: float, tally: Tally) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            if reader is None or writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                status, body = await _read_response(reader)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            tally.socket_errors += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.01)  # a refused connection must not become a busy loop
            continue
        elapsed = time.perf_counter() - started
        if status == 200:
            tally.answered_s.append(elapsed)
        elif status == 503 and b'"overloaded"' in body:
            tally.shed_s.append(elapsed)
        else:
            tally.other_statuses[status] = tally.other_statuses.get(status, 0) + 1
    if writer is not None:
        writer.close()


async def _drive(server: Server, connections: int, seconds: float) -> Tally:
    head = [
        f"POST {server.path} HTTP/1.1",
        f"host: 127.0.0.1:{server.port}",
        f"content-length: {len(server.body)}",
        *(f"{name}: {value}" for name, value in server.headers.items()),
    ]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + server.body
    tally = Tally()
    until = time.monotonic() + seconds
    await asyncio.gather(
        *(_connection(server.port, request, until, tally) for _ in range(connections))
    )
    return tally


def run_phase(
    server: Server, sampler: RssSampler, *, multiple: float, capacity: int, seconds: float
) -> PhaseResult:
    phase = f"x{multiple:g}"
    connections = max(1, round(multiple * capacity))
    sampler.phase = phase
    started = time.monotonic()
    tally = asyncio.run(_drive(server, connections, seconds))
    elapsed = time.monotonic() - started
    time.sleep(0.6)  # one more RSS sample inside the phase, after its last answer
    rss = [mb for _, mb, name in sampler.samples if name == phase] or [0.0]
    return PhaseResult(
        multiple=multiple,
        connections=connections,
        seconds=round(elapsed, 2),
        answered=len(tally.answered_s),
        shed=len(tally.shed_s),
        other=tally.other_statuses,
        socket_errors=tally.socket_errors,
        answered_p50_ms=_percentile_ms(tally.answered_s, 50),
        answered_p99_ms=_percentile_ms(tally.answered_s, 99),
        shed_p50_ms=_percentile_ms(tally.shed_s, 50),
        shed_p99_ms=_percentile_ms(tally.shed_s, 99),
        shed_max_ms=max(tally.shed_s) * 1000 if tally.shed_s else None,
        rss_start_mb=rss[0],
        rss_end_mb=rss[-1],
        rss_peak_mb=max(rss),
        rss_slope_mb_per_min=sampler.slope_mb_per_min(phase),
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def markdown(results: Sequence[PhaseResult], meta: dict[str, object]) -> str:
    lines = [
        f"Overload: capacity {meta['capacity']} + queue {meta['queued']}, upstream "
        f"{meta['upstream_latency_ms']} ms, {meta['seconds']} s per phase, "
        f"{meta['cores']}",
        "",
        "| load | conns | answered/s | shed/s | answered p50/p99 ms | shed p50/p99/max ms "
        "| RSS start→end (peak) MB | RSS slope MB/min | other |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        slope = "-" if r.rss_slope_mb_per_min is None else f"{r.rss_slope_mb_per_min:+.2f}"
        other = ", ".join(f"{status}: {n}" for status, n in sorted(r.other.items()))
        if r.socket_errors:
            other = f"{other}, socket: {r.socket_errors}" if other else f"socket: {r.socket_errors}"
        lines.append(
            f"| x{r.multiple:g} | {r.connections} | {r.answered / r.seconds:.0f} "
            f"| {r.shed / r.seconds:.0f} "
            f"| {_ms(r.answered_p50_ms)} / {_ms(r.answered_p99_ms)} "
            f"| {_ms(r.shed_p50_ms)} / {_ms(r.shed_p99_ms)} / {_ms(r.shed_max_ms)} "
            f"| {r.rss_start_mb:.1f} → {r.rss_end_mb:.1f} ({r.rss_peak_mb:.1f}) | {slope} "
            f"| {other or '-'} |"
        )
    return "\n".join(lines)


def rss_timeline(sampler: RssSampler, every_s: float = 2.0) -> str:
    """RSS over the whole run, one sample per `every_s` seconds: `t+12s x4 81.3 MB`."""
    if not sampler.samples:
        return ""
    start, shown, last = sampler.samples[0][0], [], -every_s
    for at, mb, phase in sampler.samples:
        if at - start - last >= every_s:
            last = at - start
            shown.append(f"t+{last:.0f}s {phase} {mb:.1f}")
    return "RSS: " + "; ".join(shown)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.overload", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--quick", action="store_true", help="capacity 8, x1 x4, 3 s phases.")
    parser.add_argument("--capacity", type=int, help="GENAI_LIMITS__MAX_CONCURRENT (32).")
    parser.add_argument("--queued", type=int, help="GENAI_LIMITS__MAX_QUEUED (the capacity).")
    parser.add_argument("--multiples", help="Load as multiples of the capacity (1,2,4,8).")
    parser.add_argument("--seconds", type=float, help="Seconds per phase (10).")
    parser.add_argument("--upstream-latency-ms", type=float, default=200.0)
    parser.add_argument("--service-log-level", default="WARNING")
    parser.add_argument("--no-pin", action="store_true", help="Do not pin server and load.")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    args = parser.parse_args(argv)
    args.capacity = args.capacity or (8 if args.quick else 32)
    args.queued = args.capacity if args.queued is None else args.queued
    args.multiples = [
        float(m) for m in (args.multiples or ("1,4" if args.quick else "1,2,4,8")).split(",")
    ]
    args.seconds = args.seconds or (3.0 if args.quick else 10.0)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work_dir = Path(tempfile.mkdtemp(prefix="genai-bench-overload-"))
    children = Children(work_dir)
    cores = Cores.plan(not args.no_pin)
    keep = False
    try:
        upstream = start_slow_upstream(children, cores.load, args.upstream_latency_ms)
        catalog.write_catalog(work_dir / "patterns", 1)
        env = service_env(
            upstream_url=upstream,
            pattern_dir=work_dir / "patterns",
            data_dir=work_dir / "data",
            database_url=None,
            log_level=args.service_log_level,
            extra={
                "GENAI_LIMITS__MAX_CONCURRENT": str(args.capacity),
                "GENAI_LIMITS__MAX_QUEUED": str(args.queued),
                "GENAI_LIMITS__RETRY_AFTER_SECONDS": "1",
            },
        )
        key = prepare_store(env, work_dir)
        server = start_service(
            children,
            cores.server,
            name="service",
            env=env,
            cwd=work_dir,
            key=key,
            workers=1,
            timeout=START_TIMEOUT_S,
        )
        smoke(server)
        results = []
        with RssSampler(server.child.pid) as sampler:
            for multiple in args.multiples:
                log(f"x{multiple:g}: {round(multiple * args.capacity)} connections …")
                results.append(
                    run_phase(
                        server,
                        sampler,
                        multiple=multiple,
                        capacity=args.capacity,
                        seconds=args.seconds,
                    )
                )
            timeline = rss_timeline(sampler)
        meta: dict[str, object] = {
            "capacity": args.capacity,
            "queued": args.queued,
            "upstream_latency_ms": args.upstream_latency_ms,
            "seconds": args.seconds,
            "cores": cores.describe(),
        }
        log("")
        log(markdown(results, meta))
        log("")
        log(timeline)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            figures = {"meta": meta, "phases": [asdict(r) for r in results]}
            args.json.write_text(json.dumps(figures, indent=2))
        failures = sum(r.failures for r in results)
        if failures:
            keep = True
            log(f"{failures} requests failed other than by shedding; logs kept in {work_dir}")
            return 1
        return 0
    except BenchError as exc:
        keep = True
        log(f"bench failed: {exc}\nlogs kept in {work_dir}")
        return 1
    finally:
        children.close()
        if not keep:
            with contextlib.suppress(OSError):
                shutil.rmtree(work_dir)


if __name__ == "__main__":
    sys.exit(main())
