"""The store the console benchmark reads: a year of jobs plus teams, keys, templates, snippets.

Built once per (job count, migration head) and cached as an SQLite file under bench/data/
(git-ignored): a million jobs take a few minutes to write and to link into the audit chain, so a
re-run copies the file instead. PostgreSQL has no cache: a scratch database is built each time.

The small things (teams, keys, template versions, snippets) are made through the service's own
/v1 API, so they are what an admin would have made and leave their admin events; the jobs are
written in bulk (bench/console_rows.py), then `genai audit checkpoint` links them all into the
audit chain, so the service measured later starts with nothing to catch up on.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from app.store.db import Database
from app.store.partitions import JobPartitions
from bench import catalog
from bench._common import quiet_logs
from bench.console_rows import SPAN, Sources, fill_postgres, fill_sqlite, job_rows
from bench.procs import Children, Cores
from bench.targets import genai, service_env, start_service, store_url

BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / "data" / "console"
VERSIONS = BENCH_DIR.parent / "app" / "store" / "migrations" / "versions"
FILL_VERSION = 3  # bump when what is filled changes, so old caches are not reused
PATTERNS = 40
TEAMS = ("billing", "search", "support", "growth", "legal")
KEYS = 40
TEMPLATES = 10
SNIPPETS = 30


@dataclass(frozen=True)
class Store:
    """A built store and the real names in it that page paths need."""

    admin_key: str
    jobs: int
    patterns: list[str]
    templates: list[tuple[str, str]]
    snippets: list[str]
    keys: list[tuple[str, str | None]]
    build_s: float

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> Store:
        raw = json.loads(path.read_text())
        raw["templates"] = [tuple(t) for t in raw["templates"]]
        raw["keys"] = [tuple(k) for k in raw["keys"]]
        return cls(**raw)


def migration_head() -> str:
    return max(p.stem.split("_", 1)[0] for p in VERSIONS.glob("[0-9]*.py"))


def cache_name(jobs: int) -> str:
    return f"jobs{jobs}-m{migration_head()}-f{FILL_VERSION}"


def write_patterns(root: Path) -> list[str]:
    """The catalog the service serves; the pattern names, benchmarked one first."""
    catalog.write_catalog(root, PATTERNS)
    names = sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.md"))
    names.remove(catalog.PATTERN_NAME)
    return [catalog.PATTERN_NAME, *names]


def _populate(
    base_url: str, admin_key: str
) -> tuple[list[tuple[str, str]], list[str], list[tuple[str, str | None]]]:
    """Teams, keys, template versions and snippets through /v1, as an admin would make them."""
    headers = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:

        def post(path: str, body: dict[str, object]) -> dict[str, object]:
            answer = client.post(path, json=body)
            answer.raise_for_status()
            result: dict[str, object] = answer.json()
            return result

        for name in TEAMS:
            post("/v1/teams", {"name": name, "budget_usd": 500, "budget_window": "month"})
        keys: list[tuple[str, str | None]] = []
        for n in range(KEYS):
            team = TEAMS[n % len(TEAMS)] if n % 8 else None
            body: dict[str, object] = {"scope": "complete", "name": f"app {n:02d}", "rpm": 600}
            if team:
                body["team"] = team
            if n % 3 == 0:
                body.update(budget_usd=50 + n, budget_window="day")
            keys.append((str(post("/v1/keys", body)["id"]), team))
        templates = []
        for n in range(TEMPLATES):
            name, role = f"reply-{n:02d}", ("writer", "reviewer")[n % 2]
            for version in range(1, 4):
                text = (
                    f"Answer as {{{{ brand }}}} support in {{{{ language }}}} (v{version}).\n" * 5
                )
                post(
                    "/v1/templates",
                    {
                        "name": name,
                        "role": role,
                        "template": text,
                        "variables": ["brand", "language"],
                        "activate": version == 2,
                    },
                )
            templates.append((name, role))
        snippets = []
        for n in range(SNIPPETS):
            identifier = f"tone-{n:02d}"
            post(
                "/v1/snippets",
                {
                    "identifier": identifier,
                    "name": f"Tone {n}",
                    "description": "A register for answers.",
                    "text": "Write plainly, in short sentences, without jargon. " * 4,
                    "tags": ["tone", ("formal", "casual", "legal")[n % 3]],
                    "metadata": {"owner": TEAMS[n % len(TEAMS)], "reviewed": n % 2 == 0},
                },
            )
            snippets.append(identifier)
    return templates, snippets, keys


async def _add_partitions(url: str, now: dt.datetime) -> None:
    """The year's month partitions, as a service running all year would have made them."""
    quiet_logs()  # the app's info lines would land in the middle of the bench's output
    database = Database(url)
    try:
        await JobPartitions(database.engine).ensure(now=now - SPAN, ahead=13)
    finally:
        await database.aclose()


def _since(started: float) -> str:
    return f"{time.perf_counter() - started:.1f} s"


def build(
    root: Path,
    jobs: int,
    *,
    children: Children,
    cores: Cores,
    database_url: str | None,
    log: Callable[[str], None],
) -> Store:
    """Migrate, populate through /v1, fill the jobs, link the chain; root holds data/ and the
    SQLite file when database_url is None."""
    started = time.perf_counter()
    patterns = write_patterns(root / "patterns")
    env = service_env(
        upstream_url="http://127.0.0.1:9",  # no page calls a provider
        pattern_dir=root / "patterns",
        data_dir=root / "data",
        database_url=database_url,
        log_level="WARNING",
        extra={},
    )
    if database_url:
        genai(["db", "upgrade"], env, root)
    out = genai(["keys", "create", "--scope", "admin", "--name", "console bench"], env, root)
    admin_key = out.strip().splitlines()[-1].strip()
    server = start_service(
        children,
        cores.server,
        name="console-build",
        env=env,
        cwd=root,
        key=admin_key,
        workers=1,
        timeout=60,
    )
    try:
        templates, snippets, keys = _populate(f"http://127.0.0.1:{server.port}", admin_key)
    finally:
        children.stop(server.child)
    log(f"  teams, keys, templates and snippets made through /v1 in {_since(started)}")
    now = dt.datetime.now(dt.UTC)
    rows = job_rows(jobs, now, Sources(patterns, templates, keys, snippets))
    filled = time.perf_counter()
    url = store_url(env)
    if database_url:
        asyncio.run(_add_partitions(url, now))
        asyncio.run(fill_postgres(url, rows))
    else:
        fill_sqlite(Path(url.split(":///", 1)[1]), rows)
    log(f"  {jobs:,} jobs written in {_since(filled)}")
    linked = time.perf_counter()
    # Linked in big steps: the service's small default steps keep requests moving, but a
    # million records bulk-loaded behind its back would take them an hour (50,000 commits).
    genai(["audit", "checkpoint"], {**env, "GENAI_AUDIT__CHAIN_BATCH": "5000"}, root, timeout=3600)
    log(f"  audit chain linked and signed in {_since(linked)}")
    build_s = round(time.perf_counter() - started, 1)
    return Store(admin_key, jobs, patterns, templates, snippets, keys, build_s)


def cached_sqlite(
    work: Path,
    jobs: int,
    *,
    children: Children,
    cores: Cores,
    rebuild: bool,
    log: Callable[[str], None],
) -> tuple[Store, Path]:
    """A copy of the cached store in work/ (built first when missing); (store, data dir)."""
    cached = CACHE_DIR / cache_name(jobs)
    if rebuild or not (cached / "store.json").exists():
        log(f"building the console store ({jobs:,} jobs) in {cached}")
        fresh = cached.with_name(cached.name + ".building")
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(parents=True)
        store = build(fresh, jobs, children=children, cores=cores, database_url=None, log=log)
        store.save(fresh / "store.json")
        shutil.rmtree(cached, ignore_errors=True)
        fresh.rename(cached)  # only a finished build is ever reused
    else:
        log(f"reusing the console store in {cached}")
    shutil.copytree(cached / "data", work / "data")
    return Store.load(cached / "store.json"), work / "data"
