"""The retention round the service runs in the background: partitions ahead, then the policy.

Every replica runs it; that is safe because partition changes take an advisory lock and the
batched deletes only ever remove rows another replica would remove too.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt

import structlog

from app.audit.events import SERVICE, Actor, AdminEvents
from app.config import RetentionSettings
from app.errors import GenAIError
from app.store.retention import JobPruner, PruneReport

log = structlog.get_logger(__name__)


def cutoff_for(days: int, *, now: dt.datetime | None = None) -> dt.datetime:
    """The moment before which finished jobs go, `days` ago (0: now, so every finished job)."""
    return (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=days)


async def prune_recorded(
    pruner: JobPruner,
    events: AdminEvents,
    actor: Actor,
    cutoff: dt.datetime,
    *,
    dry_run: bool = False,
    vacuum: bool = False,
) -> PruneReport:
    """A prune, recorded in the admin event log as `retention.pruned` (a dry run changes
    nothing, so it records nothing): the one way the CLI and the policy prune."""
    report = await pruner.prune(cutoff, dry_run=dry_run, vacuum=vacuum)
    if not dry_run:
        await events.record(
            actor, "retention.pruned", target="jobs", detail=report.model_dump(mode="json")
        )
    return report


async def retention_round(
    pruner: JobPruner, events: AdminEvents, settings: RetentionSettings
) -> PruneReport | None:
    """One round: this month's and the next months' partitions, then the prune if one is set.
    A store that is down is logged and waited out: the next round tries again."""
    try:
        await pruner.partitions.ensure(now=dt.datetime.now(dt.UTC), ahead=settings.partitions_ahead)
        if settings.jobs_days is None:
            return None
        return await prune_recorded(pruner, events, SERVICE, cutoff_for(settings.jobs_days))
    except GenAIError as exc:
        log.warning("retention_round_failed", error_type=exc.error_type, error=str(exc))
        return None
    except Exception:  # e.g. the proof keeper's own failure: logged, and the loop lives on
        log.exception("retention_round_failed")
        return None


async def keep_retention(
    pruner: JobPruner, events: AdminEvents, settings: RetentionSettings, stop: asyncio.Event
) -> None:
    """A round at start, then one every interval until `stop` (never cancelled mid-round)."""
    while not stop.is_set():
        await retention_round(pruner, events, settings)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), settings.interval_seconds)
