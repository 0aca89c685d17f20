"""JobPruner: retention of the audit trail that keeps the proof (issue 20).

Only finished jobs older than the cut-off go (a pending one is still being written). First the
proof: `ProofKeeper.before_prune` chains what is still unchained and signs a checkpoint naming
the cut-off, so `genai audit verify` reports the range as pruned, not as tampered. Then, on
PostgreSQL, whole month partitions older than the cut-off are detached and dropped (no DELETE,
no bloat); what remains (the boundary month, DEFAULT, SQLite's single table) is deleted in
bounded batches, each its own short transaction so the audit writer is never held up long. On
SQLite the freed pages are then returned with `PRAGMA incremental_vacuum`, in steps.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any, Literal, Protocol

import structlog
from pydantic import BaseModel, ConfigDict, computed_field
from sqlalchemy import ColumnElement, delete, func, select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import InstrumentedAttribute

from app.store.db import store_seam
from app.store.partitions import JobPartitions
from app.store.tables import Job, WebhookDelivery

log = structlog.get_logger(__name__)

DEFAULT_BATCH_SIZE = 5000
# Pages returned per incremental_vacuum step (4 KiB each: 8 MiB), one short write each.
_VACUUM_PAGES_PER_STEP = 2000
# Deliveries no dispatcher will attempt again (a `failed` one is only retried by hand).
_SETTLED_DELIVERIES = ("delivered", "failed")

Vacuum = Literal["incremental", "converted", "off", "not_applicable"]


class ProofKeeper(Protocol):
    """The audit chain's part in a prune (wired by the runtime; None until the chain exists)."""

    async def before_prune(self, cutoff: dt.datetime) -> None:
        """Chain every finished record still unchained, then write a signed checkpoint with
        detail {"pruned_before": cutoff}; raises if it cannot, and then nothing is pruned."""
        ...


class PruneReport(BaseModel):
    """What one prune removed (or, dry, would remove), as `genai jobs prune --json` prints it."""

    model_config = ConfigDict(frozen=True)

    backend: Literal["sqlite", "postgresql"]
    cutoff: dt.datetime
    dry_run: bool
    jobs_deleted: int
    partitions_dropped: list[str]
    jobs_in_dropped_partitions: int
    webhook_deliveries_deleted: int
    vacuum: Vacuum
    seconds: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def jobs_pruned(self) -> int:
        return self.jobs_deleted + self.jobs_in_dropped_partitions


def _old_finished_jobs(cutoff: dt.datetime) -> tuple[ColumnElement[bool], ...]:
    return (Job.created_at < cutoff, Job.status != "pending")


def _old_settled_deliveries(cutoff: dt.datetime) -> tuple[ColumnElement[bool], ...]:
    return (
        WebhookDelivery.created_at < cutoff,
        WebhookDelivery.status.in_(_SETTLED_DELIVERIES),
    )


class JobPruner:
    """Prunes `jobs` (and settled webhook deliveries) older than a cut-off, proof first."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        proof: ProofKeeper | None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        self._engine = engine
        self._proof = proof
        self._batch_size = batch_size
        self.partitions = JobPartitions(engine)
        self._sqlite = engine.dialect.name == "sqlite"

    @store_seam
    async def prune(
        self, cutoff: dt.datetime, *, dry_run: bool = False, vacuum: bool = False
    ) -> PruneReport:
        """Everything finished before `cutoff` goes; `vacuum` (SQLite) converts a database
        made without incremental auto-vacuum, once, with a full VACUUM."""
        started = time.perf_counter()
        droppable = await self.partitions.droppable(cutoff)
        if dry_run:
            in_droppable = await self.partitions.rows_in(droppable)
            jobs = await self._count(Job, _old_finished_jobs(cutoff)) - in_droppable
            deliveries = await self._count(WebhookDelivery, _old_settled_deliveries(cutoff))
            return self._report(
                cutoff, True, jobs, droppable, in_droppable, deliveries, "not_applicable", started
            )
        if self._proof is not None:  # the seam to the audit chain: its one call site
            await self._proof.before_prune(cutoff)
        dropped: list[str] = []
        in_dropped = 0
        for name in droppable:
            if (rows := await self.partitions.drop(name, cutoff)) is not None:
                dropped.append(name)
                in_dropped += rows
        jobs = await self._delete_in_batches(Job, Job.id, _old_finished_jobs(cutoff))
        deliveries = await self._delete_in_batches(
            WebhookDelivery, WebhookDelivery.id, _old_settled_deliveries(cutoff)
        )
        mode = await self._vacuum(convert=vacuum) if self._sqlite else "not_applicable"
        report = self._report(cutoff, False, jobs, dropped, in_dropped, deliveries, mode, started)
        log.info("jobs_pruned", **report.model_dump(mode="json"))
        return report

    def _report(
        self,
        cutoff: dt.datetime,
        dry_run: bool,
        jobs: int,
        dropped: list[str],
        in_dropped: int,
        deliveries: int,
        vacuum: Vacuum,
        started: float,
    ) -> PruneReport:
        return PruneReport(
            backend="sqlite" if self._sqlite else "postgresql",
            cutoff=cutoff,
            dry_run=dry_run,
            jobs_deleted=jobs,
            partitions_dropped=dropped,
            jobs_in_dropped_partitions=in_dropped,
            webhook_deliveries_deleted=deliveries,
            vacuum=vacuum,
            seconds=round(time.perf_counter() - started, 3),
        )

    async def _count(
        self, table: type[Job] | type[WebhookDelivery], where: tuple[ColumnElement[bool], ...]
    ) -> int:
        async with self._engine.connect() as conn:
            return int(
                await conn.scalar(select(func.count()).select_from(table).where(*where)) or 0
            )

    async def _delete_in_batches(
        self,
        table: type[Job] | type[WebhookDelivery],
        key: InstrumentedAttribute[Any],
        where: tuple[ColumnElement[bool], ...],
    ) -> int:
        """Bounded DELETEs, one short transaction each, until a batch comes back short. The
        outer filter repeats the cut-off so PostgreSQL prunes to the old partitions."""
        total = 0
        victims = select(key).where(*where).limit(self._batch_size)
        query = delete(table).where(where[0], key.in_(victims))
        while True:
            async with self._engine.begin() as conn:
                deleted = int((await conn.execute(query)).rowcount or 0)
            total += deleted
            if deleted < self._batch_size:
                return total

    async def _vacuum(self, *, convert: bool) -> Vacuum:
        """Freed pages back to the file system: step by step where the database allows it."""
        async with self._engine.connect() as conn:
            mode = int(await conn.scalar(text("PRAGMA auto_vacuum")) or 0)
        if mode == 2:
            while await self._freelist():
                # executescript steps the pragma to the end; a plain execute frees one page.
                await self._script(f"PRAGMA incremental_vacuum({_VACUUM_PAGES_PER_STEP})")
            return "incremental"
        if not convert:
            return "off"
        await self._script("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")
        return "converted"

    async def _freelist(self) -> int:
        async with self._engine.connect() as conn:
            return int(await conn.scalar(text("PRAGMA freelist_count")) or 0)

    async def _script(self, sql: str) -> None:
        """SQL run by the driver outside any transaction (VACUUM needs that too)."""
        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            await raw.driver_connection.executescript(sql)  # type: ignore[union-attr]
