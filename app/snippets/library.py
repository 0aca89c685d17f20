"""SnippetLibrary: database snippets over file snippets, tag lookup, and the block composer."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.errors import InvalidSnippetLabels, SnippetExists, SnippetNotFound
from app.schemas import Snippet, SnippetIn
from app.snippets.fields import has_tag, normalise_tags, read_metadata
from app.snippets.files import SNIPPETS_DIR, SUFFIX, FileSnippets
from app.store.db import store_seam
from app.store.tables import SnippetRow

log = structlog.get_logger(__name__)

LABEL = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class ComposedSnippets:
    """Labeled blocks ready to place in a prompt, and the identifiers that produced them."""

    text: str
    ids: list[str]


def _row_tags(row: SnippetRow) -> list[str]:
    try:
        return normalise_tags(row.tags)
    except ValueError:
        log.warning("snippet_tags_invalid", snippet=row.identifier, source="database")
        return []


def _from_row(row: SnippetRow) -> Snippet:
    """A stored row as the API shows it; bad tags or metadata read as empty, never as a failure."""
    return Snippet(
        identifier=row.identifier,
        name=row.name,
        description=row.description,
        text=row.text,
        tags=_row_tags(row),
        metadata=read_metadata(
            row.meta, identifier=row.identifier, source="database", parse_text=False
        ),
        active=row.active,
        source="database",
    )


def _fill(row: SnippetRow, new: SnippetIn) -> None:
    """Replace every field of the row (no partial updates: snippets have no versions to merge)."""
    row.name = new.name
    row.description = new.description
    row.text = new.text
    row.tags = normalise_tags(new.tags)
    row.meta = dict(new.metadata)
    row.active = new.active


class SnippetLibrary:
    """One place to read snippets; the request path reads the database and memory, never files."""

    def __init__(
        self, *, sessions: async_sessionmaker[AsyncSession], file_roots: list[Path]
    ) -> None:
        self._sessions = sessions
        self._file_roots = file_roots
        self._files = FileSnippets(file_roots)
        self.refresh_files()  # usable as soon as built, like the pattern libraries

    def refresh_files(self) -> bool:
        """Blocking file I/O: call at start-up or via `asyncio.to_thread`; True when changed."""
        return self._files.refresh()

    @store_seam
    async def _rows(self, identifiers: Iterable[str] | None = None) -> dict[str, Snippet]:
        query = select(SnippetRow)
        if identifiers is not None:
            query = query.where(SnippetRow.identifier.in_(list(identifiers)))
        async with self._sessions() as session:
            return {row.identifier: _from_row(row) for row in await session.scalars(query)}

    async def _resolve(self, identifiers: list[str]) -> dict[str, Snippet]:
        """The database row, else the file, for each identifier that has either (active or not)."""
        found = await self._rows(identifiers) if identifiers else {}
        for identifier in identifiers:
            if identifier not in found and (snippet := self._files.get(identifier)) is not None:
                found[identifier] = snippet
        return found

    async def get(self, identifier: str) -> Snippet:
        snippet = (await self._resolve([identifier])).get(identifier)
        if snippet is None or not snippet.active:
            raise SnippetNotFound(identifier)
        return snippet

    async def list(
        self, *, tag: str | None = None, include_inactive: bool = False
    ) -> list[Snippet]:
        merged = {snippet.identifier: snippet for snippet in self._files.all()}
        merged.update(await self._rows())
        wanted = tag if tag and tag.strip() else None
        return [
            snippet
            for _, snippet in sorted(merged.items())
            if (include_inactive or snippet.active)
            and (wanted is None or has_tag(snippet.tags, wanted))
        ]

    @store_seam
    async def create(self, new: SnippetIn) -> Snippet:
        """Store a database snippet; one may shadow a file snippet of the same identifier."""
        exists = SnippetExists(
            f"Snippet {new.identifier!r} already exists in the database; "
            f"PUT /v1/snippets/{new.identifier} replaces it."
        )
        try:
            async with self._sessions.begin() as session:
                if await self._find(session, new.identifier) is not None:
                    raise exists
                row = SnippetRow(identifier=new.identifier)
                _fill(row, new)
                session.add(row)
                await session.flush()
                return _from_row(row)
        except IntegrityError:
            raise exists from None

    @store_seam
    async def update(self, identifier: str, new: SnippetIn) -> Snippet:
        """Replace every field; for a file-only snippet this creates the database override.

        The caller checks that `new.identifier` equals `identifier` (the API answers 422).
        """
        if new.identifier != identifier:
            raise ValueError(f"body identifier {new.identifier!r} is not {identifier!r}")
        try:
            async with self._sessions.begin() as session:
                row = await self._find(session, identifier)
                if row is None:
                    if self._files.get(identifier) is None:
                        raise SnippetNotFound(
                            identifier,
                            f"No snippet {identifier!r} to update; POST /v1/snippets creates one.",
                        )
                    row = SnippetRow(identifier=identifier)
                    session.add(row)
                _fill(row, new)
                await session.flush()
                return _from_row(row)
        except IntegrityError:
            raise SnippetExists(
                f"Snippet {identifier!r} was created concurrently; send the request again."
            ) from None

    @store_seam
    async def delete(self, identifier: str) -> None:
        """Delete the database row; a file snippet behind it, if any, is visible again."""
        async with self._sessions.begin() as session:
            row = await self._find(session, identifier)
            if row is not None:
                await session.delete(row)
                return
        if self._files.get(identifier) is not None:
            raise SnippetNotFound(
                identifier,
                f"Snippet {identifier!r} is a file snippet "
                f"(<pattern root>/{SNIPPETS_DIR}/{identifier}{SUFFIX}) and cannot be deleted "
                "here: remove the file, or PUT an override with active=false to hide it.",
            )
        raise SnippetNotFound(identifier, f"No database snippet {identifier!r} to delete.")

    @staticmethod
    async def _find(session: AsyncSession, identifier: str) -> SnippetRow | None:
        return await session.scalar(select(SnippetRow).where(SnippetRow.identifier == identifier))

    async def compose(self, labels: Mapping[str, str]) -> ComposedSnippets:
        """`LABEL:\\ntext` per pair, in order, one blank line apart; all labels checked first."""
        invalid = [label for label in labels if not LABEL.fullmatch(label)]
        if invalid:
            raise InvalidSnippetLabels(invalid)
        found = await self._resolve(list(dict.fromkeys(labels.values())))
        blocks: list[str] = []
        ids: list[str] = []
        for label, identifier in labels.items():
            snippet = found.get(identifier)
            if snippet is None or not snippet.active:
                raise SnippetNotFound(identifier)
            blocks.append(f"{label}:\n{snippet.text}")
            ids.append(identifier)
        return ComposedSnippets(text="\n\n".join(blocks), ids=ids)
