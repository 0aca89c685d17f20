"""The service's view of the pattern catalog: one or more roots searched in order."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from app.catalog.library import PatternLibrary
from app.catalog.pattern import Pattern, PatternInfo, RenderedPattern
from app.errors import InvalidPattern, PatternNotFound

log = structlog.get_logger(__name__)


class PatternCatalog:
    """Resolves names across roots; like PATH, the first root holding a name owns it.

    Within a root a name is unique by construction (one file per path); a name found in an
    earlier root shadows the same name in a later one, and `shadowed()` reports that.
    """

    def __init__(
        self,
        base_path: str | Path | None = None,
        *,
        roots: Sequence[str | Path] = (),
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        paths = [*([base_path] if base_path is not None else []), *roots]
        if not paths:
            raise ValueError("PatternCatalog needs a base_path or at least one root")
        unique = list(dict.fromkeys(str(p) for p in paths))
        self.libraries = [PatternLibrary(p, defaults=defaults) for p in unique]

    def refresh(self) -> bool:
        """Blocking: re-scan every root (run it in a worker thread)."""
        return any([library.refresh() for library in self.libraries])

    def _owner(self, name: str) -> PatternLibrary:
        # One dict lookup per root: what a render costs does not grow with the catalog.
        for library in self.libraries:
            if library.has(name):
                return library
        raise PatternNotFound(name)

    def info(self, name: str) -> PatternInfo:
        """Metadata and content hash without compiling (cheap: fine on the event loop)."""
        return self._owner(name).info(name)

    def get(self, name: str) -> Pattern:
        """The compiled pattern; its first call per file version compiles (a render thread)."""
        return self._owner(name).get(name)

    def apply_template(
        self, name: str, variables: Mapping[str, Any], *, user_prompt: str = ""
    ) -> RenderedPattern:
        return self._owner(name).apply_template(name, variables, user_prompt=user_prompt)

    def renders_quickly(self, name: str) -> bool:
        """Compiled already and quick to render (cheap, never compiles: fine on the loop)."""
        try:
            return self._owner(name).renders_quickly(name)
        except PatternNotFound:
            return False

    def names(self) -> list[str]:
        return sorted({name for library in self.libraries for name in library.names()})

    def loadable(self) -> list[PatternInfo]:
        """Every pattern not known to be broken, each name once; nothing is compiled."""
        found = []
        for name in self.names():
            try:
                found.append(self.info(name))
            except InvalidPattern:
                continue
        return found

    def listing(self) -> list[PatternInfo | InvalidPattern]:
        """Every pattern file, each name once: its info, or why it is known to be broken.

        Like `loadable()`, nothing is compiled: a body's problem shows once it has been compiled
        (a render, `GET /v1/patterns/{name}`, `genai patterns validate`)."""
        found: list[PatternInfo | InvalidPattern] = []
        for name in self.names():
            try:
                found.append(self.info(name))
            except InvalidPattern as problem:
                found.append(problem)
        return found

    def problems(self) -> dict[str, InvalidPattern]:
        """Problems known so far (a body counts once compiled), for the root owning each name."""
        found: dict[str, InvalidPattern] = {}
        seen: set[str] = set()
        for library in self.libraries:
            problems = library.problems()
            for name in library.names():
                if name not in seen and name in problems:
                    found[name] = problems[name]
                seen.add(name)
        return found

    def check(self) -> dict[str, InvalidPattern]:
        """Blocking: compile every pattern, then report every problem (`patterns validate`)."""
        for name in self.names():
            with contextlib.suppress(InvalidPattern):  # reported by problems() below
                self.get(name)
        return self.problems()

    def shadowed(self) -> dict[str, list[str]]:
        """Names present in more than one root, with the roots in search order."""
        owners: dict[str, list[str]] = {}
        for library in self.libraries:
            for name in library.names():
                owners.setdefault(name, []).append(library.base_path)
        return {name: roots for name, roots in owners.items() if len(roots) > 1}

    def missing_roots(self) -> list[str]:
        return [library.base_path for library in self.libraries if not library.exists]
