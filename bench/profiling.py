"""py-spy on the measured service: a speedscope profile per run and a text summary of hot spots.

The summary aggregates the recorded stacks three ways: by stage of the request (the innermost
stage a sample's stack is in, in microseconds per request: the floor each stage sets), self time
by leaf function (where the CPU actually was) and cumulative time by function (every frame on the
stack), the latter also restricted to the project's own code so the expensive paths through app/
stand out.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.procs import BenchError

PROJECT_MARKERS = ("/app/", "/bench/")
# Project files are shown relative to the repository (or to an exported copy run from elsewhere).
_ROOT = str(Path(__file__).resolve().parent.parent) + "/"


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise BenchError("py-spy is not installed: .venv/bin/pip install -e '.[dev]'")
    return found


def start_recording(pid: int, output: Path, seconds: float, rate: int) -> subprocess.Popen[bytes]:
    """py-spy record in the background (non-blocking: the service is never paused)."""
    argv = [
        py_spy(),
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        str(rate),
        "--format",
        "speedscope",
        "--nonblocking",
        "--output",
        str(output),
    ]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish_recording(process: subprocess.Popen[bytes], timeout: float) -> None:
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        process.kill()
        raise BenchError("py-spy did not finish in time") from exc
    if process.returncode != 0:
        raise BenchError(f"py-spy failed ({process.returncode}): {err.decode(errors='replace')}")


def _frame_label(frame: dict[str, object]) -> str:
    file = str(frame.get("file", ""))
    for marker in ("site-packages/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    else:
        file = file.split(_ROOT, 1)[-1]
    return f"{frame.get('name', '?')} ({file})"


# (stage, markers): a sample belongs to the innermost frame of its stack that holds a marker
# (checked from the root down, so a later match wins); the baseline's frames fall in the same
# stages as the service's (its SDK call is a provider call, its route a route).
STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HTTP server and framework", ("(uvicorn/", "(starlette/", "(fastapi/", "(anyio/")),
    ("request context: log line, metrics", ("(app/middleware/request_context.py)",)),
    ("middleware: shed, body limit", ("(app/middleware/shedding.py)", "(app/middleware/body_")),
    ("auth", ("(app/middleware/auth.py)", "(app/auth/")),
    ("route: body, door, response", ("(app/api/", "(bench/baseline.py)")),
    ("pipeline bookkeeping", ("(app/service/", "(app/pipeline/upstream", "(app/pipeline/calls")),
    ("prepare: render, assemble, choose", ("(app/pipeline/prepare", "(app/catalog/", "(app/pro")),
    ("cache", ("(app/cache/",)),
    ("audit records: build, redact, write", ("(app/audit/", "(app/store/", "(aiosqlite/")),
    ("provider call: SDK and HTTP", ("(app/providers/", "(openai/", "(httpx", "(httpcore/")),
    ("logging and metrics libraries", ("(structlog/", "(prometheus_client/")),
)
IDLE_LOOP = "event loop's own C code (poll, transports)"


def _stage(labels: list[str]) -> str:
    found = "other"
    for label in labels:
        for stage, markers in STAGES:
            if any(marker in label for marker in markers):
                found = stage
                break
    if found == "other" and labels and labels[-1].startswith("Runner.run "):
        return IDLE_LOOP
    return found


def summarise(profile_path: Path, title: str, top: int = 25, requests: float = 0) -> str:
    """Stages, then top functions by self and by cumulative share of the samples, as plain
    text; with the number of `requests` served while recording, each stage's µs per request."""
    data = json.loads(profile_path.read_text())
    frames = data["shared"]["frames"]
    labels = [_frame_label(frame) for frame in frames]
    own: Counter[str] = Counter()
    loop_own: Counter[str] = Counter()  # the event loop's thread, where request work runs
    cumulative: Counter[str] = Counter()
    stages: Counter[str] = Counter()
    total = 0.0
    threads: Counter[str] = Counter()
    for profile in data["profiles"]:
        threads[profile["name"].split('"')[1] if '"' in profile["name"] else profile["name"]] += (
            sum(profile["weights"])
        )
        main = "MainThread" in profile["name"]
        for stack, weight in zip(profile["samples"], profile["weights"], strict=True):
            if not stack:
                continue
            total += weight
            stages[_stage([labels[i] for i in stack])] += weight
            own[labels[stack[-1]]] += weight
            if main:
                loop_own[labels[stack[-1]]] += weight
            for label in {labels[i] for i in stack}:
                cumulative[label] += weight
    if not total:
        return f"{title}\nno samples (was the process busy?)\n"
    project = Counter(
        {k: v for k, v in cumulative.items() if any(m in k for m in ("(app/", "(bench/"))}
    )

    def table(counter: Counter[str]) -> list[str]:
        # Frames on (nearly) every stack, such as the CLI and server entry chain, say nothing.
        ceiling = 0.98 * max(counter.values(), default=0.0)
        leaves = counter is own or counter is loop_own
        rows = [(k, v) for k, v in counter.most_common() if leaves or v < ceiling]
        return [f"{v / total * 100:6.1f}%  {k}" for k, v in rows[:top]]

    busy = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in threads.most_common(6))
    lines = [
        title,
        f"{total:.2f} s of non-idle thread time sampled ({busy}). A runnable thread waiting",
        "for a busy core counts as non-idle; with uvloop, time in the loop's C code (polling,",
        "transports) shows as self time of Runner.run.",
        "",
    ]
    per_request = f"{'µs per request':>15}" if requests else ""
    lines += [f"By stage (innermost stage on the stack, all threads):  share{per_request}"]
    for stage, seconds in stages.most_common():
        cost = f"{seconds / requests * 1e6:15.0f}" if requests else ""
        lines.append(f"  {stage:<48} {seconds / total * 100:5.1f}%{cost}")
    if requests:
        lines.append(f"  {'all':<48} 100.0%{total / requests * 1e6:15.0f}")
    lines += [""]
    lines += [f"Top {top} by self time (leaf frame, all threads):", *table(own), ""]
    lines += [f"Top {top} by self time on the event loop's thread:", *table(loop_own), ""]
    lines += [f"Top {top} by cumulative time (on the stack):", *table(cumulative), ""]
    lines += [f"Top {top} project functions by cumulative time:", *table(project), ""]
    return "\n".join(lines)
