"""What limit checks add to the hot path (issue 18): the same request with an unlimited key and
with a key that has an rpm, a tpm and a day budget (set high, so nothing is refused), its
counters in the database (SQLite, the embedded default) and in Redis.

    .venv/bin/python -m bench.quotas                # 3 rounds of 8 s per key and concurrency
    .venv/bin/python -m bench.quotas --seconds 4 --rounds 1

Each store gets a fresh `genai serve` (one worker, pinned to the first core) in front of the
bench upstream (its own process, on the second core, with the load generator). Both keys are
measured in turn on the same server, interleaved round by round, so a drift of the machine hits
both alike. A limited request reserves before the call (one counter round trip: a transaction
on the database, one script call on Redis) and settles after the answer in the background.
Reported: median p50 at c=1 and median requests per second at c=32 per key, and their
difference. Figures are reported, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench import catalog
from bench.load import LoadResult, run_load, wrk_path
from bench.procs import BenchError, Children, Cores
from bench.routes import ROUTES
from bench.targets import genai, service_env, start_service, start_upstream

REDIS_URL = "redis://127.0.0.1:6379/0"
LIMITS = ["--rpm", "1000000", "--tpm", "1000000000", "--budget-usd", "1000000"]
LIMITS += ["--budget-window", "day"]


@dataclass
class Figures:
    p50_ms: list[float]
    rps: list[float]

    def add(self, quiet: LoadResult, busy: LoadResult) -> None:
        if quiet.failures or busy.failures:
            raise BenchError(f"requests failed: c=1 {quiet.failures}, c=32 {busy.failures}")
        self.p50_ms.append(quiet.p50_ms)
        self.rps.append(busy.rps)


def _key(env: dict[str, str], cwd: Path, *flags: str) -> str:
    out = genai(["keys", "create", "--scope", "complete", "--name", "bench", *flags], env, cwd)
    return out.strip().splitlines()[-1].strip()


def measure_store(
    children: Children,
    cores: Cores,
    upstream: str,
    work: Path,
    store: str,
    args: argparse.Namespace,
) -> dict[str, Figures]:
    data = work / store
    data.mkdir()
    patterns = data / "patterns"
    catalog.write_catalog(patterns, 10)
    extra = {"GENAI_QUOTAS__STORE": store, "GENAI_AUDIT__MODE": "before-call"}
    if store == "redis":
        extra["GENAI_REDIS_URL"] = REDIS_URL
    env = service_env(
        upstream_url=upstream,
        pattern_dir=patterns,
        data_dir=data,
        database_url=None,
        log_level="warning",
        extra=extra,
    )
    keys = {"unlimited": _key(env, data), "limited": _key(env, data, *LIMITS)}
    server = start_service(
        children,
        cores.server,
        name=f"service-{store}",
        env=env,
        cwd=data,
        key=keys["unlimited"],
        workers=1,
        timeout=60,
    )
    route = ROUTES["completions"]
    figures = {name: Figures([], []) for name in keys}
    try:
        for _ in range(args.rounds):
            for name, key in keys.items():
                headers = {**server.headers, "Authorization": f"Bearer {key}"}
                runs = [
                    run_load(
                        port=server.port,
                        path=route.path,
                        body=route.body,
                        headers=headers,
                        concurrency=concurrency,
                        seconds=args.seconds,
                        work_dir=data,
                        cores=cores.load,
                        use_wrk=wrk_path() is not None,
                    )
                    for concurrency in (1, 32)
                ]
                figures[name].add(*runs)
    finally:
        children.stop(server.child)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quotas", description=__doc__)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    cores = Cores.plan(pin=True)
    with tempfile.TemporaryDirectory(prefix="bench-quotas-") as tmp:
        work = Path(tmp)
        children = Children(log_dir=work)
        try:
            upstream = start_upstream(children, cores.load, latency_ms=0)
            print(f"cores: {cores.describe()}; load: {'wrk' if wrk_path() else 'python'}")
            print("| counters | key | c=1 p50 (ms) | c=32 req/s |")
            print("|---|---|---|---|")
            for store in ("database", "redis"):
                figures = measure_store(children, cores, upstream, work, store, args)
                for name, found in figures.items():
                    p50, rps = statistics.median(found.p50_ms), statistics.median(found.rps)
                    print(f"| {store} | {name} | {p50:.2f} | {rps:.0f} |", flush=True)
                added = statistics.median(figures["limited"].p50_ms) - statistics.median(
                    figures["unlimited"].p50_ms
                )
                ratio = statistics.median(figures["limited"].rps) / statistics.median(
                    figures["unlimited"].rps
                )
                print(f"| {store} | added by limits | {added:+.2f} | {ratio:.2f}x |", flush=True)
        except BenchError as exc:
            print(f"bench failed: {exc}", file=sys.stderr)
            return 1
        finally:
            children.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
