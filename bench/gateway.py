"""End-to-end overhead of the gateway over loopback HTTP.

The loopback fake provider (it answers at once) and the real app under uvicorn run in
background threads of this process; one `httpx.AsyncClient` drives, after a warm-up:
(a) POST /v1/render, (b) POST /v1/completions (openai/...), and (c) the fake provider's
/v1/chat/completions directly, the baseline without the gateway.

    .venv/bin/python -m bench.gateway [--requests 1000] [--concurrency 16] [--postgres]

The fake is served here with TCP_NODELAY: `tests.fakes.provider_server.running_fake_provider`
binds `socket.socket(AF_INET, SOCK_STREAM)` (proto 0), on which asyncio's transport does not
turn Nagle off, so every request on a reused connection waits ~40 ms for a delayed ACK.
`--stock-fake` uses that fixture unchanged, to see the difference.

Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.types import ASGIApp

from app.main import create_app
from bench._common import (
    MODEL,
    PATTERN,
    POSTGRES_ADMIN_DSN,
    USER_PROMPT,
    VARIABLES,
    CpuMeter,
    job_counts,
    percentiles_ms,
    quiet_logs,
    scratch_postgres,
)
from tests.fakes.provider_server import FakeProviderServer, running_fake_provider
from tests.support import settings_for

WARMUP = 50


@dataclass
class Run:
    name: str
    requests: int
    concurrency: int
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    first_error: str | None = None
    cpu: str = ""

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


@contextlib.contextmanager
def serve_in_thread(app: ASGIApp, name: str, **options: Any) -> Iterator[str]:
    """uvicorn in a daemon thread on an ephemeral loopback port; stopped on exit.

    The socket is created as IPPROTO_TCP so asyncio's transport sets TCP_NODELAY on it
    (with proto 0 it does not, and keep-alive requests stall on delayed ACKs).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **options)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{name} failed to start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True  # the gateway's lifespan drains the audit writer on the way out
        thread.join(timeout=30)
        sock.close()


async def drive(
    clients: Sequence[httpx.AsyncClient],
    name: str,
    url: str,
    body: dict[str, Any],
    total: int,
    workers: int,
) -> Run:
    """`total` POSTs, `workers` at a time (a closed loop); latency per request."""
    run = Run(name, total, workers)
    todo = iter(range(total))

    async def worker(client: httpx.AsyncClient) -> None:
        for _ in todo:
            started = time.perf_counter()
            response = await client.post(url, json=body)
            run.latencies.append(time.perf_counter() - started)
            if response.status_code != 200:
                run.errors += 1
                run.first_error = run.first_error or f"{response.status_code} {response.text}"

    started = time.perf_counter()
    await asyncio.gather(*(worker(clients[i % len(clients)]) for i in range(workers)))
    run.seconds = time.perf_counter() - started
    return run


@contextlib.contextmanager
def fake_provider(stock: bool) -> Iterator[FakeProviderServer]:
    """The loopback fake: the test fixture as is, or the same app served with TCP_NODELAY."""
    if stock:
        with running_fake_provider() as fake:
            yield fake
        return
    fake = FakeProviderServer()
    # As the fixture serves it: the plain asyncio loop, no lifespan.
    with serve_in_thread(fake.app, "fake-provider", loop="asyncio", lifespan="off") as url:
        fake.base_url = url
        yield fake


@contextlib.asynccontextmanager
async def database_url(postgres: bool, admin_dsn: str) -> AsyncIterator[str | None]:
    if not postgres:
        yield None
        return
    async with scratch_postgres(admin_dsn) as url:
        yield url


REQUEST = {
    "pattern_key": PATTERN,
    "variables": VARIABLES,
    "user_prompt": USER_PROMPT,
    "model": MODEL,
}


async def measure(
    gateway: str, fake: str, requests: int, concurrency: int, client_per_worker: bool = False
) -> list[Run]:
    """Warm up, then run (a), (b) and (c) in turn: one shared client, or one per worker."""
    count, per_client = (concurrency, 1) if client_per_worker else (1, concurrency)
    limits = httpx.Limits(max_connections=per_client, max_keepalive_connections=per_client)
    runs = []
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(timeout=30, limits=limits))
            for _ in range(count)
        ]
        client = clients[0]
        rendered = await client.post(f"{gateway}/v1/render", json=REQUEST)
        rendered.raise_for_status()
        render = rendered.json()
        # What the gateway sends upstream for (b), sent straight to the fake.
        direct = {
            "model": render["model_choice"]["name"],
            "messages": [
                {"role": m["role"], "content": m["content"]}
                for m in [
                    {"role": "system", "content": render["prompt"]["system"]},
                    *render["prompt"]["messages"],
                ]
                if m["content"]
            ],
            **{k: v for k, v in render["params"].items() if v is not None},
        }
        scenarios = (
            ("(a) gateway POST /v1/render", f"{gateway}/v1/render", REQUEST),
            ("(b) gateway POST /v1/completions", f"{gateway}/v1/completions", REQUEST),
            ("(c) fake provider directly", f"{fake}/v1/chat/completions", direct),
        )
        for name, url, body in scenarios:
            await drive(clients, name, url, body, WARMUP, concurrency)
            meter = CpuMeter()
            run = await drive(clients, name, url, body, requests, concurrency)
            run.cpu = meter.summary()
            runs.append(run)
    return runs


async def main(args: argparse.Namespace) -> None:
    quiet_logs()
    with fake_provider(args.stock_fake) as fake:
        async with database_url(args.postgres, args.postgres_dsn) as pg_url:
            overrides: dict[str, Any] = {"log_level": "WARNING"}
            if pg_url is not None:
                overrides |= {"database_url": pg_url, "database_auto_migrate": True}
            settings = settings_for(fake, **overrides)  # its data_dir is a fresh temp dir
            try:
                # As `genai serve` runs it: uvicorn's default loop (uvloop) and HTTP parser.
                app = create_app(settings)
                with serve_in_thread(app, "gateway", access_log=False, lifespan="on") as gateway:
                    runs = await measure(
                        gateway,
                        fake.base_url,
                        args.requests,
                        args.concurrency,
                        args.client_per_worker,
                    )
                counts = await job_counts(pg_url or settings.resolved_database_url)
            finally:
                shutil.rmtree(settings.data_dir, ignore_errors=True)
    setup = "tests' running_fake_provider" if args.stock_fake else "no-Nagle fake"
    setup += ", one client per worker" if args.client_per_worker else ", one shared client"
    report(runs, counts, "PostgreSQL" if args.postgres else "SQLite", setup)


def report(runs: list[Run], counts: dict[str, int], backend: str, fake: str) -> None:
    print(
        f"\nGateway over loopback, audit store {backend}, {fake} — "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs"
    )
    print("| scenario | requests | concurrency | req/s | p50 ms | p95 ms | p99 ms | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for run in runs:
        q = percentiles_ms(run.latencies)
        print(
            f"| {run.name} | {run.requests} | {run.concurrency} | {run.rps:,.0f} "
            f"| {q['p50']:.2f} | {q['p95']:.2f} | {q['p99']:.2f} | {run.errors} |"
        )
    by_name = {run.name[:3]: percentiles_ms(run.latencies)["p50"] for run in runs}
    print(f"\ngateway added p50 latency (b) - (c): {by_name['(b)'] - by_name['(c)']:.2f} ms")
    print(f"audit rows by status after shutdown: {counts}")
    for run in runs:
        print(f"{run.name}: {run.cpu}")
    for run in runs:
        if run.first_error:
            print(f"{run.name}: {run.errors} errors; first: {run.first_error[:300]}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per run")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument(
        "--postgres", action="store_true", help="audit store in a scratch PostgreSQL database"
    )
    parser.add_argument("--postgres-dsn", default=POSTGRES_ADMIN_DSN, help="admin DSN")
    parser.add_argument(
        "--stock-fake",
        action="store_true",
        help="use tests.fakes.provider_server.running_fake_provider as is (Nagle stalls)",
    )
    parser.add_argument(
        "--client-per-worker",
        action="store_true",
        help="one httpx.AsyncClient per worker instead of one shared (its pool slows under load)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
