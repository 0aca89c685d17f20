"""What one tenant can do to the others (issue 16, classes 1 and 5): the gateway's worst
event-loop stall and its RSS peak under a hostile request and under a hostile provider.

    .venv/bin/python -m bench.tenant_stall                          # this tree (~1.5 min)
    .venv/bin/python -m bench.tenant_stall --quick                  # 4 requests, 64 MB (< 30 s)
    .venv/bin/python -m bench.tenant_stall --service-root DIR       # another checkout (a worktree)
    .venv/bin/python -m bench.tenant_stall --attack flood-stream    # one attack (repeatable)

Each attack gets a fresh `genai serve` (one worker, SQLite and the shipped patterns in a temp
dir, the code of --service-root first on PYTHONPATH, pinned to the first core; --quick shares
one) in front of the bench upstream (bench/upstream.py with --flood-mb), and calls it with the
first admin key its fresh store made. In their own processes, on the second core:
a prober that GETs /healthz every 10 ms over one kept-alive connection and logs how long each
answer took, and the load generator (httpx), which sends the attack and streams every answer
to nowhere. The harness samples the service's RSS every 50 ms. Attacks:

- `variables` (class 1): 8 clients send 20 POST /v1/completions (`summarize`, user prompt "x")
  with about 3.9 MB of variables the pattern never uses (about 325,000 names, under the 4 MiB
  body cap);
- `variables-within-limits` (class 1): the same with the most the new default bounds accept:
  256 variables, about 1,000,000 bytes of JSON, nested 26 deep, about 92,000 values;
- `flood-stream` (class 5): one streamed request whose provider sends --flood-mb of text as
  `chat.completion.chunk` SSE frames (16 KiB of text each);
- `flood-json` (class 5): one plain request whose provider answers --flood-mb of JSON.

Reported per attack: what each request got, how long the attack took, the worst and p99 /healthz
latency and how many probes took over 1 s (from the attack's first request to --settle seconds
after its last answer), RSS before it, its peak, and --settle seconds after the last answer, and
the audit rows it left by status. Figures are reported, never asserted; the exit status is 1 only
when a process does not start or the smoke request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.procs import (
    BenchError,
    Child,
    Children,
    Cores,
    CoreShare,
    RssSampler,
    free_port,
    http_post,
    wait_until_ok,
)
from bench.stores import audit_rows
from bench.targets import GENAI, service_env, start_upstream, store_url
from bench.upstream import FLOOD_MARK

BENCH_ROOT = Path(__file__).resolve().parent.parent  # where `python -m bench.…` is found
PROBE_INTERVAL_S = 0.010
RSS_INTERVAL_S = 0.050
REQUEST_TIMEOUT_S = 300.0
PATTERN = "summarize"
_KEY = re.compile(r"gsk_[0-9a-f]{16}_[A-Za-z0-9_-]{43}")
_FIRST_KEY_FILE = Path("keys") / "first-admin-key"  # under GENAI_DATA_DIR (newer code)
_SPEC = "BENCH_TENANT_STALL_LOAD"  # the load generator's orders (JSON; not in argv: a key)

ATTACKS = ("variables", "variables-within-limits", "flood-stream", "flood-json")
_FLOODS = ("flood-stream", "flood-json")


# --- the attack bodies -------------------------------------------------------------------------


def unused_variables_body(target_bytes: int = 3_900_000) -> dict[str, Any]:
    """`summarize` with about `target_bytes` of variables it never reads: `"v000001":1,` each."""
    names = (target_bytes - 100) // len('"v000000":1,')
    variables = {f"v{i:06d}": 1 for i in range(names)}
    return {"pattern_key": PATTERN, "user_prompt": "x", "variables": variables}


def within_limits_body(names: int = 256, depth: int = 26, leaves: int = 335) -> dict[str, Any]:
    """The most the default bounds accept (256 names, 1,000,000 bytes, depth 32, 100,000
    values): each variable a 26-deep chain of objects ending in 335 eight-character strings."""
    variables: dict[str, Any] = {}
    for i in range(names):
        value: Any = [f"w{i:03d}{j:04d}" for j in range(leaves)]
        for _ in range(depth):
            value = {"n": value}
        variables[f"v{i:03d}"] = value
    return {"pattern_key": PATTERN, "user_prompt": "x", "variables": variables}


def flood_body(stream: bool) -> dict[str, Any]:
    return {"pattern_key": PATTERN, "user_prompt": f"{FLOOD_MARK}: please", "stream": stream}


def body_for(attack: str) -> dict[str, Any]:
    if attack == "variables":
        return unused_variables_body()
    if attack == "variables-within-limits":
        return within_limits_body()
    return flood_body(stream=attack == "flood-stream")


def json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def count_values(value: Any) -> tuple[int, int]:
    """JSON values (objects, arrays, strings, numbers; not keys) and the deepest level."""
    count, deepest, stack = 0, 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        count, deepest = count + 1, max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
    return count, deepest


def describe_body(attack: str) -> str:
    body = body_for(attack)
    if "variables" not in body:
        return "user prompt starts with the flood mark"
    variables = body["variables"]
    values, deepest = count_values(body)
    return (
        f"body {len(json_bytes(body)):,} B, {len(variables):,} variables "
        f"({len(json_bytes(variables)):,} B of JSON), {values:,} values, depth {deepest}"
    )


# --- the prober (its own process) --------------------------------------------------------------


def probe_main(port: int) -> None:
    """GET /healthz every PROBE_INTERVAL_S over one kept-alive connection until SIGTERM; one
    line per probe on stdout: its start (time.monotonic, shared by every process), how long it
    took, and its status (0: a socket error)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    connection: http.client.HTTPConnection | None = None
    while True:
        started = time.monotonic()
        status = 0
        try:
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            if connection is not None:
                connection.close()
            connection = None
        took = time.monotonic() - started
        print(f"{started:.6f} {took:.6f} {status}", flush=True)
        time.sleep(max(0.0, started + PROBE_INTERVAL_S - time.monotonic()))


@dataclass(frozen=True)
class Probes:
    count: int
    worst_ms: float | None
    p99_ms: float | None
    over_1s: int
    failed: int


def read_probes(log: Path, start: float, end: float) -> Probes:
    """The probes that were waiting at any moment within [start, end]."""
    took: list[float] = []
    failed = 0
    for line in log.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            at, seconds, status = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            continue
        if at <= end and at + seconds >= start:
            took.append(seconds)
            failed += status != 200
    if not took:
        return Probes(0, None, None, 0, failed)
    p99 = statistics.quantiles(took, n=100, method="inclusive")[98] if len(took) > 1 else took[0]
    return Probes(len(took), max(took) * 1000, p99 * 1000, sum(t > 1 for t in took), failed)


# --- the load generator (its own process) ------------------------------------------------------


class SseTally:
    """Event names of a Server-Sent Events stream and the first `error` event's data, read from
    raw bytes without keeping them (a line is kept to its first 4 KiB)."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.error = ""
        self._line = bytearray()
        self._event = ""

    def feed(self, chunk: bytes) -> None:
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(chunk[start:end])
            self._line_done()
            start = end + 1
        self._take(chunk[start:])

    def _take(self, piece: bytes) -> None:
        room = 4096 - len(self._line)
        if room > 0:
            self._line += piece[:room]

    def _line_done(self) -> None:
        line = bytes(self._line).rstrip(b"\r")
        self._line.clear()
        if line.startswith(b"event:"):
            self._event = line[6:].strip().decode(errors="replace")
            self.events[self._event] += 1
        elif line.startswith(b"data:") and self._event == "error" and not self.error:
            self.error = _error_type(line[5:]) or line[5:300].decode(errors="replace").strip()


def _error_type(body: bytes) -> str:
    """`error.type` of a `{"error": …}` body, or of FastAPI's own; "" when there is none."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return ""
    if isinstance(parsed, dict) and isinstance(error := parsed.get("error"), dict):
        return str(error.get("type") or error.get("code") or "")
    if isinstance(parsed, dict) and "detail" in parsed:
        return "detail"
    return ""


async def _one_request(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]
) -> dict[str, Any]:
    started = time.monotonic()
    received = 0
    sse: SseTally | None = None
    head = bytearray()
    try:
        async with client.stream("POST", url, content=body, headers=headers) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                sse = SseTally()
            async for chunk in response.aiter_raw():
                received += len(chunk)
                if sse is not None:
                    sse.feed(chunk)
                elif len(head) < 65536:
                    head += chunk[: 65536 - len(head)]
            status = response.status_code
    except httpx.HTTPError as exc:
        outcome = f"{type(exc).__name__} after {received / 1e6:,.0f} MB"
        return {"outcome": outcome, "seconds": time.monotonic() - started, "bytes": received}
    if sse is not None:
        if "error" in sse.events:
            outcome = f"{status} stream, `error` event {sse.error}"
        elif "envelope" in sse.events:
            outcome = f"{status} stream, envelope"
        else:
            outcome = f"{status} stream, ended without envelope or error"
    else:
        error = "" if 200 <= status < 300 else _error_type(bytes(head))
        outcome = f"{status} {error}".strip()
    return {"outcome": outcome, "seconds": time.monotonic() - started, "bytes": received}


async def _load(spec: dict[str, Any]) -> dict[str, Any]:
    body = json_bytes(body_for(spec["attack"]))
    url = f"http://127.0.0.1:{spec['port']}/v1/completions"
    headers = {
        "authorization": f"Bearer {spec['key']}",
        "content-type": "application/json",
        "accept-encoding": "identity",
    }
    pending = list(range(spec["requests"]))
    done: list[dict[str, Any]] = []
    timeout = httpx.Timeout(REQUEST_TIMEOUT_S, connect=10.0)
    limits = httpx.Limits(max_connections=spec["clients"])
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:

        async def worker() -> None:
            while pending:
                pending.pop()
                done.append(await _one_request(client, url, body, headers))

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(spec["clients"])))
        ended = time.monotonic()
    return {
        "started": started,
        "ended": ended,
        "outcomes": dict(Counter(d["outcome"] for d in done)),
        "slowest_s": max(d["seconds"] for d in done),
        "received_mb": sum(d["bytes"] for d in done) / 1e6,
    }


def load_main() -> None:
    result = asyncio.run(_load(json.loads(os.environ[_SPEC])))
    print("RESULT " + json.dumps(result), flush=True)


# --- the harness -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    requests: int  # per `variables*` attack
    clients: int
    flood_mb: float
    flood_clients: int
    idle_s: float
    settle_s: float


@dataclass(frozen=True)
class AttackResult:
    attack: str
    requests: int
    clients: int
    outcomes: dict[str, int]
    attack_s: float | None
    slowest_s: float | None
    received_mb: float | None
    idle: Probes
    during: Probes
    rss_before_mb: float
    rss_peak_mb: float
    rss_after_mb: float
    audit_rows: dict[str, int] | None
    other_load: float | None  # share of the server's core used by anything else meanwhile


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def first_admin_key(service: Child, data_dir: Path, timeout: float) -> str:
    """The key a fresh store's first start makes: from `<data dir>/keys/first-admin-key` (newer
    code, when stderr is not a terminal) or from the banner on stderr (older code)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        service.check_alive()
        with contextlib.suppress(OSError):
            if _KEY.fullmatch(key := (data_dir / _FIRST_KEY_FILE).read_text().strip()):
                return key
        with contextlib.suppress(OSError):
            if found := _KEY.search(service.log.read_text(errors="replace")):
                return found.group()
        time.sleep(0.05)
    raise BenchError(f"{service.name}: no first admin key within {timeout:.0f} s")


def describe_code(root: Path, env: dict[str, str]) -> str:
    """Where the service's `app` is imported from, and the checkout's commit (read-only git)."""
    where = subprocess.run(
        [sys.executable, "-c", "import app; print(app.__file__)"],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "app"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()
    state = f"{commit or 'unknown commit'}{' + uncommitted edits in app/' if dirty else ''}"
    return f"{state}, app from {Path(where).parent if where else '?'}"


@dataclass(frozen=True)
class Service:
    """A started `genai serve` and what the attacks need to call it."""

    child: Child
    port: int
    key: str
    store: str  # its audit store's URL


def _rows_added(
    before: dict[str, int] | None, after: dict[str, int] | None
) -> dict[str, int] | None:
    if before is None or after is None:
        return None
    added = {status: n - before.get(status, 0) for status, n in after.items()}
    return {status: n for status, n in added.items() if n}


class Run:
    """One upstream for the run; a fresh service (unless --shared-service), prober and load
    generator per attack."""

    def __init__(self, args: argparse.Namespace, work_dir: Path) -> None:
        self.args = args
        self.root: Path = args.service_root
        self.work_dir = work_dir
        self.children = Children(work_dir)
        self.cores = Cores.plan(not args.no_pin)
        self.cpus = len(os.sched_getaffinity(0))
        self.plan = Plan(
            requests=args.requests,
            clients=args.clients,
            flood_mb=args.flood_mb,
            flood_clients=args.flood_clients,
            idle_s=args.idle,
            settle_s=args.settle,
        )
        self.upstream = ""

    def env(self, data_dir: Path) -> dict[str, str]:
        extra = {
            "PYTHONPATH": str(self.root),
            "GENAI_DATABASE_AUTO_MIGRATE": "true",
            **dict(item.split("=", 1) for item in self.args.service_env),
        }
        return service_env(
            upstream_url=self.upstream,
            pattern_dir=self.root / "patterns",
            data_dir=data_dir,
            database_url=None,
            log_level=self.args.service_log_level,
            extra=extra,
        )

    def start(self) -> str:
        if self.cores.load:
            os.sched_setaffinity(0, self.cores.load)  # the harness stays off the server's core
        self.upstream = start_upstream(
            self.children, self.cores.load, 0, flood_mb=self.args.flood_mb
        )
        return describe_code(self.root, self.env(self.work_dir / "unused"))

    def service(self, name: str) -> Service:
        """`genai serve` on a fresh store, its first admin key, and one ordinary completion."""
        home = self.work_dir / name
        home.mkdir()
        env = self.env(home / "data")
        port = free_port()
        argv = [GENAI, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
        began = time.monotonic()
        child = self.children.start(name, argv, env=env, cores=self.cores.server, cwd=home)
        wait_until_ok(child, port, "/readyz", self.args.start_timeout)
        key = first_admin_key(child, home / "data", timeout=10)
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        smoke = json_bytes({"pattern_key": PATTERN, "user_prompt": "Hello."})
        status, answer = http_post(port, "/v1/completions", smoke, headers)
        if status != 200:
            raise BenchError(
                f"{name}: the smoke request answered {status}: {answer[:1500]!r}\n"
                f"its log:\n{child.tail()}"
            )
        log(f"  {name}: ready and answering in {time.monotonic() - began:.1f} s")
        return Service(child, port, key, store_url(env))

    def attack(self, attack: str, service: Service | None = None) -> AttackResult:
        """One attack, on `service` or else on a service of its own (stopped afterwards)."""
        plan = self.plan
        own = service is None
        target = self.service(f"service-{attack}") if service is None else service
        requests, clients = (
            (plan.flood_clients, plan.flood_clients)
            if attack in _FLOODS
            else (plan.requests, min(plan.clients, plan.requests))
        )
        probe_argv = [sys.executable, "-m", "bench.tenant_stall", "_probe", str(target.port)]
        prober = self.children.start(
            f"probe-{attack}", probe_argv, cores=self.cores.load, cwd=BENCH_ROOT
        )
        while not prober.log.read_text().strip():
            prober.check_alive()
            time.sleep(0.01)
        spec = {"port": target.port, "key": target.key, "attack": attack}
        spec |= {"requests": requests, "clients": clients}
        load_argv = [sys.executable, "-m", "bench.tenant_stall", "_load"]
        load_env = {**os.environ, _SPEC: json.dumps(spec)}
        rows_before = audit_rows(target.store)
        with RssSampler(target.child.pid, RSS_INTERVAL_S) as rss:
            rss.phase = "idle"
            idle_from = time.monotonic()
            time.sleep(plan.idle_s)
            rss.phase = "attack"
            launched = time.monotonic()
            core = CoreShare.mark(target.child.pid)
            load = self.children.start(
                f"load-{attack}", load_argv, env=load_env, cores=self.cores.load, cwd=BENCH_ROOT
            )
            try:
                load.process.wait(REQUEST_TIMEOUT_S + 60)
            except subprocess.TimeoutExpired:
                log(f"{attack}: the load generator did not finish; stopped")
            self.children.stop(load)
            found = [
                json.loads(line.removeprefix("RESULT "))
                for line in load.log.read_text(errors="replace").splitlines()
                if line.startswith("RESULT ")
            ]
            result = found[-1] if found else None
            ended = result["ended"] if result else time.monotonic()
            rss.phase = "after"
            time.sleep(max(0.0, ended + plan.settle_s - time.monotonic()))
            other_load = core.foreign() if core else None
        self.children.stop(prober)
        if own:
            self.children.stop(target.child)  # its audit writer flushes on the way out
        rows = _rows_added(rows_before, audit_rows(target.store))
        started = result["started"] if result else launched
        idle_mb = [mb for _, mb, phase in rss.samples if phase == "idle"] or [0.0]
        busy_mb = [mb for _, mb, phase in rss.samples if phase != "idle"] or [0.0]
        after_mb = [mb for _, mb, phase in rss.samples if phase == "after"] or [0.0]
        if result is None:
            log(f"{attack}: the load generator printed no result; its log:\n{load.tail()}")
        return AttackResult(
            attack=attack,
            requests=requests,
            clients=clients,
            outcomes=result["outcomes"] if result else {"no result (load generator)": requests},
            attack_s=result["ended"] - result["started"] if result else None,
            slowest_s=result["slowest_s"] if result else None,
            received_mb=result["received_mb"] if result else None,
            idle=read_probes(prober.log, idle_from + 0.2, launched),
            during=read_probes(prober.log, started, ended + plan.settle_s),
            rss_before_mb=idle_mb[-1],
            rss_peak_mb=max(busy_mb),
            rss_after_mb=after_mb[-1],
            audit_rows=rows,
            other_load=other_load,
        )

    def close(self) -> None:
        self.children.close()


# --- the report --------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def _s(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


def markdown(results: Sequence[AttackResult], meta: dict[str, Any]) -> str:
    lines = [
        f"Tenant stall, `{meta['service_root']}` ({meta['code']}); {meta['cores']}; "
        f"{meta['cpus']} CPUs; floods of {meta['flood_mb']:g} MB; RSS after = "
        f"{meta['settle_s']:g} s after the last answer; /healthz every 10 ms from the first "
        "request to then; "
        + (
            "one service for every attack, in this order."
            if meta["shared_service"]
            else "a fresh service for each attack."
        ),
        "",
        "| attack | requests (clients) | answers | attack s | slowest s | /healthz worst ms "
        "| /healthz p99 ms | probes > 1 s | RSS before MB | RSS peak MB | RSS after MB "
        "| audit rows | other load on its core |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        answers = "; ".join(f"{n} x {outcome}" for outcome, n in sorted(r.outcomes.items()))
        if r.received_mb is not None and r.attack in _FLOODS:
            answers += f" ({r.received_mb:,.1f} MB received)"
        rows = (
            "—"
            if r.audit_rows is None
            else (
                ", ".join(f"{status} {n}" for status, n in sorted(r.audit_rows.items())) or "none"
            )
        )
        slow = f"{r.during.over_1s}" + (f" ({r.during.failed} failed)" if r.during.failed else "")
        lines.append(
            f"| {r.attack} | {r.requests} ({r.clients}) | {answers} | {_s(r.attack_s)} "
            f"| {_s(r.slowest_s)} | {_ms(r.during.worst_ms)} | {_ms(r.during.p99_ms)} "
            f"| {slow} | {r.rss_before_mb:,.0f} | {r.rss_peak_mb:,.0f} "
            f"| {r.rss_after_mb:,.0f} | {rows} | {_share(r.other_load)} |"
        )
    idle_worst = [r.idle.worst_ms for r in results if r.idle.worst_ms is not None]
    idle_p99 = [r.idle.p99_ms for r in results if r.idle.p99_ms is not None]
    if idle_worst and idle_p99:
        lines += [
            "",
            f"Idle /healthz ({meta['idle_s']:g} s before each attack): worst "
            f"{min(idle_worst):.1f} to {max(idle_worst):.1f} ms, p99 "
            f"{min(idle_p99):.1f} to {max(idle_p99):.1f} ms.",
        ]
    lines += ["", "Bodies:"]
    lines += [f"- `{attack}`: {text}" for attack, text in meta["bodies"].items()]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.tenant_stall", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--quick",
        action="store_true",
        help="4 requests per variables attack, 64 MB floods, 0.5 s idle, 2 s settle, one service.",
    )
    parser.add_argument(
        "--service-root", type=Path, default=BENCH_ROOT, help="The checkout whose app/ is served."
    )
    parser.add_argument("--attack", action="append", choices=ATTACKS, help="Repeatable.")
    parser.add_argument("--requests", type=int, help="Per variables attack (20; quick 4).")
    parser.add_argument("--clients", type=int, default=8, help="Concurrent senders (8).")
    parser.add_argument("--flood-mb", type=float, help="The provider's answer (300; quick 64).")
    parser.add_argument("--flood-clients", type=int, default=1, help="Floods at once (1).")
    parser.add_argument("--idle", type=float, help="Seconds probed before (1; quick 0.5).")
    parser.add_argument("--settle", type=float, help="Seconds after, for RSS (5; quick 2).")
    parser.add_argument(
        "--shared-service",
        action="store_true",
        help="One service for every attack (quick), not a fresh one each: faster, but each "
        "attack starts from what the last one left.",
    )
    parser.add_argument("--service-log-level", default="WARNING")
    parser.add_argument(
        "--service-env", action="append", default=[], metavar="NAME=VALUE", help="Repeatable."
    )
    parser.add_argument("--start-timeout", type=float, default=60.0)
    parser.add_argument("--no-pin", action="store_true", help="Do not pin server and load.")
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    parser.add_argument("--keep", action="store_true", help="Keep the temp dir and its logs.")
    args = parser.parse_args(argv)
    args.requests = args.requests or (4 if args.quick else 20)
    args.flood_mb = args.flood_mb or (64.0 if args.quick else 300.0)
    args.idle = args.idle if args.idle is not None else (0.5 if args.quick else 1.0)
    args.settle = args.settle if args.settle is not None else (2.0 if args.quick else 5.0)
    args.shared_service = args.shared_service or args.quick
    args.service_root = args.service_root.resolve()
    if not (args.service_root / "app").is_dir() or not (args.service_root / "patterns").is_dir():
        parser.error(f"{args.service_root} has no app/ and patterns/")
    if bad := [item for item in args.service_env if "=" not in item]:
        parser.error(f"--service-env takes NAME=VALUE, not {bad[0]!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_probe"]:
        probe_main(int(argv[1]))
        return 0
    if argv[:1] == ["_load"]:
        load_main()
        return 0
    args = parse_args(argv)
    # A stopped harness stops what it started: SIGTERM unwinds through the `finally` below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work_dir = Path(tempfile.mkdtemp(prefix="genai-bench-tenant-stall-"))
    run = Run(args, work_dir)
    keep = bool(args.keep)
    try:
        code = run.start()
        log(f"service: {args.service_root} ({code}); {run.cores.describe()}")
        results = []
        shared = run.service("service") if args.shared_service else None
        for attack in args.attack or ATTACKS:
            log(f"{attack} …")
            results.append(run.attack(attack, shared))
            r = results[-1]
            log(
                f"  {r.outcomes}; /healthz worst {_ms(r.during.worst_ms)} ms; RSS "
                f"{r.rss_before_mb:.0f} → {r.rss_peak_mb:.0f} → {r.rss_after_mb:.0f} MB"
            )
        meta = {
            "service_root": str(args.service_root),
            "code": code,
            "cores": run.cores.describe(),
            "cpus": run.cpus,
            "flood_mb": args.flood_mb,
            "idle_s": args.idle,
            "settle_s": args.settle,
            "shared_service": args.shared_service,
            "bodies": {a: describe_body(a) for a in args.attack or ATTACKS},
        }
        print(markdown(results, meta), flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            figures = {"meta": meta, "attacks": [asdict(r) for r in results]}
            args.json.write_text(json.dumps(figures, indent=2))
        return 0
    except BenchError as exc:
        keep = True
        log(f"bench failed: {exc}")
        return 1
    finally:
        run.close()
        if keep:
            log(f"logs in {work_dir}")
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(work_dir)


if __name__ == "__main__":
    sys.exit(main())
