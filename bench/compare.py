"""`python -m bench.compare REV`: this tree against another commit, back to back, interleaved.

    python -m bench.compare main~1                       # completions and chat, c=1/16/32, SQLite
    python -m bench.compare 43abad6 --route messages --backend postgres --rounds 5

The regression guard every change to a request path runs before it lands (issue 32: a round made
the hot path 30% slower and no run compared it with the commit before). Both sides run the same
way — `genai serve` on one core, wrk and the upstream on the other, a fresh process and store per
side and round — and alternate A B B A … so drift (a warming machine, another process) falls on
both. The other commit is checked out in a temporary worktree and served by this venv with that
worktree first on PYTHONPATH (the editable install's finder comes after it), so no second venv is
built; a dependency the other commit needs and this venv lacks fails its start, loudly.

It prints, per route and concurrency, each side's median p50, p99 and requests per second over the
rounds and the ratio this/other; it asserts nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import catalog
from bench.load import LoadResult, run_load, wrk_path
from bench.procs import BenchError, Children, Cores
from bench.routes import ROUTES, Route
from bench.stores import store_for
from bench.targets import prepare_store, service_env, start_service, start_upstream

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Side:
    """One commit under test: where its code is, and what it measured."""

    label: str
    code: Path
    runs: dict[tuple[str, int], list[LoadResult]] = field(default_factory=dict)


@contextlib.contextmanager
def checked_out(rev: str) -> Iterator[tuple[str, Path]]:
    """A detached worktree of `rev` (its short hash and path), removed afterwards."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = Path(tempfile.mkdtemp(prefix=f"bench-{sha}-"))
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", "--force", str(path), sha],
        capture_output=True,
        check=True,
    )
    try:
        yield sha, path
    finally:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)],
            capture_output=True,
        )


def measure_side(
    side: Side,
    *,
    routes: list[Route],
    backend: str,
    upstream: str,
    children: Children,
    cores: Cores,
    work: Path,
    args: argparse.Namespace,
) -> None:
    """One fresh store, key and `genai serve` per route; each concurrency in turn."""
    root = Path(tempfile.mkdtemp(prefix=f"{side.label}-", dir=work))
    catalog.write_catalog(root / "patterns", 10)
    with store_for(backend) as database_url:
        env = service_env(
            upstream_url=upstream,
            pattern_dir=root / "patterns",
            data_dir=root / "data",
            database_url=database_url,
            log_level="INFO",
            extra={"PYTHONPATH": str(side.code)},
        )
        key = prepare_store(env, root)
        for route in routes:
            server = start_service(
                children,
                cores.server,
                name=f"{side.label}-{route.key}",
                env=env,
                cwd=root,
                key=key,
                workers=1,
                timeout=60,
                route=route,
            )
            try:
                for concurrency in [args.warmup_concurrency, *args.concurrency]:
                    result = run_load(
                        port=server.port,
                        path=route.path,
                        body=route.body,
                        headers=server.headers,
                        concurrency=concurrency,
                        seconds=args.warmup
                        if concurrency == args.warmup_concurrency
                        else args.seconds,
                        work_dir=root,
                        cores=cores.load,
                        use_wrk=wrk_path() is not None,
                    )
                    if result.failures:
                        raise BenchError(
                            f"{side.label} {route.key} c={concurrency}: {result.failures} failed "
                            f"requests (see {children.log_dir})"
                        )
                    side.runs.setdefault((route.key, concurrency), []).append(result)
            finally:
                children.stop(server.child)


def _median(results: list[LoadResult], metric: str) -> float:
    return float(statistics.median(float(getattr(r, metric)) for r in results))


def table(base: Side, head: Side, routes: list[Route], concurrency: list[int]) -> str:
    lines = [
        f"| route | c | p50 ms {base.label} | p50 ms {head.label} | ratio | "
        f"p99 ms {base.label} | p99 ms {head.label} | ratio | rps {base.label} | "
        f"rps {head.label} | ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for route in routes:
        for c in concurrency:
            a, b = base.runs.get((route.key, c)), head.runs.get((route.key, c))
            if not a or not b:
                continue
            cells = [route.key, str(c)]
            for metric in ("p50_ms", "p99_ms", "rps"):
                x, y = _median(a, metric), _median(b, metric)
                fmt = "{:.0f}" if metric == "rps" else "{:.2f}"
                cells += [fmt.format(x), fmt.format(y), f"{y / x:.2f}" if x else "—"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("rev", help="the other commit (a branch, tag or hash)")
    parser.add_argument(
        "--route", action="append", choices=list(ROUTES), help="default: completions, chat"
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8.0, help="per concurrency level")
    parser.add_argument("--concurrency", type=int, action="append", help="default: 1, 16, 32")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--warmup-concurrency", type=int, default=4)
    args = parser.parse_args(argv)
    args.concurrency = args.concurrency or [1, 16, 32]
    args.route = args.route or ["completions", "chat"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    routes = [ROUTES[key] for key in args.route]
    cores = Cores.plan(pin=True)
    with (
        tempfile.TemporaryDirectory(prefix="bench-compare-") as tmp,
        checked_out(args.rev) as (
            sha,
            path,
        ),
    ):
        work = Path(tmp)
        children = Children(work)
        base, head = Side(sha, path), Side("this", REPO)
        try:
            upstream = start_upstream(children, cores.load, latency_ms=0.0)
            for round_number in range(args.rounds):
                order = (base, head) if round_number % 2 == 0 else (head, base)
                for side in order:
                    print(f"round {round_number + 1}/{args.rounds}: {side.label}", flush=True)
                    measure_side(
                        side,
                        routes=routes,
                        backend=args.backend,
                        upstream=upstream,
                        children=children,
                        cores=cores,
                        work=work,
                        args=args,
                    )
        except BenchError as exc:
            print(f"bench.compare: {exc}", file=sys.stderr)
            return 1
        finally:
            children.close()
        print(
            f"\n{head.label} (working tree) against {sha}, {args.backend}, {args.rounds} rounds of "
            f"{args.seconds:g} s, medians; {cores.describe()}\n"
        )
        print(table(base, head, routes, args.concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
