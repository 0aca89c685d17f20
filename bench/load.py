"""Drive a server with wrk (or, without it, bench.pyload in its own process) and read the figures.

Both tools print one line, `LOADJSON {...}`, with the same fields, so the harness treats them
alike. wrk's figures come from its own latency histogram, read in a Lua `done` hook.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.procs import BenchError

_WRK_SCRIPT = """\
local f = assert(io.open(%(body_path)s, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
%(headers)s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'LOADJSON {"requests": %%d, "seconds": %%.6f, "http_errors": %%d, "socket_errors": %%d, ' ..
    '"p50_ms": %%.4f, "p90_ms": %%.4f, "p99_ms": %%.4f, "max_ms": %%.4f, "mean_ms": %%.4f}\\n',
    summary.requests, summary.duration / 1e6, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3, latency:percentile(99) / 1e3,
    latency.max / 1e3, latency.mean / 1e3))
end
"""


@dataclass(frozen=True)
class LoadResult:
    """One closed-loop run at a fixed concurrency."""

    tool: str
    concurrency: int
    requests: int
    seconds: float
    http_errors: int  # responses with status >= 400
    socket_errors: int  # connect, read, write errors and timeouts
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    # The share of the server's core used by anything else during the run (bench.procs.CoreShare).
    foreign_cpu: float | None = None

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def failures(self) -> int:
        return self.http_errors + self.socket_errors

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "rps": round(self.rps, 1)}


def wrk_path() -> str | None:
    return shutil.which("wrk")


def tool_name(use_wrk: bool) -> str:
    if use_wrk:
        version = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout
        return version.splitlines()[0].split(" Copyright")[0] if version else "wrk"
    return "bench.pyload (Python asyncio, own process)"


def _lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string literal is a valid Lua string literal here


def _parse(output: str, tool: str, concurrency: int) -> LoadResult:
    for line in output.splitlines():
        if line.startswith("LOADJSON "):
            fields = json.loads(line[len("LOADJSON ") :])
            return LoadResult(tool=tool, concurrency=concurrency, **fields)
    raise BenchError(f"{tool} printed no figures:\n{output[-2000:]}")


def run_load(
    *,
    port: int,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    concurrency: int,
    seconds: float,
    work_dir: Path,
    cores: frozenset[int] | None,
    use_wrk: bool,
) -> LoadResult:
    """A closed loop of `concurrency` keep-alive connections POSTing `body` for `seconds`."""
    body_path = work_dir / "body.json"
    body_path.write_bytes(body)
    url = f"http://127.0.0.1:{port}{path}"
    duration = max(1, round(seconds))
    if use_wrk:
        header_lines = "\n".join(
            f"wrk.headers[{_lua_string(k)}] = {_lua_string(v)}" for k, v in headers.items()
        )
        script = work_dir / "post.lua"
        script.write_text(
            _WRK_SCRIPT % {"body_path": _lua_string(str(body_path)), "headers": header_lines}
        )
        argv = [
            "wrk",
            "-t1",
            f"-c{concurrency}",
            f"-d{duration}s",
            "--timeout",
            "10s",
            "--latency",
            "-s",
            str(script),
            url,
        ]
        tool = "wrk"
    else:
        argv = [
            sys.executable,
            "-m",
            "bench.pyload",
            "--port",
            str(port),
            "--path",
            path,
            "--body-file",
            str(body_path),
            "-c",
            str(concurrency),
            "-d",
            str(duration),
        ]
        for key, value in headers.items():
            argv += ["--header", f"{key}: {value}"]
        tool = "pyload"
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=duration + 60,
            preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"{tool} did not finish within {duration + 60} s") from exc
    if done.returncode != 0:
        raise BenchError(f"{tool} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return _parse(done.stdout, tool, concurrency)
