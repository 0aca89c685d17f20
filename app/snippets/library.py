"""SnippetLibrary: database snippets over file snippets, tag lookup, and the block composer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from app.errors import InvalidSnippetLabels, SnippetExists, SnippetNotFound
from app.schemas import Snippet, SnippetIn, is_snippet_label
from app.snippets.fields import has_tag, normalise_tags, read_metadata
from app.snippets.files import SNIPPETS_DIR, SUFFIX, FileSnippets
from app.store.snippets import SnippetRepository, StoredSnippet

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ComposedSnippets:
    """Labeled blocks ready to place in a prompt, and the identifiers that produced them."""

    text: str
    ids: list[str]


def _stored_tags(stored: StoredSnippet) -> list[str]:
    try:
        return normalise_tags(stored.tags)
    except ValueError:
        log.warning("snippet_tags_invalid", snippet=stored.identifier, source="database")
        return []


def _from_store(stored: StoredSnippet) -> Snippet:
    """A stored snippet as the API shows it; bad tags or metadata read as empty, never fail."""
    return Snippet(
        identifier=stored.identifier,
        name=stored.name,
        description=stored.description,
        text=stored.text,
        tags=_stored_tags(stored),
        metadata=read_metadata(
            stored.metadata, identifier=stored.identifier, source="database", parse_text=False
        ),
        active=stored.active,
        source="database",
    )


def _to_store(new: SnippetIn) -> SnippetIn:
    """Tags are stored normalised, so lookups by tag need no second pass."""
    return new.model_copy(update={"tags": normalise_tags(new.tags)})


class SnippetLibrary:
    """One place to read snippets; the request path reads the database and memory, never files."""

    def __init__(self, *, store: SnippetRepository, file_roots: list[Path]) -> None:
        self._store = store
        self._file_roots = file_roots
        self._files = FileSnippets(file_roots)
        self.refresh_files()  # usable as soon as built, like the pattern libraries

    def refresh_files(self) -> bool:
        """Blocking file I/O: call at start-up or via `asyncio.to_thread`; True when changed."""
        return self._files.refresh()

    async def _rows(self, identifiers: Sequence[str] | None = None) -> dict[str, Snippet]:
        return {s.identifier: _from_store(s) for s in await self._store.find(identifiers)}

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

    async def create(self, new: SnippetIn) -> Snippet:
        """Store a database snippet; one may shadow a file snippet of the same identifier."""
        stored = await self._store.add(_to_store(new))
        if stored is None:
            raise SnippetExists(
                f"Snippet {new.identifier!r} already exists in the database; "
                f"PUT /v1/snippets/{new.identifier} replaces it."
            )
        return _from_store(stored)

    async def update(self, identifier: str, new: SnippetIn) -> Snippet:
        """Replace every field; for a file-only snippet this creates the database override.

        The caller checks that `new.identifier` equals `identifier` (the API answers 422).
        """
        if new.identifier != identifier:
            raise ValueError(f"body identifier {new.identifier!r} is not {identifier!r}")
        has_file = self._files.get(identifier) is not None
        stored = await self._store.replace(_to_store(new), create=has_file)
        if stored is None:
            raise SnippetNotFound(
                identifier, f"No snippet {identifier!r} to update; POST /v1/snippets creates one."
            )
        return _from_store(stored)

    async def delete(self, identifier: str) -> None:
        """Delete the database row; a file snippet behind it, if any, is visible again."""
        if await self._store.delete(identifier):
            return
        if self._files.get(identifier) is not None:
            raise SnippetNotFound(
                identifier,
                f"Snippet {identifier!r} is a file snippet "
                f"(<pattern root>/{SNIPPETS_DIR}/{identifier}{SUFFIX}) and cannot be deleted "
                "here: remove the file, or PUT an override with active=false to hide it.",
            )
        raise SnippetNotFound(identifier, f"No database snippet {identifier!r} to delete.")

    async def compose(self, labels: Mapping[str, str]) -> ComposedSnippets:
        """`LABEL:\\ntext` per pair, in order, one blank line apart; all labels checked first."""
        invalid = [label for label in labels if not is_snippet_label(label)]
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
