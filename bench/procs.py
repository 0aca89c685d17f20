"""Child processes for the harness: start pinned, wait until they answer, sample RSS, always stop.

Every child gets its own session (process group) and its output goes to a log file (a pipe
could fill up and stall it). `Children.close()` stops every group it started, by id, with
SIGTERM and then SIGKILL, so an interrupted run leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class BenchError(RuntimeError):
    """A run cannot go on: a process did not start, a port is busy, requests failed."""


@dataclass(frozen=True)
class Cores:
    """Where things run: the server under test on one core, everything else on another."""

    server: frozenset[int] | None
    load: frozenset[int] | None

    @classmethod
    def plan(cls, pin: bool) -> Cores:
        allowed = sorted(os.sched_getaffinity(0))
        if not pin or len(allowed) < 2:
            return cls(None, None)
        return cls(frozenset({allowed[0]}), frozenset({allowed[1]}))

    def describe(self) -> str:
        if self.server is None or self.load is None:
            return "not pinned (fewer than 2 usable cores, or --no-pin)"
        return f"server on core {min(self.server)}, load generator + upstream on {min(self.load)}"


def free_port() -> int:
    """A loopback port nobody listens on right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, lines: int = 25) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise BenchError(f"{self.name} exited with status {code}; its log:\n{self.tail()}")


@dataclass
class Children:
    """Every process the harness started, stopped in reverse order by `close()`."""

    log_dir: Path
    started: list[Child] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cores: frozenset[int] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        log = self.log_dir / f"{name}.log"
        out = log.open("ab")
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
                # Set before exec, so every thread the child ever starts inherits the core.
                preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
            )
        finally:
            out.close()
        child = Child(name, process, log)
        self.started.append(child)
        return child

    def stop(self, child: Child, timeout: float = 10.0) -> None:
        if child.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGTERM)
            try:
                child.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.process.wait(5)
        # Workers or helpers the child left in its group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        if child in self.started:
            self.started.remove(child)

    def close(self) -> None:
        for child in reversed(list(self.started)):
            self.stop(child)


def wait_for_line(child: Child, prefix: str, timeout: float) -> str:
    """The first line of the child's log starting with `prefix` (e.g. the upstream's PORT)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        child.check_alive()
        for line in child.log.read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        time.sleep(0.02)
    raise BenchError(f"{child.name} did not print {prefix!r} within {timeout:.0f} s")


def http_status(port: int, path: str, timeout: float = 2.0) -> int | None:
    """GET status of 127.0.0.1:port/path, or None when nothing answers yet."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def http_post(
    port: int, path: str, body: bytes, headers: Mapping[str, str], timeout: float = 30.0
) -> tuple[int, bytes]:
    """One POST, for smoke checks and for showing the body of a failing request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", path, body=body, headers=dict(headers))
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def wait_until_ok(child: Child, port: int, path: str, timeout: float) -> float:
    """Seconds until GET path answers 200; BenchError (with the child's log) otherwise."""
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    last: int | None = None
    while time.monotonic() < deadline:
        child.check_alive()
        last = http_status(port, path, timeout=1.0)
        if last == 200:
            return time.perf_counter() - started
        time.sleep(0.01)
    raise BenchError(
        f"{child.name}: GET {path} did not answer 200 within {timeout:.0f} s "
        f"(last status {last}); its log:\n{child.tail()}"
    )


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                children = Path(f"/proc/{current}/task/{task}/children").read_text().split()
                todo.extend(int(c) for c in children)
    return found


def rss_mb(pid: int) -> float:
    """VmRSS of the process and all its descendants (uvicorn workers), in MB."""
    total_kb = 0
    for member in _descendants(pid):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
                    break
    return total_kb / 1024


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _core_busy_s(core: int) -> float | None:
    """Seconds core `core` was busy since boot, steal included (the hypervisor ran another guest
    while this one wanted the core); None when /proc/stat cannot be read."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith(f"cpu{core} "):
                ticks = [int(v) for v in line.split()[1:9]]
                user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
                return (user + nice + system + irq + softirq + steal) * _TICK_S
    return None


def _tree_cpu_s(pid: int) -> float:
    """User + system seconds of the process and its descendants so far."""
    total = 0
    for member in _descendants(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total * _TICK_S


@dataclass(frozen=True)
class CoreShare:
    """A mark from which to measure what else ran on a pinned server's core."""

    pid: int
    core: int
    at: float
    busy_s: float
    own_s: float

    @classmethod
    def mark(cls, pid: int) -> CoreShare | None:
        """None unless the process is pinned to exactly one core whose time can be read."""
        with contextlib.suppress(OSError):
            cores = os.sched_getaffinity(pid)
            if len(cores) == 1 and (busy := _core_busy_s(min(cores))) is not None:
                return cls(pid, min(cores), time.monotonic(), busy, _tree_cpu_s(pid))
        return None

    def foreign(self) -> float | None:
        """The share of the core's time since the mark used by anything but the server (other
        processes, interrupts, steal): a neighbour that makes this phase's figures worse."""
        busy = _core_busy_s(self.core)
        wall = time.monotonic() - self.at
        if busy is None or wall <= 0:
            return None
        own = _tree_cpu_s(self.pid) - self.own_s
        return max(0.0, min(1.0, (busy - self.busy_s - own) / wall))


class RssSampler:
    """Samples a process tree's RSS every `interval` seconds in a thread; marks phases."""

    def __init__(self, pid: int, interval: float = 0.5) -> None:
        self._pid = pid
        self._interval = interval
        self._stop = threading.Event()
        self.samples: list[tuple[float, float, str]] = []  # (monotonic s, MB, phase)
        self.phase = "start"
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), rss_mb(self._pid), self.phase))
            self._stop.wait(self._interval)

    @property
    def peak_mb(self) -> float:
        return max((mb for _, mb, _ in self.samples), default=0.0)

    def slope_mb_per_min(self, phase: str) -> float | None:
        """Least-squares slope of RSS over the samples of one phase, in MB per minute."""
        points = [(t, mb) for t, mb, p in self.samples if p == phase]
        if len(points) < 3:
            return None
        n = len(points)
        mean_t = sum(t for t, _ in points) / n
        mean_mb = sum(mb for _, mb in points) / n
        var = sum((t - mean_t) ** 2 for t, _ in points)
        if var == 0:
            return None
        cov = sum((t - mean_t) * (mb - mean_mb) for t, mb in points)
        return cov / var * 60
