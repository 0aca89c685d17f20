"""File snippets, `<pattern root>/snippets/<identifier>.md`, kept in memory off the request path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog
from pydantic import ValidationError

from app.catalog.library import SNIPPETS_DIR as SNIPPETS_DIR  # re-exported
from app.catalog.pattern import split_front_matter
from app.errors import InvalidPattern
from app.schemas import Snippet
from app.snippets.fields import normalise_tags, read_metadata
from app.tracking import template_checksum

log = structlog.get_logger(__name__)

SUFFIX = ".md"
FRONT_MATTER_KEYS = frozenset({"name", "description", "tags", "metadata"})


class _Skip(Exception):
    """A snippet file that cannot be used; its problems are logged and the file is left out."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_snippet_file(identifier: str, raw: bytes) -> Snippet:
    """Front-matter (name, description, tags, metadata) and the body as the text; raises _Skip."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _Skip(["the file is not UTF-8"]) from None
    try:
        data, body = split_front_matter(identifier, text)
    except InvalidPattern as problem:
        raise _Skip(problem.problems) from None
    unknown = sorted(str(key) for key in data if key not in FRONT_MATTER_KEYS)
    if unknown:
        allowed = ", ".join(sorted(FRONT_MATTER_KEYS))
        raise _Skip([f"unknown front-matter keys {', '.join(unknown)} (allowed: {allowed})"])
    try:
        tags = normalise_tags(data.get("tags"))
    except ValueError as exc:
        raise _Skip([f"front-matter tags: {exc}"]) from None
    metadata = (
        {}  # absent or left empty (`metadata:`): nothing to warn about
        if data.get("metadata") is None
        else read_metadata(data["metadata"], identifier=identifier, source="file", parse_text=True)
    )
    try:
        return Snippet(
            identifier=identifier,
            name=data.get("name") or identifier,
            description=data.get("description") or "",
            text=body.strip(),
            tags=tags,
            metadata=metadata,
            active=True,
            source="file",
            checksum=template_checksum(body.strip()),
        )
    except ValidationError as exc:
        raise _Skip(
            [
                f"{'.'.join(map(str, err['loc'])) or 'snippet'}: {err['msg']}"
                for err in exc.errors(include_url=False, include_input=False)
            ]
        ) from None


@dataclass(frozen=True, slots=True)
class _Entry:
    """A file as last seen: its stat signature and the snippet it gave (None when skipped)."""

    signature: tuple[int, int, int]
    snippet: Snippet | None


def _load(path: Path) -> Snippet | None:
    identifier = path.stem
    try:
        snippet = parse_snippet_file(identifier, path.read_bytes())
    except _Skip as skip:
        log.warning(
            "snippet_file_invalid", snippet=identifier, path=str(path), problems=skip.problems
        )
        return None
    except OSError as exc:
        log.warning("snippet_file_unreadable", snippet=identifier, path=str(path), error=str(exc))
        return None
    log.debug("snippet_file_loaded", snippet=identifier, path=str(path))
    return snippet


class FileSnippets:
    """Every root's snippet files; on a shared identifier the first root wins, as for patterns."""

    def __init__(self, roots: list[Path]) -> None:
        self._roots = list(dict.fromkeys(roots))
        self._entries: dict[Path, _Entry] = {}
        self._index: dict[str, Snippet] = {}

    def refresh(self) -> bool:
        """Re-scan (blocking I/O); re-read only files whose (mtime_ns, size, inode) changed."""
        fresh: dict[Path, _Entry] = {}
        index: dict[str, Snippet] = {}
        for path in self._scan():
            try:
                st = path.stat()
            except FileNotFoundError:
                continue  # deleted between the scan and the stat
            signature = (st.st_mtime_ns, st.st_size, st.st_ino)
            known = self._entries.get(path)
            entry = (
                known if known and known.signature == signature else _Entry(signature, _load(path))
            )
            fresh[path] = entry
            if entry.snippet is None:
                continue
            if entry.snippet.identifier in index:
                log.debug("snippet_file_shadowed", snippet=entry.snippet.identifier, path=str(path))
                continue
            index[entry.snippet.identifier] = entry.snippet
        changed = fresh.keys() != self._entries.keys() or any(
            entry is not self._entries.get(path) for path, entry in fresh.items()
        )
        self._entries = fresh
        self._index = index  # one reference swap: readers see the old or the new index
        return changed

    def _scan(self) -> list[Path]:
        found: list[Path] = []
        for root in self._roots:
            folder = root / SNIPPETS_DIR
            if folder.is_dir():
                found += sorted(p for p in folder.glob(f"*{SUFFIX}") if p.is_file())
        return found

    def get(self, identifier: str) -> Snippet | None:
        return self._index.get(identifier)

    def all(self) -> list[Snippet]:
        return list(self._index.values())
