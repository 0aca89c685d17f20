"""One pattern root on disk, indexed in memory and refreshed when files change."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from app.catalog.pattern import Pattern, RenderedPattern, parse_pattern, render_pattern
from app.errors import InvalidPattern, PatternNotFound

log = structlog.get_logger(__name__)

SUFFIX = ".md"
# Folders under a root that hold something other than patterns.
RESERVED_DIRS = frozenset({"snippets"})


@dataclass(frozen=True, slots=True)
class _Entry:
    """A file as last seen: its stat signature and what loading it produced."""

    signature: tuple[tuple[int, int, int] | None, ...]
    siblings: tuple[Path, ...]  # files next to the pattern that it read (an output schema)
    loaded: Pattern | InvalidPattern


def _signature(paths: tuple[Path, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    found: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = path.stat()
        except FileNotFoundError:
            found.append(None)
            continue
        found.append((st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(found)


class PatternLibrary:
    """Loads `<root>/<name>.md` files; the request path only ever reads the in-memory index.

    `refresh()` is blocking file I/O: call it at start-up or from a worker thread
    (`asyncio.to_thread`), never on the event loop. Unchanged files (same mtime, size, inode)
    are not re-read, so a refresh of an idle catalog costs one `stat` per file.

    Loading only compiles, and compiling cannot hang: the sandbox folds no operator or filter
    that could explode (`app/catalog/sandbox.py`), so a file such as `{{ 9**(9**9) }}` loads in
    microseconds. Its variables come from requests, so whether it breaks a budget is known only
    when it renders: it stays loadable and each render of it answers 422 (`render_too_large`,
    `render_timeout`, `render_too_deep`) under the renderer's budget. Only a body nested too
    deeply to compile at all is marked invalid here.
    """

    def __init__(self, base_path: str | Path, *, defaults: Mapping[str, Any] | None = None) -> None:
        self.base_path = str(base_path)
        self._root = Path(base_path)
        self._defaults = dict(defaults or {})
        self._entries: dict[str, _Entry] = {}
        self.refresh()

    def refresh(self) -> bool:
        """Re-scan the root; return True when anything was added, changed or removed."""
        fresh: dict[str, _Entry] = {}
        for name, path in self._scan():
            known = self._entries.get(name)
            if known is not None and known.signature == _signature((path, *known.siblings)):
                fresh[name] = known
                continue
            entry = self._load(name, path)
            if entry is not None:
                fresh[name] = entry
        changed = fresh.keys() != self._entries.keys() or any(
            fresh[name] is not self._entries.get(name) for name in fresh
        )
        self._entries = fresh  # one reference swap: readers see the old or the new index
        return changed

    def _scan(self) -> list[tuple[str, Path]]:
        if not self._root.is_dir():
            return []
        found = []
        for path in sorted(self._root.rglob(f"*{SUFFIX}")):
            relative = path.relative_to(self._root)
            if relative.parts[0] in RESERVED_DIRS or not path.is_file():
                continue
            found.append((relative.with_suffix("").as_posix(), path))
        return found

    def _load(self, name: str, path: Path) -> _Entry | None:
        """Parse one file, remembering which sibling files it read; None if it vanished."""
        siblings: list[Path] = []

        def read_sibling(file_name: str) -> bytes:
            siblings.append(path.parent / file_name)
            return siblings[-1].read_bytes()

        signature = _signature((path,))
        if signature[0] is None:
            return None  # deleted between the scan and the stat
        loaded: Pattern | InvalidPattern
        try:
            loaded = parse_pattern(name, self.base_path, path.read_bytes(), read_sibling)
            log.debug("pattern_loaded", pattern=name, content_hash=loaded.content_hash)
        except InvalidPattern as problem:
            log.warning("pattern_invalid", pattern=name, problems=problem.problems)
            loaded = problem
        return _Entry(signature + _signature(tuple(siblings)), tuple(siblings), loaded)

    @property
    def exists(self) -> bool:
        return self._root.is_dir()

    def names(self) -> list[str]:
        return sorted(self._entries)

    def has(self, name: str) -> bool:
        return name in self._entries

    def problems(self) -> dict[str, InvalidPattern]:
        return {
            n: e.loaded for n, e in self._entries.items() if isinstance(e.loaded, InvalidPattern)
        }

    def get(self, name: str) -> Pattern:
        entry = self._entries.get(name)
        if entry is None:
            raise PatternNotFound(name)
        if isinstance(entry.loaded, InvalidPattern):
            raise entry.loaded
        return entry.loaded

    def effective_variables(self, pattern: Pattern, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Library defaults < front-matter defaults < caller variables: the caller always wins."""
        return {**self._defaults, **pattern.meta.defaults, **variables}

    def apply_template(
        self, name: str, variables: Mapping[str, Any], *, user_prompt: str = ""
    ) -> RenderedPattern:
        """The only way a pattern becomes text."""
        pattern = self.get(name)
        merged = self.effective_variables(pattern, variables)
        system, messages = render_pattern(pattern, merged, user_prompt)
        return RenderedPattern(pattern=pattern, system=system, messages=messages, variables=merged)
