"""Start the three kinds of process the harness measures: upstream, baseline and the service."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench import catalog
from bench.procs import BenchError, Child, Children, free_port, wait_for_line, wait_until_ok
from bench.routes import BASELINES, ROUTES, Route

START_TIMEOUT_S = 60.0
GENAI = str(Path(sys.executable).with_name("genai"))
# Variables of the harness's own environment that must not leak into the measured service.
_FOREIGN = ("GENAI_", "OPENAI_", "ANTHROPIC_", "OLLAMA_")


@dataclass(frozen=True)
class Server:
    """A started server and the one request it is measured with."""

    name: str
    child: Child
    port: int
    route: Route
    headers: dict[str, str] = field(default_factory=dict)
    database_url: str | None = None
    started_in_s: float = 0.0

    @property
    def path(self) -> str:
        return self.route.path

    @property
    def body(self) -> bytes:
        return self.route.body


def start_upstream(
    children: Children,
    cores: frozenset[int] | None,
    latency_ms: float,
    *,
    flood_mb: float = 0,
    stream_gap_ms: float = 5.0,
) -> str:
    """The loopback provider; its base URL (it picks its own free port). `flood_mb`: the size
    of the answer to a prompt starting with bench.upstream.FLOOD_MARK; `stream_gap_ms`: the time
    between a streamed answer's deltas."""
    argv = [sys.executable, "-m", "bench.upstream", "--latency-ms", str(latency_ms)]
    argv += ["--stream-gap-ms", str(stream_gap_ms)]
    if flood_mb > 0:
        argv += ["--flood-mb", str(flood_mb)]
    child = children.start("upstream", argv, cores=cores)
    port = int(wait_for_line(child, "PORT ", timeout=20))
    url = f"http://127.0.0.1:{port}"
    wait_until_ok(child, port, "/healthz", timeout=20)
    return url


def start_sdk_check(upstream_url: str) -> subprocess.Popen[str]:
    """The real OpenAI, Anthropic and Ollama SDKs call the upstream (in the background)."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.upstream_check", upstream_url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def sdk_check_result(check: subprocess.Popen[str]) -> str:
    """What the SDK check printed; BenchError when an SDK could not parse an answer."""
    try:
        out, err = check.communicate(timeout=60)
    except subprocess.TimeoutExpired as exc:
        check.kill()
        check.communicate()
        raise BenchError("the SDK check of the upstream took longer than 60 s") from exc
    if check.returncode != 0:
        raise BenchError(f"the SDK check of the upstream failed:\n{err[-3000:]}")
    return out.strip()


def start_baseline(
    children: Children,
    cores: frozenset[int] | None,
    upstream_url: str,
    timeout: float,
    *,
    name: str = "baseline",
    route: Route = BASELINES["plain"],
) -> Server:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.baseline:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--loop",
        "uvloop",
        "--http",
        "httptools",
        "--no-access-log",
        "--log-level",
        "warning",
    ]
    env = {**os.environ, "BENCH_UPSTREAM_URL": upstream_url}
    started = time.perf_counter()
    child = children.start(name, argv, env=env, cores=cores)
    wait_until_ok(child, port, "/docs", timeout)
    return Server(
        name=name,
        child=child,
        port=port,
        route=route,
        headers={"Content-Type": "application/json"},
        started_in_s=time.perf_counter() - started,
    )


def service_env(
    *,
    upstream_url: str,
    pattern_dir: Path,
    data_dir: Path,
    database_url: str | None,
    log_level: str,
    extra: Mapping[str, str],
) -> dict[str, str]:
    """The service's whole configuration, from a clean slate (no inherited GENAI_ settings)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN)}
    env.update(
        GENAI_PATTERN_DIR=str(pattern_dir),
        GENAI_DATA_DIR=str(data_dir),
        GENAI_LOG_LEVEL=log_level,
        GENAI_DEFAULT_MODEL=f"openai/{catalog.MODEL_NAME}",
        OPENAI_BASE_URL=f"{upstream_url}/v1",
        OPENAI_API_KEY="sk-bench",
        ANTHROPIC_BASE_URL=upstream_url,
        ANTHROPIC_API_KEY="sk-bench",
        OLLAMA_HOST=upstream_url,
    )
    if database_url:
        env["GENAI_DATABASE_URL"] = database_url
    env.update(extra)
    return env


def genai(
    args: list[str],
    env: Mapping[str, str],
    cwd: Path,
    timeout: float = 120,
    cores: frozenset[int] | None = None,
) -> str:
    """Run a `genai` command; its stdout, or BenchError with its stderr."""
    try:
        done = subprocess.run(
            [GENAI, *args],
            env=dict(env),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"`genai {' '.join(args)}` took longer than {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise BenchError(f"`genai {' '.join(args)}` failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def store_url(env: Mapping[str, str]) -> str:
    """The service's audit store: GENAI_DATABASE_URL, or the SQLite file in its data dir."""
    return (
        env.get("GENAI_DATABASE_URL")
        or f"sqlite+aiosqlite:///{Path(env['GENAI_DATA_DIR']) / 'genai.db'}"
    )


def prepare_store(env: Mapping[str, str], cwd: Path) -> str:
    """Migrate the store and mint a `complete` key in it; the key."""
    if "GENAI_DATABASE_URL" in env:  # SQLite is migrated by any command that opens it
        genai(["db", "upgrade"], env, cwd)
    out = genai(["keys", "create", "--scope", "complete", "--name", "bench"], env, cwd)
    return out.strip().splitlines()[-1].strip()


def start_service(
    children: Children,
    cores: frozenset[int] | None,
    *,
    name: str,
    env: Mapping[str, str],
    cwd: Path,
    key: str,
    workers: int,
    timeout: float,
    route: Route = ROUTES["completions"],
) -> Server:
    """`genai serve` on a free port; measured from launch to the first 200 on /readyz."""
    port = free_port()
    argv = [GENAI, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers)]
    started = time.perf_counter()
    child = children.start(name, argv, env=env, cores=cores, cwd=cwd)
    wait_until_ok(child, port, "/readyz", timeout)
    return Server(
        name=name,
        child=child,
        port=port,
        route=route,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
        database_url=store_url(env),
        started_in_s=time.perf_counter() - started,
    )
