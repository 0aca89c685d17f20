"""Issue 20's three parts together, through the running service on SQLite and PostgreSQL: admin
actions are chained beside the jobs, a prune signs its checkpoint first and is itself logged,
and what remains verifies, the pruned records reported as pruned, not as tampered."""

from __future__ import annotations

from sqlalchemy import text

from app.audit.events import CLI
from app.audit.retention import cutoff_for, prune_recorded
from tests.fakes.provider_server import FakeProviderServer
from tests.support import running_app
from tests.test_audit_chain_http import RENDER, _chained, _settings


async def test_a_prune_leaves_a_chain_that_verifies_and_admin_actions_are_chained(
    fake: FakeProviderServer, database_url: str
) -> None:
    async with running_app(_settings(fake, database_url)) as (app, admin):
        runtime = app.state.runtime
        for _ in range(3):
            assert (await admin.post("/v1/completions", json=RENDER)).status_code == 200
        made = await admin.post("/v1/keys", json={"scope": "complete", "name": "reader"})
        assert made.status_code == 201, made.text
        await _chained(app)
        before = await runtime.chain.verify(1, None)
        [created] = (await admin.get("/v1/audit/events?action=key.created")).json()["events"]

        report = await prune_recorded(runtime.pruner, runtime.admin_events, CLI, cutoff_for(0))
        await _chained(app)  # the retention.pruned event joins the chain too
        after = await runtime.chain.verify(1, None)
        checkpoints = await runtime.database.engine.connect()
        try:
            reasons = (
                await checkpoints.scalars(text("SELECT reason FROM audit_checkpoints ORDER BY seq"))
            ).all()
        finally:
            await checkpoints.close()
        pruned = (await admin.get("/v1/audit/events?action=retention.pruned")).json()["events"]

        # An admin action edited behind the service's back is found like an edited job.
        async with runtime.database.engine.begin() as connection:
            await connection.execute(
                text("UPDATE audit_events SET target = 'key:0000000000000000' WHERE id = :id"),
                {"id": created["id"]},
            )
        tampered = await runtime.chain.verify(1, None)

    assert before.ok and before.entries_checked == 4  # three jobs and the key's creation
    assert report.jobs_pruned == 3 and not report.dry_run
    assert "prune" in reasons
    assert [event["actor"] for event in pruned] == ["cli"]
    assert pruned[0]["detail"]["jobs_pruned"] == 3
    assert after.ok, after.problem
    assert after.pruned == 3 and after.entries_checked == 5  # + the retention.pruned event
    assert tampered.problem is not None
    assert (tampered.problem.kind, tampered.problem.ref) == ("edited", created["id"])
