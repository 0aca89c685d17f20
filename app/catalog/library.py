"""One pattern root on disk, indexed in memory and refreshed when files change."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from app.catalog.pattern import (
    Pattern,
    PatternInfo,
    PatternSource,
    RenderedPattern,
    compile_pattern,
    read_pattern,
    render_pattern,
)
from app.errors import InvalidPattern, PatternNotFound

log = structlog.get_logger(__name__)

SUFFIX = ".md"
# Snippet files live under each pattern root (read by app/snippets/files.py).
SNIPPETS_DIR = "snippets"
# Folders under a root that hold something other than patterns.
RESERVED_DIRS = frozenset({SNIPPETS_DIR})


def _fresh(problem: InvalidPattern) -> InvalidPattern:
    """A new error per raise: re-raising one cached instance would grow its traceback."""
    return InvalidPattern(problem.name, problem.problems)


class _CompileOnce:
    """One file version's compile, done on first use and kept for as long as the file is.

    A lock per pattern: concurrent first renders wait for one compile instead of each
    compiling (the waiter's render budget keeps running meanwhile). A compile that ran out of
    time (RenderTimeout) is not kept, so the next render tries again.
    """

    __slots__ = ("_lock", "_result", "source")

    def __init__(self, source: PatternSource) -> None:
        self.source = source
        self._lock = threading.Lock()
        self._result: Pattern | InvalidPattern | None = None

    @property
    def known_problem(self) -> InvalidPattern | None:
        """The compile's problem if it already ran; never compiles."""
        result = self._result
        return result if isinstance(result, InvalidPattern) else None

    @property
    def compiled(self) -> Pattern | None:
        """The compiled pattern if a compile already succeeded; never compiles."""
        result = self._result
        return result if isinstance(result, Pattern) else None

    def pattern(self) -> Pattern:
        result = self._result
        if result is None:
            with self._lock:
                result = self._result
                if result is None:
                    result = self._compile()
                    self._result = result
        if isinstance(result, InvalidPattern):
            raise _fresh(result)
        return result

    def _compile(self) -> Pattern | InvalidPattern:
        name = self.source.info.name
        try:
            pattern = compile_pattern(self.source)
        except InvalidPattern as problem:
            log.warning("pattern_invalid", pattern=name, problems=problem.problems)
            return problem
        log.debug("pattern_compiled", pattern=name)
        return pattern


@dataclass(frozen=True, slots=True)
class _Entry:
    """A file as last seen: its stat signature and what reading it produced."""

    signature: tuple[tuple[int, int, int] | None, ...]
    siblings: tuple[Path, ...]  # files next to the pattern that it read (an output schema)
    loaded: _CompileOnce | InvalidPattern

    def problem(self) -> InvalidPattern | None:
        """What is known to be wrong, without compiling anything."""
        if isinstance(self.loaded, InvalidPattern):
            return self.loaded
        return self.loaded.known_problem


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

    Reading a file checks its front-matter and markers, reads its schema file and hashes it
    (the fingerprint, once per file version); the Jinja body is compiled on the pattern's first
    `get`/`apply_template` (inside a render thread's budget), also once per file version. So
    `problems()` knows broken front-matter at once and a broken body once something compiled
    it; `PatternCatalog.check()` compiles everything and knows all.

    Compiling cannot hang: the sandbox folds no operator or filter that could explode
    (`app/catalog/sandbox.py`), so a file such as `{{ 9**(9**9) }}` compiles in microseconds.
    Its variables come from requests, so whether it breaks a budget is known only when it
    renders: it stays loadable and each render of it answers 422 (`render_too_large`,
    `render_timeout`, `render_too_deep`) under the renderer's budget. Only a body nested too
    deeply to compile at all is invalid.
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
            # Hidden folders and files are never patterns: a mounted Kubernetes ConfigMap keeps
            # a second copy of every file under `..<timestamp>/`.
            if any(part.startswith(".") for part in relative.parts):
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
        loaded: _CompileOnce | InvalidPattern
        try:
            source = read_pattern(name, self.base_path, path.read_bytes(), read_sibling)
        except InvalidPattern as problem:
            log.warning("pattern_invalid", pattern=name, problems=problem.problems)
            loaded = problem
        else:
            log.debug("pattern_read", pattern=name, content_hash=source.info.content_hash)
            loaded = _CompileOnce(source)
        return _Entry(signature + _signature(tuple(siblings)), tuple(siblings), loaded)

    @property
    def exists(self) -> bool:
        return self._root.is_dir()

    def names(self) -> list[str]:
        return sorted(self._entries)

    def has(self, name: str) -> bool:
        return name in self._entries

    def problems(self) -> dict[str, InvalidPattern]:
        """Problems known so far: every unreadable file, and bodies that failed to compile."""
        found = {name: entry.problem() for name, entry in self._entries.items()}
        return {name: problem for name, problem in found.items() if problem is not None}

    def _entry(self, name: str) -> _CompileOnce:
        entry = self._entries.get(name)
        if entry is None:
            raise PatternNotFound(name)
        if isinstance(entry.loaded, InvalidPattern):
            raise _fresh(entry.loaded)
        return entry.loaded

    def info(self, name: str) -> PatternInfo:
        """Front-matter, hash and schema without compiling; raises for a known problem."""
        loaded = self._entry(name)
        if (problem := loaded.known_problem) is not None:
            raise _fresh(problem)
        return loaded.source.info

    def renders_quickly(self, name: str) -> bool:
        """Already compiled, and quick (`Pattern.renders_quickly`); never compiles."""
        entry = self._entries.get(name)
        if entry is None or isinstance(entry.loaded, InvalidPattern):
            return False
        compiled = entry.loaded.compiled
        return compiled is not None and compiled.renders_quickly

    def get(self, name: str) -> Pattern:
        """The compiled pattern. Blocking on its first call per file version: a render thread."""
        return self._entry(name).pattern()

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
