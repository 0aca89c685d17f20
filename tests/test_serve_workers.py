"""`genai serve --workers 2`: whichever worker is scraped, /metrics counts all their requests."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.provider_server import FakeProviderServer
from tests.security.live import live_service, service_env

REQUEST = {"pattern_key": "summarize", "variables": {}, "user_prompt": "a short text"}
BATCH = 16


def _completed(families: Iterable[Metric]) -> float:
    """genai_completions_total{provider="openai",status="completed"} in parsed families."""
    total = 0.0
    for family in families:
        for sample in family.samples:
            if (
                sample.name == "genai_completions_total"
                and sample.labels.get("status") == "completed"
            ):
                total += sample.value
    return total


def _completed_per_worker(shared_dir: Path, scratch: Path) -> Counter[str]:
    """Each worker's own count, read from its own file in the shared directory."""
    counts: Counter[str] = Counter()
    for file in shared_dir.glob("counter_*.db"):
        alone = scratch / file.stem
        alone.mkdir(exist_ok=True)
        shutil.copy(file, alone / file.name)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))  # type: ignore[no-untyped-call]
        counts[file.stem.removeprefix("counter_")] += int(_completed(registry.collect()))
    return +counts


async def _complete_on_fresh_connections(base_url: str, n: int) -> None:
    """New connections, sent together, so the kernel hands them to both workers."""

    async def one() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
            response = await http.post("/v1/completions", json=REQUEST)
            assert response.status_code == 200, response.text

    await asyncio.gather(*(one() for _ in range(n)))


async def _scrape(base_url: str) -> float:
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:  # a fresh connection
        response = await http.get("/metrics")
    assert response.status_code == 200
    return _completed(text_string_to_metric_families(response.text))


async def test_metrics_add_up_across_two_workers(fake: FakeProviderServer, tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = service_env(
        fake,
        tmp_path / "data",
        GENAI_DEFAULT_MODEL="openai/gpt-4o-mini",
        GENAI_AUTH_DISABLED="1",  # this test is about metrics, not about keys
        TMPDIR=str(temp),  # where `serve` makes its private metrics directory
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with live_service(env, tmp_path, "--workers", "2") as service:
        (shared_dir,) = temp.glob("genai-metrics-*")
        assert shared_dir.stat().st_mode & 0o077 == 0, "the directory is private"
        sent = 0
        per_worker: Counter[str] = Counter()
        while len(per_worker) < 2 and sent < 20 * BATCH:
            await _complete_on_fresh_connections(service.base_url, BATCH)
            sent += BATCH
            per_worker = _completed_per_worker(shared_dir, tmp_path)
        assert len(per_worker) == 2, f"one worker served all {sent} requests: {per_worker}"
        assert sum(per_worker.values()) == sent
        # Each scrape lands on either worker; every one of them reports the total.
        scraped = [await _scrape(service.base_url) for _ in range(8)]
        assert scraped == [sent] * 8
        service.stop()
    assert not shared_dir.exists(), "serve removes its metrics directory when it stops"
