"""The stream load generator: raw asyncio HTTP/1.1 that reads server-sent events, own process.

    python -m bench.streamload --port P --path /v1/x --body-file body.json -c 256 -d 10 \
        --mark Refunds [--header 'Authorization: Bearer …']

Each of `-c` connections sends the POST, reads the chunked answer to its end, and sends the next
one (a closed loop). The time to first token of a stream is when `--mark` (the first word of the
upstream's first text delta) has arrived; its duration, when the last chunk has. A stream that is
not a 200, or ends without the mark, is an error. It prints `STREAMJSON {...}`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Tally:
    """What every connection of one run adds to."""

    first_token_ms: list[float] = field(default_factory=list)
    duration_ms: list[float] = field(default_factory=list)
    errors: int = 0


async def _head(reader: asyncio.StreamReader) -> tuple[int, dict[bytes, bytes]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split(b" ", 2)[1]), headers


async def _stream(reader: asyncio.StreamReader, mark: bytes) -> float | None:
    """Read a chunked body to its end; when the mark arrived (perf_counter), or None."""
    seen: float | None = None
    tail = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return seen
        if seen is None:
            if mark in tail + data:
                seen = time.perf_counter()
            tail = data[-len(mark) :]


async def _exchange(reader: asyncio.StreamReader, mark: bytes) -> float | None:
    """One answer; the time its mark arrived, or None when it is not a streamed 200."""
    status, headers = await _head(reader)
    if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
        await reader.readexactly(int(headers.get(b"content-length", b"0")))
        return None
    seen = await _stream(reader, mark)
    return seen if status == 200 else None


async def _connection(
    port: int, request: bytes, mark: bytes, until: float, limit_s: float, tally: Tally
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
                seen = await _exchange(reader, mark)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError):
            tally.errors += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.01)
            continue
        if seen is None:
            tally.errors += 1
            continue
        tally.first_token_ms.append((seen - started) * 1000)
        tally.duration_ms.append((time.perf_counter() - started) * 1000)
    if writer is not None:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


def percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def run(args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    head = [f"POST {args.path} HTTP/1.1", f"Host: 127.0.0.1:{args.port}"]
    head += [*args.header, f"Content-Length: {len(body)}"]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    tally = Tally()
    started = time.monotonic()
    until = started + args.duration
    await asyncio.gather(
        *(
            _connection(args.port, request, args.mark.encode(), until, args.timeout, tally)
            for _ in range(args.connections)
        )
    )
    elapsed = time.monotonic() - started
    return {
        "connections": args.connections,
        "seconds": round(elapsed, 3),
        "completed": len(tally.duration_ms),
        "errors": tally.errors,
        "streams_per_s": round(len(tally.duration_ms) / elapsed, 1),
        "first_token_p50_ms": round(percentile(tally.first_token_ms, 0.5), 3),
        "first_token_p99_ms": round(percentile(tally.first_token_ms, 0.99), 3),
        "duration_p50_ms": round(percentile(tally.duration_ms, 0.5), 3),
        "duration_p99_ms": round(percentile(tally.duration_ms, 0.99), 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--body-file", required=True)
    parser.add_argument("--header", action="append", default=[])
    parser.add_argument("--mark", required=True, help="Bytes that mean the first token came.")
    parser.add_argument("-c", "--connections", type=int, default=1)
    parser.add_argument("-d", "--duration", type=float, default=10.0)
    parser.add_argument("--timeout", type=float, default=30.0, help="Per stream, seconds.")
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    figures = asyncio.run(run(args, Path(args.body_file).read_bytes()))
    print("STREAMJSON " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
