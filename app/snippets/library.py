"""SnippetLibrary: database snippets over file snippets, tag lookup, and the block composer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from app.errors import InvalidSnippetLabels, SnippetExists, SnippetNotFound
from app.schemas import Snippet, SnippetIn, SnippetUse, SnippetVersions, is_snippet_label
from app.snippets.fields import has_tag, normalise_tags, read_metadata
from app.snippets.files import SNIPPETS_DIR, SUFFIX, FileSnippets
from app.store.snippets import SnippetRepository, StoredSnippet, VersionChange
from app.tracking import template_checksum
from app.webhooks import EventSink, NoEvents

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ComposedSnippets:
    """Labeled blocks ready to place in a prompt, and the identifiers that produced them."""

    text: str
    ids: list[str]
    used: list[SnippetUse] = field(default_factory=list)  # in prompt order, like `ids`


def snippet_use(snippet: Snippet) -> SnippetUse:
    """How provenance and the audit record name a snippet a job used: the hash is of the text
    itself, not the stored checksum, so a row changed behind the API shows in replay."""
    return SnippetUse(
        identifier=snippet.identifier,
        version=snippet.version if snippet.source == "database" else None,
        source=snippet.source,
        sha256=template_checksum(snippet.text),
    )


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
        version=stored.version,
        checksum=stored.checksum,
        live=stored.live,
        created_at=stored.created_at,
    )


def _to_store(new: SnippetIn) -> SnippetIn:
    """Tags are stored normalised, so lookups by tag need no second pass."""
    return new.model_copy(update={"tags": normalise_tags(new.tags)})


class SnippetLibrary:
    """One place to read snippets; the request path reads the database and memory, never files."""

    def __init__(
        self,
        *,
        store: SnippetRepository,
        file_roots: list[Path],
        events: EventSink | None = None,
    ) -> None:
        self._store = store
        self._events: EventSink = events if events is not None else NoEvents()
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
        change = await self._store.add(_to_store(new))
        if change is None:
            raise SnippetExists(
                f"Snippet {new.identifier!r} already exists in the database; "
                f"PUT /v1/snippets/{new.identifier} stores a new version."
            )
        return await self._announce("snippet.version_created", change)

    async def update(self, identifier: str, new: SnippetIn) -> Snippet:
        """Store the next version (every field) and make it live; for a file-only snippet this
        creates the database override (version 1).

        The caller checks that `new.identifier` equals `identifier` (the API answers 422).
        """
        if new.identifier != identifier:
            raise ValueError(f"body identifier {new.identifier!r} is not {identifier!r}")
        has_file = self._files.get(identifier) is not None
        change = await self._store.replace(_to_store(new), create=has_file)
        if change is None:
            raise SnippetNotFound(
                identifier, f"No snippet {identifier!r} to update; POST /v1/snippets creates one."
            )
        return await self._announce("snippet.version_created", change)

    async def versions(self, identifier: str) -> SnippetVersions:
        """Every stored version of a database snippet, oldest first."""
        stored = await self._store.versions(identifier)
        if not stored:
            raise SnippetNotFound(identifier, f"No database snippet {identifier!r} has versions.")
        live = next((s.version for s in stored if s.live), None)
        return SnippetVersions(
            identifier=identifier,
            live_version=live,
            versions=[_from_store(s) for s in stored],
        )

    async def version(self, identifier: str, version: int) -> Snippet:
        """One stored version, live or not."""
        stored = await self._store.version(identifier, version)
        if stored is None:
            raise SnippetNotFound(
                identifier,
                f"Snippet {identifier!r} has no version {version}; "
                f"GET /v1/snippets/{identifier}/versions lists them.",
            )
        return _from_store(stored)

    async def activate(self, identifier: str, version: int) -> Snippet:
        """Serve a stored version again (rollback); it also revives a deleted snippet."""
        return await self._announce(
            "snippet.activated", await self._store.activate(identifier, version)
        )

    async def _announce(self, event_type: str, change: VersionChange) -> Snippet:
        """Emit once the change is committed; the sink never raises."""
        stored = change.snippet
        await self._events.emit(
            event_type,
            {
                "identifier": stored.identifier,
                "version": stored.version,
                "checksum": stored.checksum,
                "previous_version": change.previous_version,
            },
        )
        return _from_store(stored)

    async def delete(self, identifier: str) -> None:
        """Retire the database snippet (no live version; its versions stay for replay); a file
        snippet behind it, if any, is visible again."""
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

    async def current(self, identifiers: Sequence[str]) -> dict[str, SnippetUse]:
        """What each identifier would compose to now (live version, else file); drift compares
        these with what jobs recorded. Identifiers that are gone or hidden are left out."""
        found = await self._resolve(list(dict.fromkeys(identifiers)))
        return {i: snippet_use(s) for i, s in found.items() if s.active}

    async def compose(
        self, labels: Mapping[str, str], *, pinned: Mapping[str, int] | None = None
    ) -> ComposedSnippets:
        """`LABEL:\\ntext` per pair, in order, one blank line apart; all labels checked first.

        `pinned` (replay) names the database version to use per identifier instead of the live
        one; a pinned version that no longer exists falls back to the usual lookup, and the
        hashes then show the difference.
        """
        invalid = [label for label in labels if not is_snippet_label(label)]
        if invalid:
            raise InvalidSnippetLabels(invalid)
        found = await self._resolve(list(dict.fromkeys(labels.values())))
        wanted = set(labels.values())
        for identifier, version in (pinned or {}).items():
            if identifier in wanted and (old := await self._store.version(identifier, version)):
                found[identifier] = _from_store(old).model_copy(update={"active": True})
        blocks: list[str] = []
        ids: list[str] = []
        used: list[SnippetUse] = []
        for label, identifier in labels.items():
            snippet = found.get(identifier)
            if snippet is None or not snippet.active:
                raise SnippetNotFound(identifier)
            blocks.append(f"{label}:\n{snippet.text}")
            ids.append(identifier)
            used.append(snippet_use(snippet))
        return ComposedSnippets(text="\n\n".join(blocks), ids=ids, used=used)
