"""GET /v1/audit/status (admin): the chain's head and unlinked records, the writer's queue, the
last checkpoint, and the counters read back from the service's own metrics (issue 21)."""

from __future__ import annotations

from app.config import AuditSettings
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app, settings_for

PROMPT = {
    "pattern_key": "summarize",
    "variables": {"max_words": 10},
    "user_prompt": "Mail ada@example.com or grace@example.org about it.",
}


async def test_the_status_counts_redactions_and_shows_the_chain_and_its_checkpoint(
    fake: FakeProviderServer,
) -> None:
    settings = settings_for(fake, audit=AuditSettings(chain_seconds=60.0))
    async with running_app(settings) as (app, admin):
        assert (await admin.post("/v1/completions", json=PROMPT)).status_code == 200
        await app.state.runtime.writer.catch_up()
        before = (await admin.get("/v1/audit/status")).json()
        await app.state.runtime.chainer.run_once(wait=True)
        await app.state.runtime.chainer.checkpoint("manual")
        after = (await admin.get("/v1/audit/status")).json()
        made = await admin.post("/v1/keys", json={"scope": "complete", "name": "c"})
        caller = {"Authorization": f"Bearer {made.json()['key']}"}
        refused = await admin.get("/v1/audit/status", headers=caller)
    # The chainer's loop waits a minute here: the job and the key event wait unlinked.
    assert before["chain_enabled"] and before["unchained"] >= 1
    assert before["writer_backlog"] == 0 and before["writer_stuck"] is False
    assert after["unchained"] == 0 and after["head_seq"] >= before["unchained"]
    checkpoint = after["last_checkpoint"]
    assert checkpoint["reason"] == "manual" and checkpoint["seq"] == after["head_seq"]
    # Two distinct e-mail addresses in one record: counted once each.
    assert after["counters"]["redactions"] == {"EMAIL": 2}
    assert after["counters"]["template_fallbacks"] == 0
    assert refused.status_code == 403


async def test_with_the_chain_off_the_status_still_answers(fake: FakeProviderServer) -> None:
    settings = settings_for(fake, audit=AuditSettings(chain_enabled=False))
    async with running_app(settings) as (_, admin):
        resp = await admin.get("/v1/audit/status")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["chain_enabled"] is False and body["head_seq"] is None
    assert body["unchained"] is None and body["last_checkpoint"] is None
    assert body["counters"] == {"template_fallbacks": 0, "drift_detections": {}, "redactions": {}}
