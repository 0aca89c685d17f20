"""The audit chain's tables: appending links under one chainer at a time, checkpoints, and the
reads `genai audit verify` walks (app/audit/chain.py).

Single file without a global lock on the hot path: requests never touch the chain. Finished
records wait with `chain_seq` null (a partial index holds only those) until a chainer links them.
Every replica runs one; on PostgreSQL a chainer step holds a transaction-scoped advisory lock
that only chainers take, so steps of two replicas run one after the other and each reads the
head the previous one wrote. SQLite has one writer already. Either way the primary key on `seq`
refuses a second entry for one place, so even a lost lock costs a retried step, never a fork.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, Select, Table, bindparam, func, insert, select, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.store.db import store_seam
from app.store.tables import AuditChainEntry, AuditCheckpoint, AuditEvent, Job
from app.tracking.chain import (
    CHAIN_COLUMN,
    GENESIS,
    checkpoint_claims,
    content_sha256,
    entry_sha256,
)
from app.tracking.signing import ALG, Signer

# pg_advisory_xact_lock key of the chainer ("genaicha"): taken by chainers only, never requests.
CHAIN_LOCK_KEY = 0x67656E6169636861


# How long a background chainer step on SQLite waits for the write lock before skipping a round.
QUICK_BUSY_MS = 20


@dataclass(frozen=True, slots=True)
class ChainSource:
    """A table whose finished rows the chain covers. Adding one (the admin events) is one more
    `ChainSource` in `CHAIN_SOURCES`; its table needs a nullable `chain_seq` and a string-able
    primary key named `id`."""

    kind: str
    table: Table
    order_by: str  # when the record became final: the chain links records in this order
    record_at: str  # when it was created: what a prune's cut-off is compared against
    finished: ColumnElement[bool] | None = None  # rows still changing are left for later
    # The partial index of the rows not linked yet. SQLite is told to use it: with statistics
    # that misjudge it (a bulk load, a sampled ANALYZE) it scanned and sorted all of `jobs` for
    # every batch, linking 3 records a second on a million jobs instead of thousands.
    index: str = ""

    def unlinked(self, query: Select[Any]) -> Select[Any]:
        """`query` over this source's unlinked rows, through their partial index."""
        hinted = query.where(*self.unchained())
        if self.index:
            hinted = hinted.with_hint(self.table, f"INDEXED BY {self.index}", "sqlite")
        return hinted

    def unchained(self) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = [self.table.c[CHAIN_COLUMN].is_(None)]
        return conditions if self.finished is None else [*conditions, self.finished]


JOB_SOURCE = ChainSource(
    kind="job",
    table=Job.__table__,  # type: ignore[arg-type]
    order_by="completed_at",
    record_at="created_at",
    finished=Job.status != "pending",
    index="ix_jobs_unchained",
)
EVENT_SOURCE = ChainSource(  # admin actions: final when written
    kind="event",
    table=AuditEvent.__table__,  # type: ignore[arg-type]
    order_by="at",
    record_at="at",
    index="ix_audit_events_unchained",
)
CHAIN_SOURCES: tuple[ChainSource, ...] = (JOB_SOURCE, EVENT_SOURCE)


@dataclass(frozen=True, slots=True)
class Head:
    seq: int
    sha256: str


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    kind: str
    ref: str
    record_at: dt.datetime
    content_sha256: str
    prev_sha256: str
    entry_sha256: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    seq: int
    head_sha256: str
    signed_at: dt.datetime
    reason: str
    detail: dict[str, Any]
    kid: str | None
    alg: str | None
    signature: str | None

    def claims(self) -> bytes:
        return checkpoint_claims(
            seq=self.seq,
            head_sha256=self.head_sha256,
            signed_at=self.signed_at,
            reason=self.reason,
            detail=self.detail,
            kid=self.kid or "",
            alg=self.alg or "",
        )


@dataclass(frozen=True, slots=True)
class CheckpointPolicy:
    """When the chainer signs the head: after this many entries or seconds, whichever first."""

    every_entries: int
    every_seconds: float

    def due(self, head: Head, last: Checkpoint | None, now: dt.datetime) -> bool:
        if head.seq == 0 or (last is not None and last.seq >= head.seq):
            return False
        if last is None:
            return True
        late = (now - last.signed_at).total_seconds() >= self.every_seconds
        return head.seq - last.seq >= self.every_entries or late


@dataclass(frozen=True, slots=True)
class Appended:
    entries: int
    checkpoint: Checkpoint | None = None
    skipped: bool = False  # another replica's chainer held the lock


@dataclass(slots=True)
class _Pending:
    order: tuple[Any, ...]
    source: ChainSource
    row: Mapping[str, Any] = field(repr=False)


def _content_hashes(records: Sequence[_Pending]) -> list[str]:
    return [content_sha256(record.row) for record in records]


class ChainRepository:
    """Appends to the chain and reads it back; SQLite and PostgreSQL differ only in the lock."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        postgres: bool,
        sources: Sequence[ChainSource] = CHAIN_SOURCES,
    ) -> None:
        self._sessions = sessions
        self._postgres = postgres
        self.sources = {source.kind: source for source in sources}

    async def _lock(self, session: AsyncSession, *, wait: bool) -> bool:
        if not self._postgres:
            return True
        if wait:
            await session.execute(select(func.pg_advisory_xact_lock(CHAIN_LOCK_KEY)))
            return True
        taken = await session.execute(select(func.pg_try_advisory_xact_lock(CHAIN_LOCK_KEY)))
        return bool(taken.scalar_one())

    @staticmethod
    async def _head(session: AsyncSession) -> Head:
        query = select(AuditChainEntry.seq, AuditChainEntry.entry_sha256)
        row = (await session.execute(query.order_by(AuditChainEntry.seq.desc()).limit(1))).first()
        return Head(seq=row[0], sha256=row[1]) if row else Head(seq=0, sha256=GENESIS)

    async def _unchained(self, session: AsyncSession, limit: int) -> list[_Pending]:
        """The oldest unlinked finished records of every source, merged into one order."""
        pending: list[_Pending] = []
        for source in self.sources.values():
            table = source.table
            query = (
                source.unlinked(select(table))
                .order_by(table.c[source.order_by], table.c.id)
                .limit(limit)
            )
            for row in (await session.execute(query)).mappings():
                # A finished row without its moment (written by hand) sorts by its creation.
                moment = row[source.order_by] or row[source.record_at]
                order = (moment, source.kind, str(row["id"]))
                pending.append(_Pending(order=order, source=source, row=dict(row)))
        pending.sort(key=lambda item: item.order)
        return pending[:limit]

    @store_seam
    async def append(
        self,
        *,
        limit: int,
        policy: CheckpointPolicy | None = None,
        signer: Signer | None = None,
        wait: bool = False,
    ) -> Appended:
        """One chainer step in one transaction: up to `limit` records linked after the head,
        and a checkpoint when `policy` says one is due. `wait=False` skips the step while
        another replica's chainer holds the lock (it is linking the same records), and on
        SQLite when the write lock stays taken for QUICK_BUSY_MS: a background step waits no
        longer, because waiting holds the pool's one connection that requests read through
        (the service's own busy timeout is 0.5 s; a request's write takes a few ms)."""
        quick = not self._postgres and not wait
        async with self._sessions() as session:
            busy_ms = None
            try:
                async with session.begin():
                    if quick:
                        busy_ms = int(await session.scalar(text("PRAGMA busy_timeout")) or 0)
                        await session.execute(text(f"PRAGMA busy_timeout = {QUICK_BUSY_MS}"))
                    return await self._step(session, limit, policy, signer, wait=wait)
            except OperationalError as exc:
                if quick and "locked" in str(exc.orig):
                    return Appended(entries=0, skipped=True)
                raise
            finally:
                if busy_ms is not None:  # back to the pool with the service's own timeout
                    await session.execute(text(f"PRAGMA busy_timeout = {busy_ms}"))

    async def _step(
        self,
        session: AsyncSession,
        limit: int,
        policy: CheckpointPolicy | None,
        signer: Signer | None,
        *,
        wait: bool,
    ) -> Appended:
        if not await self._lock(session, wait=wait):
            return Appended(entries=0, skipped=True)
        head = await self._head(session)
        records = await self._unchained(session, limit)
        # The records' canonical JSON and hashes are most of a step's CPU: in a thread, so
        # requests keep the event loop meanwhile (the step's reads took no write lock).
        contents = await asyncio.to_thread(_content_hashes, records)
        now = dt.datetime.now(dt.UTC)
        entries: list[dict[str, Any]] = []
        links: dict[str, list[dict[str, Any]]] = {}
        for record, content in zip(records, contents, strict=True):
            source, row = record.source, record.row
            seq, ref = head.seq + 1, str(row["id"])
            entry = {
                "seq": seq,
                "kind": source.kind,
                "ref": ref,
                "record_at": row[source.record_at],
                "content_sha256": content,
                "prev_sha256": head.sha256,
            }
            digest = entry_sha256(
                seq=seq,
                kind=source.kind,
                ref=ref,
                record_at=entry["record_at"],
                content=entry["content_sha256"],
                prev=head.sha256,
            )
            entries.append({**entry, "entry_sha256": digest, "chained_at": now})
            links.setdefault(source.kind, []).append({"ref_": row["id"], "seq_": seq})
            head = Head(seq=seq, sha256=digest)
        if entries:
            await session.execute(insert(AuditChainEntry), entries)
        for kind, rows in links.items():
            table = self.sources[kind].table
            link = (
                update(table)
                .where(table.c.id == bindparam("ref_"))
                .values({CHAIN_COLUMN: bindparam("seq_")})
            )
            await session.execute(link, rows)
        checkpoint = None
        if policy is not None and policy.due(head, await self._last(session), now):
            checkpoint = await self._checkpoint(session, head, "periodic", {}, signer, now)
        return Appended(entries=len(entries), checkpoint=checkpoint)

    @store_seam
    async def checkpoint(
        self, reason: str, detail: Mapping[str, Any], signer: Signer | None
    ) -> Checkpoint:
        """A checkpoint of the head now (a prune's, a shutdown's, an operator's), under the
        chainer's lock so no step moves the head meanwhile."""
        async with self._sessions() as session, session.begin():
            await self._lock(session, wait=True)
            head = await self._head(session)
            now = dt.datetime.now(dt.UTC)
            return await self._checkpoint(session, head, reason, detail, signer, now)

    @staticmethod
    async def _checkpoint(
        session: AsyncSession,
        head: Head,
        reason: str,
        detail: Mapping[str, Any],
        signer: Signer | None,
        now: dt.datetime,
    ) -> Checkpoint:
        unsigned = Checkpoint(
            seq=head.seq,
            head_sha256=head.sha256,
            signed_at=now,
            reason=reason,
            detail=dict(detail),
            kid=signer.kid if signer else None,
            alg=ALG if signer else None,
            signature=None,
        )
        signature = signer.sign_bytes(unsigned.claims()) if signer else None
        checkpoint = Checkpoint(**{**_fields(unsigned), "signature": signature})
        await session.execute(insert(AuditCheckpoint), [_fields(checkpoint)])
        return checkpoint

    @staticmethod
    async def _last(session: AsyncSession) -> Checkpoint | None:
        query = select(AuditCheckpoint).order_by(AuditCheckpoint.id.desc()).limit(1)
        row = (await session.execute(query)).scalars().first()
        return _checkpoint_of(row) if row else None

    # The reads verify walks.

    @store_seam
    async def head(self) -> Head:
        async with self._sessions() as session:
            return await self._head(session)

    @store_seam
    async def checkpoints(self) -> list[Checkpoint]:
        """All of them, oldest first (a few a day: one per checkpoint interval at most)."""
        async with self._sessions() as session:
            query = select(AuditCheckpoint).order_by(AuditCheckpoint.id)
            return [_checkpoint_of(row) for row in (await session.execute(query)).scalars()]

    @store_seam
    async def entries(self, *, after: int, until: int, limit: int) -> list[Entry]:
        """Entries with after < seq <= until, in seq order, at most `limit`."""
        table = AuditChainEntry
        query = (
            select(table)
            .where(table.seq > after, table.seq <= until)
            .order_by(table.seq)
            .limit(limit)
        )
        async with self._sessions() as session:
            return [_entry_of(row) for row in (await session.execute(query)).scalars()]

    @store_seam
    async def seq_of(self, entry_sha256: str) -> int | None:
        """Where an entry hash sits now (a swapped entry is found later than it should be)."""
        query = select(AuditChainEntry.seq).where(AuditChainEntry.entry_sha256 == entry_sha256)
        async with self._sessions() as session:
            return (await session.execute(query.limit(1))).scalar_one_or_none()

    @store_seam
    async def records(self, kind: str, refs: Sequence[str]) -> dict[str, Mapping[str, Any]]:
        """The referenced rows of one source as stored, by id (missing ones are absent)."""
        table = self.sources[kind].table
        as_key = table.c.id.type.python_type  # refs are text; an integer id compares as one
        async with self._sessions() as session:
            rows = await session.execute(select(table).where(table.c.id.in_(map(as_key, refs))))
            return {str(row["id"]): dict(row) for row in rows.mappings()}

    @store_seam
    async def linked(self, kind: str, *, after: int, until: int) -> list[tuple[int, str]]:
        """(chain_seq, id) of the rows of one source that claim a place in (after, until]."""
        table = self.sources[kind].table
        seq = table.c[CHAIN_COLUMN]
        query = select(seq, table.c.id).where(seq > after, seq <= until).order_by(seq)
        async with self._sessions() as session:
            return [(int(row[0]), str(row[1])) for row in await session.execute(query)]

    @store_seam
    async def last_checkpoint(self) -> Checkpoint | None:
        """The newest checkpoint: what a cut tail would be measured against."""
        async with self._sessions() as session:
            return await self._last(session)

    @store_seam
    async def unchained_count(self) -> int:
        """Finished records not linked yet, every source (the chainer's backlog); the partial
        index on `chain_seq IS NULL` keeps this to the few rows waiting."""
        total = 0
        async with self._sessions() as session:
            for source in self.sources.values():
                query = source.unlinked(select(func.count()).select_from(source.table))
                total += int((await session.execute(query)).scalar_one())
        return total

    @store_seam
    async def unchained_before(self, kind: str, moment: dt.datetime) -> str | None:
        """A finished record that should have been linked by `moment` and was not: inserted
        behind the service's back (or the chainer stopped)."""
        source = self.sources[kind]
        table = source.table
        query = (
            source.unlinked(select(table.c.id))
            .where(table.c[source.order_by] < moment)
            .order_by(table.c[source.order_by])
            .limit(1)
        )
        async with self._sessions() as session:
            found = (await session.execute(query)).scalar_one_or_none()
        return None if found is None else str(found)


def _fields(checkpoint: Checkpoint) -> dict[str, Any]:
    return {name: getattr(checkpoint, name) for name in Checkpoint.__slots__}


def _checkpoint_of(row: AuditCheckpoint) -> Checkpoint:
    return Checkpoint(
        seq=row.seq,
        head_sha256=row.head_sha256,
        signed_at=row.signed_at,
        reason=row.reason,
        detail=dict(row.detail or {}),
        kid=row.kid,
        alg=row.alg,
        signature=row.signature,
    )


def _entry_of(row: AuditChainEntry) -> Entry:
    return Entry(
        seq=row.seq,
        kind=row.kind,
        ref=row.ref,
        record_at=row.record_at,
        content_sha256=row.content_sha256,
        prev_sha256=row.prev_sha256,
        entry_sha256=row.entry_sha256,
    )
