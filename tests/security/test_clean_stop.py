"""A real SIGTERM to `genai serve` with completions in flight, on SQLite and PostgreSQL: every
caller gets its answer and no audit record is left pending."""

from __future__ import annotations

import asyncio
import signal

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.fakes.provider_server import FakeProviderServer, Reply
from tests.security.conftest import Serve

IN_FLIGHT = 10
REQUEST = {"pattern_key": "summarize", "variables": {}, "user_prompt": "a short text"}


async def _statuses(database_url: str) -> list[str]:
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            return [row.status for row in await conn.execute(text("SELECT status FROM jobs"))]
    finally:
        await engine.dispose()


async def test_sigterm_with_completions_in_flight_answers_every_caller_and_records_each(
    fake: FakeProviderServer, database_url: str, serve: Serve
) -> None:
    fake.script("openai", *[Reply.delay(1.5)] * IN_FLIGHT)
    with serve(
        GENAI_DEFAULT_MODEL="openai/gpt-4o-mini",
        GENAI_SHUTDOWN_GRACE_SECONDS="30",
        GENAI_AUTH_DISABLED="1",  # this test is about stopping, not about keys
    ) as service:
        async with service.client() as http:
            calls = [
                asyncio.create_task(http.post("/v1/completions", json=REQUEST))
                for _ in range(IN_FLIGHT)
            ]
            for _ in range(600):  # until every request has reached the provider
                if len(fake.calls("openai")) == IN_FLIGHT:
                    break
                await asyncio.sleep(0.02)
            assert len(fake.calls("openai")) == IN_FLIGHT, service.log()
            service.process.send_signal(signal.SIGTERM)
            responses = await asyncio.gather(*calls)
        exit_code = await asyncio.to_thread(service.process.wait, 60)
    assert [r.status_code for r in responses] == [200] * IN_FLIGHT, service.log()
    # uvicorn re-raises the signal once its shutdown is complete, so -SIGTERM is a clean exit.
    assert exit_code in (0, -signal.SIGTERM), service.log()
    assert '"service_stopped"' in service.log()
    assert sorted(await _statuses(database_url)) == ["completed"] * IN_FLIGHT
