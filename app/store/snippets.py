"""SnippetRepository: database snippets as typed records; file snippets and composition live in
app/snippets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import SnippetExists
from app.schemas import SnippetIn
from app.store.db import store_seam
from app.store.tables import SnippetRow


@dataclass(frozen=True, slots=True)
class StoredSnippet:
    """One database snippet as stored; tags and metadata unchecked (the library reads them
    leniently, so one bad row never breaks a listing)."""

    identifier: str
    name: str
    description: str
    text: str
    tags: object  # a list of strings when written here; older rows may hold other shapes
    metadata: object
    active: bool


def _record(row: SnippetRow) -> StoredSnippet:
    return StoredSnippet(
        identifier=row.identifier,
        name=row.name,
        description=row.description,
        text=row.text,
        tags=row.tags,
        metadata=row.meta,
        active=row.active,
    )


def _fill(row: SnippetRow, snippet: SnippetIn) -> None:
    """Every field replaced: snippets have no versions to merge."""
    row.name = snippet.name
    row.description = snippet.description
    row.text = snippet.text
    row.tags = list(snippet.tags)
    row.meta = dict(snippet.metadata)
    row.active = snippet.active


class SnippetRepository:
    """Each method is a `store_seam`: storage failures leave it only as StoreUnavailable."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @store_seam
    async def find(self, identifiers: Sequence[str] | None = None) -> list[StoredSnippet]:
        """The snippets named (all of them when None)."""
        query = select(SnippetRow)
        if identifiers is not None:
            query = query.where(SnippetRow.identifier.in_(list(identifiers)))
        async with self._sessions() as session:
            return [_record(row) for row in await session.scalars(query)]

    @store_seam
    async def add(self, snippet: SnippetIn) -> StoredSnippet | None:
        """Store a new snippet; None when one with its identifier exists (or just appeared)."""
        try:
            async with self._sessions.begin() as session:
                if await self._find(session, snippet.identifier) is not None:
                    return None
                row = SnippetRow(identifier=snippet.identifier)
                _fill(row, snippet)
                session.add(row)
                await session.flush()
                return _record(row)
        except IntegrityError:
            return None

    @store_seam
    async def replace(self, snippet: SnippetIn, *, create: bool) -> StoredSnippet | None:
        """Replace every field of a stored snippet; if there is none, create it when `create`,
        else return None."""
        try:
            async with self._sessions.begin() as session:
                row = await self._find(session, snippet.identifier)
                if row is None:
                    if not create:
                        return None
                    row = SnippetRow(identifier=snippet.identifier)
                    session.add(row)
                _fill(row, snippet)
                await session.flush()
                return _record(row)
        except IntegrityError:
            raise SnippetExists(
                f"Snippet {snippet.identifier!r} was created concurrently; send the request again."
            ) from None

    @store_seam
    async def delete(self, identifier: str) -> bool:
        """True when a stored snippet was deleted."""
        async with self._sessions.begin() as session:
            result = await session.execute(
                delete(SnippetRow).where(SnippetRow.identifier == identifier)
            )
        return bool(getattr(result, "rowcount", 0))

    @staticmethod
    async def _find(session: AsyncSession, identifier: str) -> SnippetRow | None:
        return await session.scalar(select(SnippetRow).where(SnippetRow.identifier == identifier))
