"""SnippetRepository: database snippets as immutable versions, at most one live per identifier;
file snippets and composition live in app/snippets."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import SnippetConflict, SnippetNotFound
from app.schemas import SnippetIn
from app.store.db import store_seam
from app.store.tables import SnippetRow
from app.tracking import template_checksum

# An edit that loses a race for the next version number reads the new latest and tries again;
# only after this many lost races does the caller get SnippetConflict (409).
_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class StoredSnippet:
    """One database snippet version as stored; tags and metadata unchecked (the library reads
    them leniently, so one bad row never breaks a listing)."""

    identifier: str
    name: str
    description: str
    text: str
    tags: object  # a list of strings when written here; older rows may hold other shapes
    metadata: object
    active: bool
    version: int
    checksum: str
    live: bool
    created_at: dt.datetime  # when this version was stored


@dataclass(frozen=True, slots=True)
class VersionChange:
    """A version made live, and the version it replaced (None: there was no live one)."""

    snippet: StoredSnippet
    previous_version: int | None


def _record(row: SnippetRow) -> StoredSnippet:
    return StoredSnippet(
        identifier=row.identifier,
        name=row.name,
        description=row.description,
        text=row.text,
        tags=row.tags,
        metadata=row.meta,
        active=row.active,
        version=row.version,
        checksum=row.checksum,
        live=row.live,
        created_at=row.created_at,
    )


def _row(snippet: SnippetIn, *, version: int) -> SnippetRow:
    """A new immutable version holding every field, live."""
    return SnippetRow(
        identifier=snippet.identifier,
        name=snippet.name,
        description=snippet.description,
        text=snippet.text,
        tags=list(snippet.tags),
        meta=dict(snippet.metadata),
        active=snippet.active,
        version=version,
        checksum=template_checksum(snippet.text),
        live=True,
    )


class SnippetRepository:
    """Each method is a `store_seam`: storage failures leave it only as StoreUnavailable."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def find(self, identifiers: Sequence[str] | None = None) -> list[StoredSnippet]:
        """The live versions of the snippets named (all of them when None)."""
        query = select(SnippetRow).where(SnippetRow.live)
        if identifiers is not None:
            query = query.where(SnippetRow.identifier.in_(list(identifiers)))
        async with self._sessions() as session:
            return [_record(row) for row in await session.scalars(query)]

    @store_seam
    async def version(self, identifier: str, version: int) -> StoredSnippet | None:
        """One stored version, live or not (replay reads the version a job used)."""
        async with self._sessions() as session:
            row = await self._version(session, identifier, version)
            return None if row is None else _record(row)

    @store_seam
    async def versions(self, identifier: str) -> list[StoredSnippet]:
        """Every stored version of one identifier, oldest first."""
        query = (
            select(SnippetRow)
            .where(SnippetRow.identifier == identifier)
            .order_by(SnippetRow.version)
        )
        async with self._sessions() as session:
            return [_record(row) for row in await session.scalars(query)]

    @store_seam
    async def add(self, snippet: SnippetIn) -> VersionChange | None:
        """Store a snippet as the next version, live; None when a live one exists already.

        After a delete (no live version) this continues the numbering, so old versions stay
        what the jobs that used them recorded.
        """
        return await self._store(snippet, when_live=False, when_absent=True)

    @store_seam
    async def replace(self, snippet: SnippetIn, *, create: bool) -> VersionChange | None:
        """Store the next version and make it live; with no live version, store it only when
        `create`, else return None."""
        return await self._store(snippet, when_live=True, when_absent=create)

    async def _store(
        self, snippet: SnippetIn, *, when_live: bool, when_absent: bool
    ) -> VersionChange | None:
        for _ in range(_ATTEMPTS):
            try:
                async with self._sessions.begin() as session:
                    await self._lock(session, snippet.identifier)
                    live = await self._live(session, snippet.identifier)
                    if not (when_live if live is not None else when_absent):
                        return None
                    latest = await session.scalar(
                        select(func.max(SnippetRow.version)).where(
                            SnippetRow.identifier == snippet.identifier
                        )
                    )
                    if live is not None:
                        live.live = False
                        await session.flush()
                    row = _row(snippet, version=(latest or 0) + 1)
                    session.add(row)
                    await session.flush()
                    return VersionChange(_record(row), None if live is None else live.version)
            except IntegrityError:
                continue  # another edit took this version number: read the new latest
        raise SnippetConflict(
            f"Snippet {snippet.identifier!r} was changed by other requests at the same time; "
            "send the request again."
        )

    @store_seam
    async def activate(self, identifier: str, version: int) -> VersionChange:
        """Make one stored version live (a rollback or roll-forward), atomically."""
        try:
            async with self._sessions.begin() as session:
                await self._lock(session, identifier)
                row = await self._version(session, identifier, version)
                if row is None:
                    raise SnippetNotFound(
                        identifier,
                        f"Snippet {identifier!r} has no version {version}; "
                        f"GET /v1/snippets/{identifier}/versions lists them.",
                    )
                live = await self._live(session, identifier)
                previous = None if live is None else live.version
                if live is not None and live is not row:
                    live.live = False
                    await session.flush()
                row.live = True
                await session.flush()
                return VersionChange(_record(row), previous)
        except IntegrityError:
            raise SnippetConflict(
                f"Snippet {identifier!r} was activated concurrently; send the request again."
            ) from None

    @store_seam
    async def delete(self, identifier: str) -> bool:
        """Retire a snippet: no version is live any more, every version is kept for replay.
        True when one was live."""
        async with self._sessions.begin() as session:
            result = await session.execute(
                update(SnippetRow)
                .where(SnippetRow.identifier == identifier, SnippetRow.live)
                .values(live=False)
            )
        return bool(getattr(result, "rowcount", 0))

    @staticmethod
    async def _lock(session: AsyncSession, identifier: str) -> None:
        """Wait for, then hold, every stored version of `identifier` (PostgreSQL; SQLite has one
        writer anyway). Changes of one snippet then run one after another, always locking in
        version order, so two edits never deadlock on the two unique indexes; the reads that
        follow are new statements, so they see what the edit before committed. A first version
        has nothing to lock: two of those race on the unique index and one retries."""
        await session.execute(
            select(SnippetRow.id)
            .where(SnippetRow.identifier == identifier)
            .order_by(SnippetRow.version)
            .with_for_update()
        )

    @staticmethod
    async def _live(session: AsyncSession, identifier: str) -> SnippetRow | None:
        return await session.scalar(
            select(SnippetRow).where(SnippetRow.identifier == identifier, SnippetRow.live)
        )

    @staticmethod
    async def _version(session: AsyncSession, identifier: str, version: int) -> SnippetRow | None:
        return await session.scalar(
            select(SnippetRow).where(
                SnippetRow.identifier == identifier, SnippetRow.version == version
            )
        )
