"""The fallback load generator when wrk is not installed: raw asyncio HTTP/1.1, own process.

    python -m bench.pyload --port P --path /v1/x --body-file body.json -c 32 -d 10 [--header ...]

Each of `-c` connections sends the POST, reads the whole answer (Content-Length), and sends the
next one (a closed loop, like wrk). It prints `LOADJSON {...}` with the fields wrk's hook prints.
Slower than wrk per request, so at high rates it may understate a server's throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Tally:
    """What every connection of one run adds to."""

    latencies: list[float] = field(default_factory=list)
    http_errors: int = 0
    socket_errors: int = 0


async def _exchange(reader: asyncio.StreamReader) -> int:
    """Read one response (status line, headers, Content-Length body); its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def _connection(
    port: int, request: bytes, until: float, limit_s: float, tally: Tally
) -> None:
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    while time.monotonic() < until:
        started = time.perf_counter()
        try:
            if reader is None or writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            async with asyncio.timeout(limit_s):
                status = await _exchange(reader)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            tally.socket_errors += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            continue
        tally.latencies.append(time.perf_counter() - started)
        if status >= 400:
            tally.http_errors += 1
    if writer is not None:
        writer.close()


async def run(args: argparse.Namespace, body: bytes) -> dict[str, float | int]:
    headers = [
        f"POST {args.path} HTTP/1.1",
        f"host: 127.0.0.1:{args.port}",
        f"content-length: {len(body)}",
        "content-type: application/json",
        *args.header,
    ]
    request = ("\r\n".join(headers) + "\r\n\r\n").encode() + body
    tally = Tally()
    started = time.monotonic()
    until = started + args.duration
    await asyncio.gather(
        *(_connection(args.port, request, until, args.timeout, tally) for _ in range(args.c))
    )
    seconds = time.monotonic() - started
    samples = sorted(tally.latencies) or [0.0]
    cuts = statistics.quantiles(
        samples * 2 if len(samples) < 2 else samples, n=100, method="inclusive"
    )
    return {
        "requests": len(tally.latencies),
        "seconds": seconds,
        "http_errors": tally.http_errors,
        "socket_errors": tally.socket_errors,
        "p50_ms": cuts[49] * 1000,
        "p90_ms": cuts[89] * 1000,
        "p99_ms": cuts[98] * 1000,
        "max_ms": samples[-1] * 1000,
        "mean_ms": statistics.fmean(samples) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--header", action="append", default=[], help="'Name: value'")
    parser.add_argument("-c", type=int, default=1, help="Connections.")
    parser.add_argument("-d", "--duration", type=float, default=5.0, help="Seconds.")
    parser.add_argument("--timeout", type=float, default=10.0)
    args = parser.parse_args()
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    body = Path(args.body_file).read_bytes()
    print("LOADJSON " + json.dumps(asyncio.run(run(args, body))), flush=True)


if __name__ == "__main__":
    main()
