"""What the hostile templates of issue 16 (class 6, growth before the size check) cost a process.

    .venv/bin/python -m bench.template_growth                      # this tree's app/
    .venv/bin/python -m bench.template_growth --app-root DIR       # another tree's (a worktree)
    .venv/bin/python -m bench.template_growth --case tojson-indent # one template (repeatable)

Each template is checked in a fresh subprocess exactly as creating a database template checks
it (`check_new_template`: compile, then a trial render) on a `TemplateRenderer` with the default
budget (2 s, 1,000,000 characters) and one worker. Reported per template: the answer, how long
the caller waited for it, how long the render thread stayed busy (until a trivial job got the
pool's only thread back: a long C call outlives the deadline), and the child's RSS before the
check and its peak during it (Linux: VmHWM, reset through /proc/self/clear_refs first). Each
child is capped at `--cap-gb` of address space (RLIMIT_AS), so a runaway fails with MemoryError
("rendering ran out of memory") instead of taking the machine; `--timeout` kills one that hangs.
Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench._common import REPO_ROOT

_HEX_INTS = "{% set x = ('f' * 999999)|int(base=16) %}{% set y = ('f' * 500000)|int(base=16) %}"
_DEEP = (
    "{% set ns = namespace(x='a ' * 400000) %}{% for i in range(80) %}{% set ns.x = [ns.x] %}"
    "{% endfor %}"
)
_SHARED = "{% set a = 'a' * 99999 %}{% set b = [a, a, a, a, a, a, a, a] %}"
_TABLE = "{% set w = 'b' * 1000 %}{% set t = [" + ", ".join(["w"] * 98) + "] %}"
_EIGHT_LOCALS = "".join(f"{{% set s{i} = 'x' * 999999 %}}" for i in range(8))

# name -> template body; at the default budget each would build about a gigabyte (or, the
# integer ones, hold the thread in one long C call) if computed before its size check.
CASES: dict[str, str] = {
    "benign": "Hello {{ 'world'|upper }}, {{ '{0}-{0}'.format('ab') }} {{ '%(a)s' % {'a': 1} }}",
    "str-format-repeated-field": "{{ ('{0}' * 1000).format('x' * 999999) }}",
    "format-map-repeated-field": "{{ ('{a}' * 1000).format_map({'a': 'x' * 999999}) }}",
    "str-format-repr-field": _SHARED + "{{ ('{0!r}' * 1000).format(b) }}",
    "percent-repeated-key": "{{ ('%(a)s' * 10000) % {'a': 'x' * 99999} }}",
    "format-filter-repeated-key": "{{ ('%(a)s' * 10000)|format(a='x' * 99999) }}",
    "bytes-percent-width": "{{ '%0999999999d'.encode() % 1 }}",
    "int-to-bytes": "{{ (1).to_bytes(10**9, 'big')|length }}",
    "translate-by-list": _TABLE + "{{ ('a' * 999999).translate(t)|length }}",
    "namespace-repeated": "{% set ns = namespace(a='x' * 999999) %}{{ [ns] * 1000 }}",
    "tojson-indent": "{{ 1|tojson(indent=10**9) }}",
    "join-filter-attribute": "{{ range(100000)|join('x' * 999999, attribute='real') }}",
    "map-then-list": "{{ range(1000)|map('center', 999999)|list|length }}",
    "folded-while-compiling": "{{ 'a'|center(999999) }}" * 300,
    "pprint-deep-string": _DEEP + "{{ ns.x|pprint|length }}",
    "slice-many-fillers": "{{ [1]|slice(999999, 0)|list|length }}",
    "list-of-characters": "{{ ('\u4e00' * 999999)|list|length }}",
    "urlencode-emoji": "{{ ('\U0001f600' * 999999)|urlencode|length }}",
    "floor-division-huge-ints": _HEX_INTS + "{{ (x // y) is number }}",
    "divisibleby-huge-ints": _HEX_INTS + "{{ x is divisibleby(y) }}",
    "round-to-huge-precision": "{{ 12345|round(-3000000) }}",
    # Each value within the limit, kept all at once: the render's allowance.
    "many-sets": "".join(f"{{% set s{i} = 'x' * 999999 %}}" for i in range(1000)),
    "recursive-macro-locals": (
        "{% macro m(n) %}" + _EIGHT_LOCALS + "{{ m(n + 1) }}{% endmacro %}{{ m(0) }}"
    ),
}

# Run in the child, with the measured tree's `app` first on sys.path.
_CHILD = r"""
import asyncio, json, logging, resource, sys, time
cap, body = int(sys.argv[1]), sys.argv[2]
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
from app.catalog.renderer import TemplateRenderer
from app.catalog.templates import check_new_template
from app.errors import RenderTimeout


def status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_peak() -> None:
    try:  # Linux: "5" resets the high-water mark (VmHWM) to the current RSS
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        pass


async def main() -> None:
    renderer = TemplateRenderer(timeout_seconds=2.0, max_chars=1_000_000, workers=1)
    await renderer.run("warm-up", lambda: None)
    reset_peak()
    before = status_mb("VmRSS")
    started = time.perf_counter()
    try:
        await check_new_template(renderer, "growth", body, [])
        answer, message = "accepted", ""
    except Exception as exc:
        answer = getattr(exc, "error_type", type(exc).__name__)
        message = str(exc)
    answered = time.perf_counter() - started
    while True:  # the pool's one thread is free again once a trivial job runs
        try:
            await renderer.run("probe", lambda: None)
            break
        except RenderTimeout:
            continue
    busy = time.perf_counter() - started
    peak = status_mb("VmHWM")
    renderer.close()
    print("RESULT " + json.dumps({"answer": answer, "message": message, "answered_s": answered,
                                  "busy_s": busy, "rss_before_mb": before, "peak_mb": peak}))


asyncio.run(main())
"""


@dataclass(frozen=True)
class Outcome:
    case: str
    answer: str
    message: str
    answered_s: float | None
    busy_s: float | None
    rss_before_mb: float | None
    peak_mb: float | None


def run_case(case: str, body: str, *, app_root: Path, cap_bytes: int, timeout: float) -> Outcome:
    env = {**os.environ, "PYTHONPATH": str(app_root)}
    env = {k: v for k, v in env.items() if not k.startswith("GENAI_")}
    command = [sys.executable, "-c", _CHILD, str(cap_bytes), body]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, cwd=app_root, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        waited = time.perf_counter() - started
        return Outcome(case, f"killed after {waited:.0f} s", "", None, None, None, None)
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if not results:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Outcome(case, f"exit {done.returncode}", tail, None, None, None, None)
    found = json.loads(results[-1].removeprefix("RESULT "))
    return Outcome(case=case, **found)


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _mb(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def markdown(outcomes: list[Outcome], app_root: Path) -> str:
    lines = [
        f"Template growth, `{app_root}` (2 s, 1,000,000-character budget, one render thread):",
        "",
        "| template | answer | answered s | thread busy s | RSS before MB | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for o in outcomes:
        answer = o.answer + (" (out of memory)" if "out of memory" in o.message else "")
        lines.append(
            f"| {o.case} | {answer} | {_seconds(o.answered_s)} | {_seconds(o.busy_s)} "
            f"| {_mb(o.rss_before_mb)} | {_mb(o.peak_mb)} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--app-root", type=Path, default=REPO_ROOT, help="the tree to measure")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="repeatable")
    parser.add_argument("--cap-gb", type=float, default=4.0, help="address space per child")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per child")
    parser.add_argument("--json", action="store_true", help="one JSON object per template")
    options = parser.parse_args()
    app_root = options.app_root.resolve()
    cap_bytes = int(options.cap_gb * 2**30)
    outcomes = []
    for case in options.case or list(CASES):
        outcome = run_case(
            case, CASES[case], app_root=app_root, cap_bytes=cap_bytes, timeout=options.timeout
        )
        if options.json:
            print(json.dumps(outcome.__dict__), flush=True)
        else:
            print(f"{case}: {outcome.answer}", file=sys.stderr, flush=True)
        outcomes.append(outcome)
    if not options.json:
        print(markdown(outcomes, app_root))


if __name__ == "__main__":
    main()
